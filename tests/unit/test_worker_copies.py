"""The worker's side of redundant copies (docs/redundancy.md): a copy starts from its task's
checkpoint, every attempt reports its exact progress when asked (and when cancelled), and a
restore moves an attempt that is behind forward, restarting its run with the work left."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.commands import KillTask, Log, ReportToLM, RunTask
from common.events import TaskCheckpointRequested, TaskRestored
from common.models import NodeSpec
from common.reasons import Reason
from common.resources import Resources
from common.speed import NodeSpeed, SpeedModel
from tests.unit.test_worker import harness, node, place, stim


def of(commands: list, kind: type) -> list:
    return [c for c in commands if isinstance(c, kind)]


def log(commands: list, event: str) -> dict:
    [fields] = [c.fields for c in commands if isinstance(c, Log) and c.event == event]
    return fields


def checkpoint(h, *attempts: str, advance: float = 1.0) -> list:
    return h.send(TaskCheckpointRequested(stim(), attempts), advance)


def test_a_copy_runs_only_the_work_its_checkpoint_leaves() -> None:
    h = harness()
    copy = replace(place("t#1~0.1"), start_work=4.0, copy_of="t#1")
    commands = h.assign(copy)
    [run] = of(commands, RunTask)
    assert run.duration == 6.0  # 10 s of work, 4 done by another copy
    started = log(commands, "task_started")
    assert started["copy_of"] == "t#1" and started["start_work"] == 4.0
    finished = h.end("t#1~0.1", runtime=6.0)
    assert log(finished, "task_finished")["own_work"] == 6.0


def test_progress_is_reported_when_asked_and_when_cancelled() -> None:
    h = harness(node("n1"), node("n2", cpu=500, mem=500))
    h.assign(place("a#1"))  # starts at t=1
    h.assign(place("b#1", "n2", cpu=500))  # starts at t=2
    h.assign(place("c#1", "n2"))  # queued behind b at t=3
    commands = checkpoint(h, "a#1", "c#1", "gone#1", advance=2.5)  # t=5.5
    assert [(r.attempt_id, r.kind, r.work) for r in of(commands, ReportToLM)] == [
        ("a#1", Reason.CHECKPOINTED, 4.5), ("c#1", Reason.CHECKPOINTED, 0.0)]
    cancelled = h.cancel("a#1", Reason.CANCELLED)  # t=6.5
    [report] = of(cancelled, ReportToLM)
    assert report.work == 5.5 and log(cancelled, "task_cancelled")["own_work"] == 5.5


def test_a_restore_ahead_restarts_the_run_with_the_work_left() -> None:
    h = harness()
    h.assign(place("a#1"))  # t=1, 10 s of work
    commands = h.send(TaskRestored(stim(), "a#1", 7.0), 2.0)  # t=3: 2 done, moved to 7
    assert [type(c) for c in commands] == [KillTask, RunTask, Log]
    assert of(commands, RunTask)[0].duration == 3.0
    restored = log(commands, "task_restored")
    assert (restored["from_work"], restored["to_work"]) == (2.0, 7.0)
    assert of(checkpoint(h, "a#1"), ReportToLM)[0].work == 8.0  # t=4
    finished = h.end("a#1", runtime=3.0)  # the second run's own measure
    assert of(finished, ReportToLM)[0].runtime == 5.0  # both runs: its whole wall time
    assert log(finished, "task_finished")["own_work"] == 5.0  # 2 + 3, not the 5 jumped


def test_a_restore_behind_or_of_an_unknown_attempt_changes_nothing() -> None:
    h = harness()
    h.assign(place("a#1"))
    assert h.send(TaskRestored(stim(), "a#1", 0.5), 2.0) == []  # 2 s done already
    assert h.send(TaskRestored(stim(), "nobody#1", 5.0)) == []


def test_a_queued_attempt_restored_starts_from_there() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))  # queued
    assert of(h.send(TaskRestored(stim(), "b#1", 6.0)), Log)
    commands = h.end("a#1")
    [run] = [c for c in of(commands, RunTask) if c.attempt_id == "b#1"]
    assert run.duration == 4.0


def test_progress_on_a_varying_node_is_what_its_speed_did() -> None:
    spec = NodeSpec("n1", "lm-1", "w1", Resources(1000, 1000))
    h = harness(spec, speed=SpeedModel(), speed_seed=3)
    h.assign(place("a#1", duration=100.0))  # t=1
    [report] = of(checkpoint(h, "a#1", advance=30.0), ReportToLM)  # t=31
    speed = NodeSpeed(SpeedModel(), "3/n1")
    speed.time_to_do(1.0, 100.0)
    expected = speed.work_until(31.0) - speed.work_until(1.0)
    assert report.work == pytest.approx(expected) and report.work != pytest.approx(30.0)


def test_a_copy_is_never_suspended_for_a_shorter_arrival() -> None:
    h = harness(preemptive=True)
    h.assign(replace(place("t#1~0.1", cpu=1000, priority=1000.0), copy_of="t#1"))
    commands = h.assign(place("short#1", cpu=1000, priority=1.0))
    assert not of(commands, KillTask)
    assert h.worker.queue_length() == 1
