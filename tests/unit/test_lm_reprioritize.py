"""The LM's part in a reprioritization (docs/local-queues.md, Estimates that change): a GM's new
priority for its job re-keys the job's attempts here and its copy candidates, and goes to each
worker holding one of its attempts, once; an LM with neither queues nor copies ignores it."""

from __future__ import annotations

from dataclasses import replace

from common.commands import Log, ReprioritizeOnWorker, StartOnWorker, StopOnWorker
from common.events import ReprioritizeRequested, WorkerTaskStarted
from common.lm import LocalMaster
from common.reasons import Reason
from tests.unit.test_lm import item, launch, reasons, topology


def reprioritize(lm: LocalMaster, job_id: str, priority: float, gm: str = "gm-1") -> list:
    commands = lm.handle(ReprioritizeRequested("r", gm, job_id, priority), 1.0)
    lm.validate()
    return commands


def run(lm: LocalMaster, attempt: str, node: str, priority: float, gm: str = "gm-1",
        cpu: int = 1000) -> None:
    """Launch `attempt` on `node` carrying `priority`, and report its start."""
    placement = replace(item(attempt, node, gm=gm, cpu=cpu), priority=priority)
    assert reasons(launch(lm, placement, gm=gm)) == [Reason.LAUNCHED]
    worker = lm.topology.workers[lm.topology.index[node]]
    lm.handle(WorkerTaskStarted("s", worker, attempt, 0.5), 0.5)
    lm.validate()


def of(commands: list, kind: type) -> list:
    return [c for c in commands if isinstance(c, kind)]


def test_a_new_priority_goes_once_to_each_worker_holding_the_job() -> None:
    lm = LocalMaster(topology(), queue_depth=2)
    run(lm, "a/0#1", "n0", 40.0, cpu=4000)  # w0
    queued = replace(item("a/1#1", "n0", cpu=4000), priority=40.0)
    assert reasons(launch(lm, queued)) == [Reason.QUEUED]  # w0 too, in n0's queue
    run(lm, "a/2#1", "n1", 40.0)  # w1
    run(lm, "b/0#1", "n1", 7.0)  # another job on w1
    commands = reprioritize(lm, "a", 10.0)
    assert commands == [ReprioritizeOnWorker("w0", "a", 10.0),
                        ReprioritizeOnWorker("w1", "a", 10.0)]
    # the LM's own books carry it too (a copy, or an adoption, would take it from there)
    assert {a: lm.running[a].placement.priority for a in lm.running} == {
        "a/0#1": 10.0, "a/1#1": 10.0, "a/2#1": 10.0, "b/0#1": 7.0}


def test_a_request_from_another_gm_or_for_a_job_not_here_changes_nothing() -> None:
    lm = LocalMaster(topology(), queue_depth=2)
    run(lm, "a/0#1", "n0", 40.0)
    ignored = reprioritize(lm, "a", 10.0, gm="gm-2")
    assert not of(ignored, ReprioritizeOnWorker)
    assert [c.event for c in of(ignored, Log)] == ["reprioritize_ignored"]
    assert reprioritize(lm, "nobody", 10.0) == []
    assert lm.running["a/0#1"].placement.priority == 40.0


def test_an_lm_without_queues_or_copies_ignores_a_request_and_keeps_no_index() -> None:
    lm = LocalMaster(topology())
    run(lm, "a/0#1", "n0", 40.0)
    assert reprioritize(lm, "a", 10.0) == []
    assert lm.running["a/0#1"].placement.priority == 40.0
    assert lm._attempts.by_job is None  # nothing kept per job: the default costs nothing


def test_a_new_priority_rekeys_the_copy_candidates_and_moves_the_copy() -> None:
    """srpt+r with one idle node (n3) among three candidates: its copy goes to the task of
    least remaining work, b's; once a's job is estimated at less, a gets it."""
    lm = LocalMaster(topology(), redundancy="srpt+r", max_copies=0)
    run(lm, "a/0#1", "n0", 50.0)
    run(lm, "b/0#1", "n1", 10.0)
    run(lm, "c/0#1", "n2", 30.0, gm="gm-2")
    copies = lm.copies
    assert list(copies.candidates.least_work_first()) == ["b/0#1", "c/0#1", "a/0#1"]
    assert [copy.placement.copy_of for copy in copies.copies.values()] == ["b/0#1"]
    commands = reprioritize(lm, "a", 5.0)
    assert list(copies.candidates.least_work_first()) == ["a/0#1", "b/0#1", "c/0#1"]
    assert list(copies.candidates.latest_first()) == ["c/0#1", "b/0#1", "a/0#1"]  # arrivals
    assert of(commands, ReprioritizeOnWorker) == [ReprioritizeOnWorker("w0", "a", 5.0)]
    [stop] = of(commands, StopOnWorker)
    [start] = of(commands, StartOnWorker)
    assert stop.worker == "w1" and start.placement.copy_of == "a/0#1"
    assert start.placement.node_id == "n3" and start.placement.priority == 5.0


def test_an_infinite_priority_is_kept_here_and_not_sent_to_workers() -> None:
    """Workers key their queues by finite priorities (`JobReprioritized` refuses others); a
    GM never sends one, and one that arrives re-keys only the LM's own books."""
    lm = LocalMaster(topology(), queue_depth=2)
    run(lm, "a/0#1", "n0", 40.0)
    assert reprioritize(lm, "a", float("inf")) == []
    assert lm.running["a/0#1"].placement.priority == float("inf")
