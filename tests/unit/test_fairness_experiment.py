"""`megha experiment fairness` (simulator/experiments/fairness.py) at a tiny size: the
runs, the per-queue figures in results.json, the table and the HTML report; the workload
scaled per size (the default) and fixed for one size (`--fixed-for`, the paper's mechanism)."""

from __future__ import annotations

import json

import pytest

from simulator.experiments.fairness import QUEUES, Workload


def test_the_experiment_writes_the_per_queue_figures(tmp_path) -> None:
    from megha.cli import main

    out = tmp_path / "out"
    assert main(["experiment", "fairness", "--sizes", "10,20", "--jobs", "3",
                 "--values", "paper,default,none", "--workers", "1", "--out", str(out),
                 "--html", str(out / "report.html")]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"] == "fairness"
    assert [run["name"] for run in results["runs"]] == [
        "10/paper", "10/default", "10/none", "20/paper", "20/default", "20/none"]
    queues = [queue.name for queue in QUEUES]
    for run in results["runs"]:
        assert {"jct", "allocation", "counts", "share_over_time", "contention"} <= set(run)
        assert set(run["allocation"]["by_user"]) == set(queues)
        series = run["share_over_time"]
        assert set(series["queues"]) == set(queues)
        assert all(len(shares) == len(series["t"]) for shares in series["queues"].values())
        assert all(0.0 <= share <= 1.0 for shares in series["queues"].values()
                   for share in shares)
        assert series["configured"] == {"q1": 0.1, "q2": 0.25, "q3": 0.15, "q4": 0.5}
        shares = run["contention"]["mean_share"]
        assert set(shares) == set(queues) and 0.0 < sum(shares.values()) <= 1.0 + 1e-9
        counts = run["counts"]
        # each queue offers 60% of the cluster while its GM owns a third of it: it must borrow
        assert counts["repartitions"] > 0
        # slot mode: an attempt names one victim, which the LM preempts or refuses to
        assert counts["preemption_attempts"] == counts["preemptions"] + counts[
            "preemptions_refused"]
        assert (counts["preemption_attempts"] > 0) == (run["variant"] != "none")
        assert run["workload"] == {"kind": "scaled", "fixed_for": None,
                                   "width": run["nodes"] * 8, "tasks": run["nodes"] * 96,
                                   "phase3_load": 2.4}
        assert (out / f"{run['name'].replace('/', '-')}.log").exists()
    by_name = {run["name"]: run for run in results["runs"]}
    assert by_name["10/none"]["counts"]["preemption_attempts"] == 0
    assert by_name["10/paper"]["counts"]["preemption_attempts"] > 0
    assert by_name["10/paper"]["fairness_options"]["queue_order"] == "round_robin"
    assert by_name["10/default"]["fairness_options"]["queue_order"] == "job_policy"
    assert "fairness_shares" in (out / "report.html").read_text()
    assert (out / "plots" / "fairness_shares.png").exists()


def test_every_cluster_sees_the_same_offered_load() -> None:
    workload = Workload(jobs_per_queue=50)
    for nodes in (200, 500, 1500):
        width = workload.width(nodes)
        work = workload.jobs_per_queue * width * workload.task_s
        assert work / (nodes * 4 * workload.phase_s) == pytest.approx(
            workload.load_per_queue, rel=0.05)
    jobs = workload.jobs(200, seed=1)
    assert jobs == workload.jobs(200, seed=1)  # seeded
    for i, queue in enumerate(QUEUES):  # each queue submits during its four phases
        arrivals = [job.arrival for job in jobs if job.user == queue.name]
        assert len(arrivals) == 50
        assert i * workload.phase_s <= min(arrivals) and max(arrivals) <= (
            (i + 4) * workload.phase_s)


def test_a_bad_variant_or_size_is_refused_by_name(capsys) -> None:
    from megha.cli import main

    assert main(["experiment", "fairness", "--values", "paper,drf", "--no-log"]) != 0
    assert "--values: 'drf' is not a fairness variant" in capsys.readouterr().err
    assert main(["experiment", "fairness", "--sizes", "2", "--no-log"]) != 0
    assert "--sizes: each cluster needs at least 5 nodes" in capsys.readouterr().err


def test_a_fixed_workload_is_the_same_job_list_on_every_size() -> None:
    fixed, scaled = Workload(jobs_per_queue=3, fixed_for=20), Workload(jobs_per_queue=3)
    jobs = fixed.jobs(10, seed=1)
    assert jobs == fixed.jobs(40, seed=1) == fixed.jobs(20, seed=1)  # widths, durations, arrivals
    assert jobs == scaled.jobs(20, seed=1)  # the scaled workload of the size it is fixed for
    assert {len(job.tasks) for job in jobs} == {fixed.width(10)} == {160}
    assert fixed.phase3_load(10) == pytest.approx(4.8)
    assert fixed.phase3_load(40) == pytest.approx(1.2)
    small, large = scaled.jobs(10, seed=1), scaled.jobs(40, seed=1)
    assert small != large
    assert {len(job.tasks) for job in small} == {80} and {len(job.tasks) for job in large} == {320}
    assert scaled.phase3_load(10) == scaled.phase3_load(40) == pytest.approx(2.4)


def test_a_fixed_workload_waits_longer_and_preempts_more_on_a_smaller_cluster(tmp_path,
                                                                              capsys) -> None:
    """The paper's direction (its Figures 10 and 11): one workload, built for 20 nodes, offers
    4.8 times a 10-node cluster in phase 3 and 1.2 times a 40-node one. Across seeds 0 to 3,
    the 10-node p50 was 14 to 30 times the 40-node one, preemptions 4 to 7 times."""
    from megha.cli import main

    out = tmp_path / "out"
    assert main(["experiment", "fairness", "--sizes", "10,40", "--fixed-for", "20", "--jobs",
                 "3", "--values", "paper", "--workers", "1", "--no-log", "--out",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert "workload fixed for 20 nodes (the same jobs on every size)" in printed
    assert "10 nodes: jobs of 160 tasks, 1,920 tasks, phase 3 offers 4.80x the cluster" in printed
    assert "40 nodes: jobs of 160 tasks, 1,920 tasks, phase 3 offers 1.20x the cluster" in printed
    small, large = json.loads((out / "results.json").read_text())["runs"]
    assert (small["name"], large["name"]) == ("10/paper", "40/paper")
    for run in (small, large):
        assert run["workload"] == {"kind": "fixed", "fixed_for": 20, "width": 160,
                                   "tasks": 1920, "phase3_load": 1.2 if run is large else 4.8}
        assert run["counts"]["tasks_started"] == 1920
    assert small["allocation"]["overall"]["p50"] > 2 * large["allocation"]["overall"]["p50"]
    assert small["allocation"]["overall"]["mean"] > 2 * large["allocation"]["overall"]["mean"]
    for count in ("repartitions", "preemption_attempts", "preemptions"):
        assert small["counts"][count] > large["counts"][count], count


@pytest.mark.parametrize("value", ["0", "-500"])
def test_a_fixed_workload_for_no_nodes_is_refused_by_name(value, capsys) -> None:
    from megha.cli import main

    assert main(["experiment", "fairness", "--fixed-for", value, "--no-log"]) != 0
    assert f"--fixed-for: must be at least 1, got {value}" in capsys.readouterr().err
