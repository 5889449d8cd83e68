"""Local queues in whole simulated runs: tasks wait on busy nodes, the worker's SRPT order
decides who runs next, a preemptive queue suspends and resumes, and every task completes
exactly once (the simulator's end-of-run invariants)."""

from __future__ import annotations

import dataclasses

import pytest

from common.models import JobSpec, TaskSpec
from common.resources import Resources
from simulator.cluster import SLOT, shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation


def job(job_id: str, arrival: float, durations: list[float]) -> JobSpec:
    """A job whose trace estimate is its true mean task duration (SRPT's key)."""
    return JobSpec(job_id, "q1", tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(*SLOT),
                                                duration=d) for i, d in enumerate(durations)),
                   arrival, estimated_task_duration=sum(durations) / len(durations))


def run(nodes: int, jobs: list[JobSpec], **local_queues):
    federation = shaped_federation(nodes, 1, 1, slots=True, heartbeat_interval=1.0)
    options = federation.policies.local_queues.model_copy(update=local_queues)
    federation = dataclasses.replace(federation, policies=federation.policies.model_copy(
        update={"local_queues": options}))
    log = SimLog("megha")
    sim = FederatedSimulation(federation, jobs, log)
    outcome = sim.run()
    sim.check_invariants()
    assert all(count == 1 for count in outcome.completions.values()), outcome.completions
    assert set(outcome.ended.values()) == {"done"}
    starts = {}
    for attempt in log.analysis.attempts.values():
        if attempt.started is not None:
            starts[attempt.task] = attempt.started
    return outcome, log, starts


def test_without_depth_the_shortest_waits_in_the_gm_in_arrival_order() -> None:
    jobs = [job("long", 0.0, [10.0]), job("mid", 0.1, [5.0]), job("short", 0.2, [1.0])]
    _, log, starts = run(1, jobs)
    assert starts["mid/0"] < starts["short/0"]  # the GM's FIFO
    assert log.report()["counts"]["launches_queued"] == 0


def test_with_depth_the_worker_runs_the_shortest_queued_task_first() -> None:
    jobs = [job("long", 0.0, [10.0]), job("mid", 0.1, [5.0]), job("short", 0.2, [1.0])]
    _, log, starts = run(1, jobs, depth=2)
    # both wait in the node's queue; when long ends the worker starts short (SRPT), at once
    assert starts["short/0"] < starts["mid/0"]
    assert starts["short/0"] == pytest.approx(10.0, abs=0.01)
    counts = log.report()["counts"]
    assert counts["launches_queued"] == 2
    assert log.report()["breakdown"]["p50_s"]["worker_queuing"] > 9.0  # the wait is there


def test_a_full_queue_keeps_the_rest_in_the_gm_until_room() -> None:
    jobs = [job(f"j{k}", 0.1 * k, [2.0]) for k in range(5)]
    _, log, _ = run(1, jobs, depth=1)
    assert log.report()["counts"]["launches_queued"] == 4  # one at a time, as room came


def test_preemptive_queue_suspends_a_long_task_and_resumes_it_with_its_work_left() -> None:
    jobs = [job("long", 0.0, [100.0]), job("short", 1.0, [1.0])]
    _, log, starts = run(1, jobs, depth=2, preemptive=True)
    assert starts["short/0"] == pytest.approx(1.0, abs=0.01)  # suspended long at once
    counts = log.report()["counts"]
    assert counts["suspensions"] == 1 and counts["resumes"] == 1
    # long did 1 s, waited 1 s, then ran its 99 s left: its job ends at about 101 s
    jct = log.report()["jct"]["overall"]
    assert jct["max"] == pytest.approx(101.0, abs=0.05)
