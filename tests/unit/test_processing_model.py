"""`--processing model`: the simulator's calibrated per-operation costs (simulator/processing.py).
Repeatable (a seed gives the same log, byte for byte), charged where the cores work, queued
behind one another at a busy service, and split by the analysis into components that add
up to the allocation time, idle and saturated alike."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import InvalidInput
from common.models import JobSpec, TaskSpec
from common.resources import Resources
from inspection.analysis import COMPONENTS
from loadgen.paper_workloads import YH1_SUB
from simulator.cluster import SLOT, shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation
from simulator.processing import (
    CALIBRATED,
    OPERATIONS,
    ProcessingCosts,
    ProcessingModel,
    parse_processing,
)

ROOT = Path(__file__).resolve().parents[2]
D = 0.0005  # the default one-way delay


def job(job_id: str, arrival: float, width: int, duration: float = 5.0,
        user: str = "q1") -> JobSpec:
    return JobSpec(job_id, user, tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(*SLOT),
                                                duration=duration) for i in range(width)),
                   arrival)


def simulate(nodes: int, jobs: list[JobSpec], gms: int = 1, lms: int = 1,
             costs: ProcessingCosts | None = None) -> tuple[FederatedSimulation, SimLog]:
    federation = shaped_federation(nodes, gms, lms, slots=True, heartbeat_interval=1.0)
    log = SimLog("megha")
    sim = FederatedSimulation(federation, jobs, log, processing="model")
    if costs is not None:
        sim.model = ProcessingModel(costs)
    sim.run()
    sim.check_invariants()
    return sim, log


def starts(log: SimLog) -> dict[str, float]:
    return {task: attempt.started for task, attempt in log.analysis._first_starts().items()}


def test_a_lone_task_waits_two_delays_and_the_three_cores_modelled_costs():
    c = CALIBRATED
    _, log = simulate(4, [job("a", 1.0, 1)])
    gm = c.gm_event + c.gm_job + c.gm_task_admitted + c.gm_decision
    lm = c.lm_event + c.lm_item + c.lm_node_shown * 4
    worker = c.worker_event
    assert starts(log)["a/0"] == pytest.approx(1.0 + gm + D + lm + D + worker)


def test_a_gms_processing_grows_with_its_decisions():
    # one job of n tasks is one step of the GM: n decisions; its last task leaves with it
    c = CALIBRATED
    spans = {}
    for width in (1, 10, 40):
        _, log = simulate(64, [job("a", 1.0, width)])
        placed = [e for e in _lines(log, "task_placed")]
        spans[width] = placed[0]["handle_s"]
        assert all(e["work_s"] == pytest.approx(c.gm_decision + c.gm_task_admitted)
                   for e in placed)
    assert spans[10] - spans[1] == pytest.approx(9 * (c.gm_decision + c.gm_task_admitted))
    assert spans[40] - spans[10] == pytest.approx(30 * (c.gm_decision + c.gm_task_admitted))


def test_costlier_decisions_make_allocation_slower_and_it_shows_as_gm_processing():
    slow = dataclasses.replace(CALIBRATED, gm_decision=0.001)
    _, quick_log = simulate(32, [job("a", 1.0, 20)])
    _, slow_log = simulate(32, [job("a", 1.0, 20)], costs=slow)
    quick = quick_log.report()["breakdown"]["components"]["mean_s"]
    slowed = slow_log.report()["breakdown"]["components"]["mean_s"]
    assert slowed["processing_gm"] == pytest.approx(0.001 + CALIBRATED.gm_task_admitted)
    # each task waits for the decisions of the others in the same step: batch wait
    assert slowed["batch_wait"] > quick["batch_wait"] + 0.005
    assert slowed["framework_queuing"] == pytest.approx(quick["framework_queuing"], abs=1e-4)
    assert slowed["communication"] == pytest.approx(2 * D)


def test_a_busy_service_queues_events_in_arrival_order():
    # two jobs at once on one GM: the second's submission waits for the first's step
    c = CALIBRATED
    _, log = simulate(64, [job("a", 1.0, 30), job("b", 1.0, 1)])
    placed_b = next(e for e in _lines(log, "task_placed") if e["job"] == "b")
    first_step = c.gm_event + c.gm_job + 30 * (c.gm_decision + c.gm_task_admitted)
    assert placed_b["wait_s"] == pytest.approx(first_step)


def test_the_components_add_up_to_the_mean_allocation_time():
    _, log = simulate(40, [job(f"j{k}", 0.5 * k, 1 + 7 * k % 13) for k in range(12)],
                      gms=2, lms=2)
    report = log.report()
    components = report["breakdown"]["components"]
    assert set(components["mean_s"]) == set(COMPONENTS)
    assert sum(components["mean_s"].values()) == pytest.approx(
        report["allocation"]["overall"]["mean"])
    assert sum(components["share"].values()) == pytest.approx(1.0)
    # and the four-part split of the services is still whole
    assert sum(report["breakdown"]["mean_s"].values()) == pytest.approx(
        report["allocation"]["overall"]["mean"])


def test_under_saturation_the_components_show_waiting_and_still_add_up():
    # 4 slots, 30 one-task jobs of 2 s arriving over 3 s: most tasks wait for a slot, and
    # the two GMs race for the same freed slots (refusals, retries)
    jobs = [job(f"j{k}", 0.1 * k, 1, duration=2.0, user=f"q{1 + k % 2}") for k in range(30)]
    _, log = simulate(4, jobs, gms=2, lms=2)
    report = log.report()
    components = report["breakdown"]["components"]["mean_s"]
    assert report["counts"]["jobs_done"] == 30
    assert components["waiting_for_resources"] > 1.0
    assert sum(components.values()) == pytest.approx(report["allocation"]["overall"]["mean"])


def _log_bytes(tmp_path: Path, name: str, *extra: str) -> bytes:
    path = tmp_path / f"{name}.log"
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "200", "--gms", "2", "--lms",
         "4", "--slots", "--trace", str(YH1_SUB), "--jobs", "40",
         "--processing", "model", "--seed", "5", "--log", str(path), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return path.read_bytes()


def test_the_model_is_a_function_of_the_seed(tmp_path):
    # saturated: 200 slots for YH1_sub's wide jobs at 1.2 times their load
    first = _log_bytes(tmp_path, "a", "--target-load", "1.2")
    assert first == _log_bytes(tmp_path, "b", "--target-load", "1.2")
    assert first.count(b'"wait_s"') > 1000 and b'"wait_s":0.0' in first


def _lines(log: SimLog, event: str) -> list[dict]:
    """The log's lines of one kind, read back from the analysis's input: SimLog keeps none,
    so the test logs to a list through a wrapper."""
    return [line for line in log.lines if line["event"] == event]


@pytest.fixture(autouse=True)
def _keep_lines(monkeypatch):
    """SimLog keeps every line it emits in `lines`, for these tests."""
    emit = SimLog.emit

    def keeping(self, ts, svc, event, fields=None, handle_s=None):
        record = {"ts": ts, "svc": svc, "event": event, **(fields or {})}
        if handle_s is not None:
            record["handle_s"] = handle_s
        if not hasattr(self, "lines"):
            self.lines = []
        self.lines.append(record)
        emit(self, ts, svc, event, fields, handle_s)

    monkeypatch.setattr(SimLog, "emit", keeping)


@pytest.mark.parametrize("text, parsed", [("none", ("none", 1.0)), ("model", ("model", 1.0)),
                                          ("model:0.1", ("model", 0.1)),
                                          ("measured", ("measured", 1.0))])
def test_processing_values_parse(text, parsed):
    assert parse_processing(text) == parsed


@pytest.mark.parametrize("text", ["modl", "model:", "model:-1", "model:nan", "measured:2"])
def test_a_bad_processing_value_is_refused_naming_the_option(text):
    with pytest.raises(InvalidInput, match="--processing"):
        parse_processing(text)


def test_scaled_costs_scale_every_operation():
    tenth = CALIBRATED.scaled(0.1)
    for name in OPERATIONS:
        assert getattr(tenth, name) == pytest.approx(getattr(CALIBRATED, name) * 0.1)
