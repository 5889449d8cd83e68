"""`megha experiment fairness` (simulator/experiments/fairness.py) at a tiny size: the
runs, the per-queue figures in results.json, the table and the HTML report."""

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
        for count in ("repartitions", "preemption_attempts", "preemptions"):
            assert run["counts"][count] >= 0
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
