"""The simulator: small scenarios whose allocation times are worked out by hand, the baselines'
published behaviour, invariants at the end of a run, and repeatability."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.models import JobSpec, TaskSpec
from common.resources import Resources
from loadgen.paper_workloads import YH1_SUB
from simulator.baselines import RandomSimulation, SparrowSimulation
from simulator.cluster import SLOT, shaped_federation
from simulator.engine import DelayModel
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation

ROOT = Path(__file__).resolve().parents[2]
D = 0.0005  # the default one-way delay


def job(job_id: str, arrival: float, durations: list[float], user: str = "q1") -> JobSpec:
    return JobSpec(job_id, user, tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(*SLOT),
                                                duration=d) for i, d in enumerate(durations)),
                   arrival)


def starts(log: SimLog) -> dict[str, float]:
    first = log.analysis._first_starts()
    return {task: attempt.started for task, attempt in first.items()}


def federated(nodes: int, jobs: list[JobSpec], gms: int = 1, lms: int = 1, **kwargs):
    federation = shaped_federation(nodes, gms, lms, slots=True, heartbeat_interval=1.0)
    log = SimLog("megha")
    sim = FederatedSimulation(federation, jobs, log, **kwargs)
    outcome = sim.run()
    sim.check_invariants()
    return outcome, log


def test_a_task_on_an_idle_cluster_starts_two_delays_after_arrival():
    # the GM places at once; the launch reaches the LM after one delay, the worker after two
    outcome, log = federated(4, [job("a", 1.0, [5.0, 5.0])])
    assert starts(log) == {"a/0": pytest.approx(1.0 + 2 * D), "a/1": pytest.approx(1.0 + 2 * D)}
    # the end: the worker reports to the LM (one delay), the LM publishes to the GM (another)
    jct = log.report()["jct"]["overall"]
    assert jct["max"] == pytest.approx(2 * D + 5.0 + 2 * D)
    assert outcome.ended == {"a": "done"} and outcome.completions == {"a/0": 1, "a/1": 1}


def test_a_task_waiting_for_a_slot_starts_after_the_next_heartbeat_shows_it_free():
    # 1 slot, two one-task jobs at 0. a runs from 2D to 2D + 3; its end reaches the LM at
    # 2D + 3 + D. The GM learns that the slot is free from the LM's next heartbeat (every
    # 1 s here, at a seeded phase), one delay later, and launches b: two delays more.
    _, log = federated(1, [job("a", 0.0, [3.0]), job("b", 0.0, [1.0])])
    freed_at_lm = 2 * D + 3.0 + D
    b = starts(log)["b/0"]
    assert freed_at_lm + 3 * D <= b <= freed_at_lm + 1.0 + 3 * D
    breakdown = log.report()["breakdown"]
    assert breakdown["mean_s"]["communication"] == pytest.approx(2 * D)  # both: two hops
    assert breakdown["mean_s"]["framework_queuing"] == pytest.approx((b - 2 * D) / 2)
    assert breakdown["mean_s"]["worker_queuing"] == 0


def test_measured_processing_adds_each_cores_cpu_time_to_the_two_delays():
    # Each service is a single server that takes its core's measured CPU time: a start comes
    # later than the two delays by at least the three handles (GM, LM, worker) on its way,
    # and the breakdown's processing part is exactly what the log's handle_s fields sum to.
    _, log = federated(8, [job("a", 1.0, [5.0] * 4), job("b", 1.0, [5.0] * 4)],
                       processing="measured")
    breakdown = log.report()["breakdown"]
    processing = breakdown["mean_s"]["processing"]
    assert breakdown["tasks"] == 8 and processing > 0
    for started in starts(log).values():
        assert started > 1.0 + 2 * D
    # two delays, plus any wait for a service busy with an earlier message
    assert breakdown["mean_s"]["communication"] >= 2 * D - 1e-12
    allocation = log.report()["allocation"]["overall"]["mean"]
    assert allocation == pytest.approx(sum(breakdown["mean_s"].values()))


def test_a_run_reports_the_same_figures_with_and_without_its_log_file(tmp_path):
    """Without a file the log builds no line the analysis does not read (`EVENTS_READ`):
    the figures and the count of events are the same either way."""
    jobs = [job(f"j{n}", 0.2 * n, [1.0 + n % 3] * (1 + n % 4)) for n in range(12)]
    reports = []
    for path in (None, tmp_path / "run.log"):
        federation = shaped_federation(4, 2, 2, slots=True, heartbeat_interval=1.0)
        log = SimLog("megha", path)
        FederatedSimulation(federation, jobs, log).run()
        log.close()
        reports.append((log.events, log.report()))
    assert reports[0] == reports[1]
    written = (tmp_path / "run.log").read_text().splitlines()
    assert len(written) == reports[1][0]
    assert any(json.loads(line)["event"] == "request_sent" for line in written)


def test_sparrow_takes_three_delays_probe_request_answer():
    federation = shaped_federation(4, 1, 1, slots=True)
    log = SimLog("sparrow")
    sim = SparrowSimulation(federation, [job("a", 1.0, [2.0, 2.0])], log)
    assert sim.run() == 1
    assert list(starts(log).values()) == [pytest.approx(1.0 + 3 * D)] * 2
    # 4 probes (ratio 2) for 2 tasks: two nodes get an empty answer and stay idle
    assert sum(node.free for node in sim.nodes) == 4


def test_sparrow_probes_wait_behind_a_long_task():
    # 2 slots; job a (one 10 s task, probe ratio 1) starts at 3D on some node. Job b (two
    # tasks) probes both nodes at 1.0: the idle one answers and starts b's first task at
    # 1 + 3D; b's other probe waits behind a, whose end frees that slot at 3D + 10, and its
    # request and answer take 2D more. The idle node cannot help: it holds no probe of b.
    federation = shaped_federation(2, 1, 1, slots=True)
    log = SimLog("sparrow")
    jobs = [job("a", 0.0, [10.0]), job("b", 1.0, [1.0, 1.0])]
    SparrowSimulation(federation, jobs, log, probe_ratio=1.0, seed=3).run()
    times = sorted(t for task, t in starts(log).items() if task.startswith("b/"))
    assert times == [pytest.approx(1.0 + 3 * D), pytest.approx(3 * D + 10.0 + 2 * D)]


def test_random_placement_starts_after_one_delay_and_queues_fifo():
    federation = shaped_federation(1, 1, 1, slots=True)
    log = SimLog("random")
    sim = RandomSimulation(federation, [job("a", 0.0, [2.0]), job("b", 0.5, [1.0])], log)
    sim.run()
    assert starts(log) == {"a/0": pytest.approx(D), "b/0": pytest.approx(D + 2.0)}


def test_the_same_seed_gives_the_same_event_log(tmp_path):
    logs = []
    for run in range(2):
        path = tmp_path / f"run{run}.log"
        done = subprocess.run(
            [sys.executable, "-m", "megha", "simulate", "--nodes", "200", "--gms", "2", "--lms",
             "4", "--slots", "--trace", str(ROOT / "deploy" / "workloads" / "YH_small.tr"),
             "--delay", "exp:0.0005", "--log", str(path), "--seed", "5"],
            capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        logs.append(path.read_bytes())
    assert logs[0] == logs[1] and len(logs[0]) > 10_000
    assert b'"event":"task_started"' in logs[0]


def test_delay_models_parse_and_refuse():
    assert str(DelayModel.parse(None)) == "const:0.0005"
    assert str(DelayModel.parse("uniform:0.0001,0.001")) == "uniform:0.0001,0.001"
    with pytest.raises(Exception, match="--delay"):
        DelayModel.parse("fast")


def test_the_baselines_experiment_runs_every_scheduler_on_one_workload(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "megha", "experiment", "baselines", "--jobs", "15", "--nodes",
         "300", "--gms", "2", "--lms", "3", "--out", str(tmp_path), "--html",
         str(tmp_path / "report.html")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [run["name"] for run in results["runs"]] == ["megha", "centralized", "sparrow",
                                                        "random"]
    tasks = {run["allocation"]["overall"]["count"] for run in results["runs"]}
    assert len(tasks) == 1 and tasks.pop() > 15  # the same workload for all
    assert results["runs"][1]["shape"]["gms"] == 1 and results["runs"][0]["shape"]["gms"] == 2
    assert "sparrow / megha" in (tmp_path / "table.txt").read_text()
    assert (tmp_path / "report.html").stat().st_size > 10_000
    refused = subprocess.run([sys.executable, "-m", "megha", "experiment", "gms-lms",
                              "--values", "4by2"], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert refused.returncode == 2 and "'4by2' is not one of the GxL pairs" in refused.stderr


def test_the_slearn_experiment_compares_predictors_on_both_workloads(tmp_path):
    """Tiny: 40 slots, 30 drifting jobs and 20 of YH1_sub, three predictors, load 1."""
    done = subprocess.run(
        [sys.executable, "-m", "megha", "experiment", "slearn", "--nodes", "40", "--gms", "1",
         "--lms", "2", "--count", "30", "--jobs", "20", "--values", "slearn,fifo,oracle",
         "--out", str(tmp_path), "--html", str(tmp_path / "report.html")],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for workload, jobs in (("drifting", 30), ("yh1", 20)):
        results = json.loads((tmp_path / workload / "results.json").read_text())
        runs = {run["name"]: run for run in results["runs"]}
        assert list(runs) == ["slearn", "fifo", "oracle"]
        assert {run["jct"]["overall"]["count"] for run in runs.values()} == {jobs}
        assert runs["oracle"]["estimation"]["error"]["p50"] == pytest.approx(1.0)
        assert "estimation" not in runs["fifo"]
        assert runs["slearn"]["estimation"]["predictor"] == "slearn"
        assert (tmp_path / f"report-{workload}.html").stat().st_size > 10_000
    assert "JCT of each predictor / SLearn's" in done.stdout
    refused = subprocess.run([sys.executable, "-m", "megha", "experiment", "slearn",
                              "--values", "slearn,sjf"], capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
    assert refused.returncode == 2 and "'sjf' is not a job policy" in refused.stderr


@pytest.mark.parametrize("load", [0.5, 1.2])
def test_target_load_in_slot_mode_is_the_load_the_slots_see(tmp_path, load):
    """Every task takes a whole slot in slot mode, whatever cpu the workload gave it (500 m
    by default): `--target-load` counts slots, or a 'load 1' would have been load 2."""
    path = tmp_path / "run.log"
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "50", "--gms", "1", "--lms", "1",
         "--slots", "--trace", str(YH1_SUB),
         "--jobs", "40", "--target-load", str(load), "--log", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in path.read_text().splitlines()]
    arrivals = [e["arrival"] for e in events if e["event"] == "job_arrived"]
    work = sum(e["duration"] for e in events if e["event"] == "task_started"
               and not e.get("resumed"))
    assert work / ((max(arrivals) - min(arrivals)) * 50) == pytest.approx(load, rel=1e-6)
