"""The worker agent core: event in, commands out, with `validate()` after every event."""

from __future__ import annotations

import itertools
from dataclasses import fields, is_dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from common.commands import Command, KillTask, Log, ReportToLM, RunTask
from common.errors import IllegalTransition, InvalidInput, InvariantViolated
from common.events import JobReprioritized, TaskAssigned, TaskCancelled, TaskRunEnded, Tick
from common.messages import Placement
from common.models import NodeSpec, TaskSpec
from common.policies.local_queue import LocalQueueOptions
from common.reasons import Reason
from common.resources import Resources
from common.step import Step
from common.worker import ATTEMPT_TRANSITIONS, AttemptState, WorkerAgent

WORKER = "w1"
_stimuli = itertools.count()


def node(node_id: str = "n1", cpu: int = 1000, mem: int = 1000) -> NodeSpec:
    return NodeSpec(node_id=node_id, lm="lm-1", worker=WORKER, capacity=Resources(cpu, mem))


def place(
    attempt: str,
    node_id: str = "n1",
    cpu: int = 500,
    mem: int = 500,
    priority: float = 0.0,
    pilot: bool = False,
    duration: float | None = 10.0,
    job: str = "job-1",
) -> Placement:
    task = TaskSpec(
        task_id=attempt.split("#")[0], job_id=job, demand=Resources(cpu, mem), duration=duration
    )
    return Placement(attempt, task, node_id, "gm-1", "alice", priority=priority, pilot=pilot)


def stim() -> str:
    return f"s{next(_stimuli)}"


class Harness:
    """Feeds events to one worker and checks its invariants after each one."""

    def __init__(self, worker: WorkerAgent) -> None:
        self.worker = worker
        self.now = 0.0

    def send(self, event, advance: float = 1.0) -> list[Command]:
        self.now += advance
        commands = self.worker.handle(event, self.now)
        self.worker.validate()
        return commands

    def assign(self, placement: Placement) -> list[Command]:
        return self.send(TaskAssigned(stim(), placement))

    def end(self, attempt_id: str, runtime: float = 10.0) -> list[Command]:
        return self.send(TaskRunEnded(stim(), attempt_id, runtime))

    def cancel(self, attempt_id: str, reason: Reason = Reason.PREEMPTED) -> list[Command]:
        return self.send(TaskCancelled(stim(), attempt_id, reason))

    def reprioritize(self, job_id: str, priority: float) -> list[Command]:
        return self.send(JobReprioritized(stim(), job_id, priority))


def harness(*nodes: NodeSpec, **kwargs) -> Harness:
    return Harness(WorkerAgent(WORKER, nodes or (node(),), **kwargs))


def matches(command: object, command_type: type, /, **expected: object) -> bool:
    """A partial matcher: the type and the named fields; Log fields match as a subset."""
    if not isinstance(command, command_type):
        return False
    for name, value in expected.items():
        actual = getattr(command, name)
        if isinstance(value, dict):
            if any(actual.get(key) != item for key, item in value.items()):
                return False
        elif actual != value:
            return False
    return True


def expect(commands: list[Command], *pattern: tuple) -> None:
    """`commands` is exactly the sequence described by (type, {field: value}) pairs."""
    assert len(commands) == len(pattern), commands
    for command, (command_type, expected) in zip(commands, pattern, strict=True):
        assert matches(command, command_type, **expected), f"{command} !~ {expected}"


def started(attempt: str, node_id: str = "n1") -> tuple:
    return (
        (RunTask, {"attempt_id": attempt, "node_id": node_id}),
        (ReportToLM, {"kind": Reason.STARTED, "attempt_id": attempt}),
        (Log, {"event": "task_started", "fields": {"attempt": attempt, "node": node_id}}),
    )


def started_ids(commands: list[Command]) -> list[str]:
    return [c.attempt_id for c in commands if isinstance(c, RunTask)]


# --- construction ---------------------------------------------------------------------------


def test_unknown_policy_is_invalid_input_listing_known_names() -> None:
    with pytest.raises(InvalidInput) as caught:
        WorkerAgent(WORKER, [node()], queue_policy="random")
    assert caught.value.field == "queue_policy"
    assert "srpt" in str(caught.value) and "fifo" in str(caught.value)


@pytest.mark.parametrize(("option", "value"), [
    ("aging", -1.0), ("aging", float("nan")), ("aging", float("inf")),
    ("preempt_factor", 1.0), ("preempt_factor", 0.5), ("preempt_factor", float("nan")),
])
def test_bad_queue_options_are_invalid_input_naming_the_field(option: str, value: float) -> None:
    with pytest.raises(InvalidInput) as caught:
        if option == "aging":  # the local queues' option: refused as their options are made
            WorkerAgent(WORKER, [node()], queue_options=LocalQueueOptions(aging=value))
        else:
            WorkerAgent(WORKER, [node()], **{option: value})
    assert caught.value.field == option


def test_nodes_of_another_worker_or_duplicates_are_refused() -> None:
    foreign = NodeSpec("n9", "lm-1", "w2", Resources(1000, 1000))
    with pytest.raises(InvalidInput):
        WorkerAgent(WORKER, [foreign])
    with pytest.raises(InvalidInput):
        WorkerAgent(WORKER, [node(), node()])


# --- starting and queueing ------------------------------------------------------------------


def test_starts_at_once_when_it_fits() -> None:
    h = harness()
    commands = h.assign(place("t1#1", duration=7.5))
    expect(commands, *started("t1#1"))
    assert commands[0].duration == 7.5
    log = commands[2]
    assert log.fields == log.fields | {
        "task": "t1", "job": "job-1", "worker": WORKER, "gm": "gm-1", "lm": "lm-1",
        "queued_seconds": 0.0,
    }
    assert h.worker.free("n1") == Resources(500, 500)
    assert h.worker.state_of("t1#1") is AttemptState.RUNNING


def test_several_tasks_share_a_node_while_they_fit() -> None:
    h = harness()
    for index in range(4):
        expect(h.assign(place(f"t{index}#1", cpu=250, mem=100)), *started(f"t{index}#1"))
    assert h.worker.free("n1") == Resources(0, 600)
    commands = h.assign(place("t4#1", cpu=250, mem=100))
    expect(commands, (Log, {"event": "task_queued", "fields": {"attempt": "t4#1"}}))
    assert h.worker.queue_length("n1") == 1


def test_nodes_are_independent() -> None:
    h = harness(node("n1"), node("n2"))
    h.assign(place("a#1", node_id="n1", cpu=1000))
    expect(h.assign(place("b#1", node_id="n2", cpu=1000)), *started("b#1", "n2"))


def test_queued_tasks_start_in_srpt_order_on_release() -> None:
    h = harness()
    h.assign(place("big#1", cpu=1000))
    h.assign(place("late#1", cpu=1000, priority=5.0))
    h.assign(place("short#1", cpu=1000, priority=1.0))
    h.assign(place("pilot#1", cpu=1000, priority=9.0, pilot=True))
    assert h.worker.queue_length() == 3

    commands = h.end("big#1", runtime=9.5)
    expect(
        commands,
        (ReportToLM, {"kind": Reason.FINISHED, "attempt_id": "big#1", "runtime": 9.5}),
        (Log, {"event": "task_finished", "fields": {"attempt": "big#1", "runtime": 9.5}}),
        *started("pilot#1"),
    )
    assert started_ids(h.end("pilot#1")) == ["short#1"]
    assert started_ids(h.end("short#1")) == ["late#1"]


def test_aging_starts_a_long_waiting_task_before_a_shorter_late_one() -> None:
    h = harness(queue_options=LocalQueueOptions(aging=1.0))
    h.assign(place("big#1", cpu=1000))  # t=1
    h.assign(place("long#1", cpu=1000, priority=10.0))  # t=2: static key 12
    h.send(Tick(stim()), advance=18.0)
    h.assign(place("short#1", cpu=1000, priority=2.0))  # t=21: key 23, 19 s > 10 / 1 later
    h.assign(place("shorter#1", cpu=1000, priority=0.5))  # t=22: key 22.5
    assert started_ids(h.end("big#1")) == ["long#1"]
    assert started_ids(h.end("long#1")) == ["shorter#1"]
    # without aging the same arrivals run shortest first
    plain = harness()
    plain.assign(place("big#1", cpu=1000))
    plain.assign(place("long#1", cpu=1000, priority=10.0))
    plain.send(Tick(stim()), advance=18.0)
    plain.assign(place("short#1", cpu=1000, priority=2.0))
    assert started_ids(plain.end("big#1")) == ["short#1"]


def test_fifo_policy_starts_in_arrival_order() -> None:
    h = harness(queue_policy="fifo")
    h.assign(place("big#1", cpu=1000))
    h.assign(place("first#1", cpu=1000, priority=5.0))
    h.assign(place("second#1", cpu=1000, priority=1.0, pilot=True))
    assert started_ids(h.end("big#1")) == ["first#1"]
    assert started_ids(h.end("first#1")) == ["second#1"]


def test_release_starts_every_queued_task_that_fits_skipping_ones_that_do_not() -> None:
    h = harness()
    h.assign(place("a#1", cpu=600, mem=100))
    h.assign(place("b#1", cpu=400, mem=100))
    h.assign(place("wide#1", cpu=1000, mem=100, priority=0.0))
    h.assign(place("small1#1", cpu=300, mem=100, priority=1.0))
    h.assign(place("small2#1", cpu=300, mem=100, priority=2.0))
    h.assign(place("small3#1", cpu=300, mem=100, priority=3.0))
    # 600 cpu free after a#1 ends: `wide` still does not fit, two of the small ones do
    assert started_ids(h.end("a#1")) == ["small1#1", "small2#1"]
    assert h.worker.state_of("wide#1") is AttemptState.QUEUED
    assert h.worker.state_of("small3#1") is AttemptState.QUEUED


def test_worker_queuing_time_is_logged_when_a_queued_task_starts() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))  # queued at t=2
    h.send(Tick(stim()), advance=3.0)
    commands = h.end("a#1")  # t=6
    log = next(c for c in commands if matches(c, Log, event="task_started"))
    assert log.fields["queued_seconds"] == pytest.approx(4.0)


# --- duplicates, refusals ------------------------------------------------------------------


def test_duplicate_assignment_is_ignored_while_running_queued_and_after_the_end() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    for attempt in ("a#1", "b#1"):
        expect(
            h.assign(place(attempt, cpu=1000)),
            (Log, {"event": "worker_duplicate_assignment", "fields": {"attempt": attempt}}),
        )
    h.end("a#1")
    h.end("b#1")
    expect(
        h.assign(place("a#1", cpu=1000)),
        (Log, {"event": "worker_duplicate_assignment", "fields": {"state": "finished"}}),
    )
    assert h.worker.running_placements() == ()


def test_unknown_node_is_reported_failed() -> None:
    h = harness()
    expect(
        h.assign(place("a#1", node_id="nowhere")),
        (ReportToLM, {"kind": Reason.FAILED, "attempt_id": "a#1"}),
        (Log, {"event": "task_failed", "fields": {"node": "nowhere"}}),
    )
    assert "unknown node" in h.assign(place("b#1", node_id="nowhere"))[0].detail


def test_demand_larger_than_the_node_fails_instead_of_queueing_forever() -> None:
    h = harness()
    commands = h.assign(place("a#1", cpu=2000))
    assert matches(commands[0], ReportToLM, kind=Reason.FAILED, attempt_id="a#1")
    assert h.worker.queue_length() == 0


def test_full_local_queue_fails_the_assignment() -> None:
    h = harness(max_queue=2)
    h.assign(place("run#1", cpu=1000))
    h.assign(place("q1#1", cpu=1000))
    h.assign(place("q2#1", cpu=1000))
    expect(
        h.assign(place("q3#1", cpu=1000)),
        (ReportToLM, {"kind": Reason.FAILED, "attempt_id": "q3#1", "detail": "local queue full"}),
        (Log, {"event": "task_failed"}),
    )
    # a task that fits still starts with the queue full
    h2 = harness(node("n1"), node("n2"), max_queue=0)
    h2.assign(place("a#1", cpu=1000))
    assert matches(h2.assign(place("b#1", cpu=1000))[0], ReportToLM, kind=Reason.FAILED)
    assert started_ids(h2.assign(place("c#1", node_id="n2"))) == ["c#1"]


# --- ends and cancels ------------------------------------------------------------------------


def test_cancel_running_kills_reports_and_starts_queued() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    expect(
        h.cancel("a#1", Reason.PREEMPTED),
        (KillTask, {"attempt_id": "a#1"}),
        (ReportToLM, {"kind": Reason.CANCELLED, "attempt_id": "a#1", "detail": "preempted"}),
        (Log, {"event": "task_cancelled", "fields": {"attempt": "a#1", "was": "running"}}),
        *started("b#1"),
    )
    # the runner's late end of the killed task is not a second report
    expect(h.end("a#1"), (Log, {"event": "worker_unknown_attempt"}))


def test_cancel_queued_removes_it_without_a_kill() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    expect(
        h.cancel("b#1", Reason.CANCELLED),
        (ReportToLM, {"kind": Reason.CANCELLED, "attempt_id": "b#1"}),
        (Log, {"event": "task_cancelled", "fields": {"was": "queued"}}),
    )
    assert h.worker.queue_length() == 0
    assert started_ids(h.end("a#1")) == []


def test_cancel_unknown_only_logs_and_refuses_a_late_assignment() -> None:
    h = harness()
    expect(h.cancel("ghost#1"), (Log, {"event": "worker_unknown_attempt"}))
    expect(h.assign(place("ghost#1")), (Log, {"event": "worker_duplicate_assignment"}))
    assert h.worker.running_placements() == ()


def test_end_of_an_unknown_or_queued_attempt_is_ignored() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    expect(h.end("nobody#1"), (Log, {"event": "worker_unknown_attempt"}))
    expect(h.end("b#1"), (Log, {"event": "worker_unknown_attempt"}))
    assert h.worker.state_of("b#1") is AttemptState.QUEUED


def test_tick_changes_nothing() -> None:
    h = harness()
    h.assign(place("a#1"))
    assert h.send(Tick(stim())) == []


def test_unhandled_event_is_refused() -> None:
    from common.events import CancelRequested

    with pytest.raises(InvalidInput):
        harness().send(CancelRequested(stim(), "gm-1", "a#1"))


# --- a job's estimate changes ----------------------------------------------------------------


def test_reprioritize_rekeys_queued_tasks_and_changes_the_start_order() -> None:
    h = harness(node("n1"), node("n2"))
    h.assign(place("big#1", cpu=1000))
    h.assign(place("big2#1", node_id="n2", cpu=1000))
    h.assign(place("a1#1", cpu=1000, priority=5.0, job="a"))
    h.assign(place("b1#1", cpu=1000, priority=3.0, job="b"))
    h.assign(place("a2#1", node_id="n2", cpu=1000, priority=5.0, job="a"))
    expect(h.reprioritize("a", 1.0),
           (Log, {"event": "worker_reprioritized",
                  "fields": {"job": "a", "priority": 1.0, "requeued": 2, "worker": WORKER}}))
    assert {p.attempt_id: p.priority for p in h.worker.running_placements()}["a1#1"] == 1.0
    assert started_ids(h.end("big#1")) == ["a1#1"]
    log = next(c for c in h.end("a1#1") if matches(c, Log, event="task_started"))
    assert log.fields["attempt"] == "b1#1"
    assert started_ids(h.end("big2#1")) == ["a2#1"]


def test_reprioritize_keeps_the_arrival_tiebreak() -> None:
    h = harness()
    h.assign(place("big#1", cpu=1000))
    h.assign(place("a#1", cpu=1000, priority=5.0, job="a"))
    h.assign(place("b#1", cpu=1000, priority=2.0, job="b"))
    h.reprioritize("a", 2.0)  # ties with b: a arrived first
    assert started_ids(h.end("big#1")) == ["a#1"]
    assert started_ids(h.end("a#1")) == ["b#1"]


def test_reprioritize_logs_only_when_a_queued_task_changed_and_starts_nothing() -> None:
    h = harness()
    h.assign(place("run#1", cpu=1000, priority=4.0, job="a"))
    h.assign(place("q#1", cpu=1000, priority=4.0, job="b"))
    assert h.reprioritize("nobody", 1.0) == []
    assert h.reprioritize("b", 4.0) == []  # the same priority: nothing re-keyed
    assert h.reprioritize("a", 9.0) == []  # only running: stored, not logged
    assert [p.priority for p in h.worker.running_placements() if p.attempt_id == "run#1"] == [9.0]
    with pytest.raises(InvalidInput):
        h.reprioritize("a", float("nan"))


def test_reprioritize_replaces_the_placements_it_was_given() -> None:
    h = harness()
    running, queued = place("r#1", cpu=1000, priority=4.0), place("q#1", cpu=1000, priority=4.0)
    h.assign(running)
    h.assign(queued)
    h.reprioritize("job-1", 1.0)
    assert running.priority == 4.0 and queued.priority == 4.0  # shared with other roles
    assert {p.priority for p in h.worker.running_placements()} == {1.0}


# --- queries ---------------------------------------------------------------------------------


def test_queued_ids_lists_the_waiting_attempts() -> None:
    h = harness()
    assert h.worker.queued_ids() == frozenset()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    h.assign(place("c#1", cpu=1000))
    assert h.worker.queued_ids() == {"b#1", "c#1"}
    h.end("a#1")
    assert h.worker.queued_ids() == {"c#1"}


def test_running_placements_lists_running_and_queued() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.assign(place("b#1", cpu=1000))
    assert {p.attempt_id for p in h.worker.running_placements()} == {"a#1", "b#1"}


def test_story_records_each_transition_with_its_stimulus() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.send(TaskAssigned("assign-b", place("b#1", cpu=1000)))
    h.send(TaskRunEnded("end-a", "a#1", 3.0))
    story = h.worker.story("b#1")
    assert [(e["old"], e["new"]) for e in story] == [("new", "queued"), ("queued", "running")]
    assert story[0]["stimulus_id"] == "assign-b" and story[1]["stimulus_id"] == "end-a"
    assert {e["entity"] for e in h.worker.story("end-a")} == {"a#1", "b#1"}


def test_an_illegal_transition_is_refused_with_the_attempt_story() -> None:
    h = harness()
    h.send(TaskAssigned("assign-a", place("a#1", cpu=1000)))
    with pytest.raises(IllegalTransition) as refused:  # a running attempt is never refused
        h.worker._transition(Step("refuse", h.now), "a#1", AttemptState.RUNNING,
                             AttemptState.FAILED)
    assert (refused.value.old, refused.value.new) == ("running", "failed")
    assert [e["stimulus_id"] for e in refused.value.story] == ["assign-a"]
    assert len(h.worker.story("a#1")) == 1  # a refused move is not recorded
    for end in (AttemptState.FINISHED, AttemptState.CANCELLED, AttemptState.FAILED):
        assert ATTEMPT_TRANSITIONS[end] == frozenset()


def test_ended_attempts_are_remembered_within_a_bound() -> None:
    h = harness(ended_memory=3)
    for index in range(5):
        h.assign(place(f"t{index}#1", cpu=1000))
        h.end(f"t{index}#1")
    assert h.worker.state_of("t4#1") is AttemptState.FINISHED
    assert h.worker.state_of("t0#1") is None  # forgotten: memory stays flat


def test_validate_catches_an_over_committed_node() -> None:
    h = harness()
    h.assign(place("a#1", cpu=1000))
    h.worker._nodes["n1"].running["x#1"] = place("x#1", cpu=500)  # corrupt on purpose
    with pytest.raises(InvariantViolated):
        h.worker.validate()


# --- property: random assign / end / cancel sequences -----------------------------------------


class WorkerMachine(RuleBasedStateMachine):
    """Never over-commits; every attempt starts at most once and finishes at most once."""

    def __init__(self) -> None:
        super().__init__()
        nodes = (node("n1", 1000, 1000), node("n2", 700, 2000))
        self.h = harness(*nodes, max_queue=6, ended_memory=10_000)
        self.assigned: list[str] = []
        self.counts: dict[tuple[str, str], int] = {}

    def _record(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, ReportToLM | RunTask | KillTask):
                kind = command.kind if isinstance(command, ReportToLM) else type(command).__name__
                key = (command.attempt_id, str(kind))
                self.counts[key] = self.counts.get(key, 0) + 1
            assert is_dataclass(command) and fields(command)

    @rule(
        node_id=st.sampled_from(["n1", "n2", "n3"]),
        cpu=st.integers(1, 1100),
        mem=st.integers(1, 1100),
        priority=st.floats(0, 100),
        pilot=st.booleans(),
    )
    def assign_new(self, node_id: str, cpu: int, mem: int, priority: float, pilot: bool) -> None:
        attempt = f"t{len(self.assigned)}#1"
        job = f"job-{len(self.assigned) % 2 + 1}"
        self.assigned.append(attempt)
        self._record(self.h.assign(place(attempt, node_id, cpu, mem, priority, pilot, job=job)))

    @precondition(lambda self: self.assigned)
    @rule(data=st.data())
    def assign_again(self, data: st.DataObject) -> None:
        attempt = data.draw(st.sampled_from(self.assigned))
        self._record(self.h.assign(place(attempt, cpu=1, mem=1)))

    @precondition(lambda self: self.assigned)
    @rule(data=st.data(), runtime=st.floats(0, 50))
    def end(self, data: st.DataObject, runtime: float) -> None:
        self._record(self.h.end(data.draw(st.sampled_from(self.assigned)), runtime))

    @precondition(lambda self: self.assigned)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self._record(self.h.cancel(data.draw(st.sampled_from(self.assigned))))

    @rule()
    def cancel_unknown(self) -> None:
        self._record(self.h.cancel(f"never-{len(self.assigned)}#1"))

    @rule(job=st.sampled_from(["job-1", "job-2"]), priority=st.floats(0, 100))
    def reprioritize(self, job: str, priority: float) -> None:
        self._record(self.h.reprioritize(job, priority))

    @invariant()
    def at_most_once(self) -> None:
        for (attempt, kind), count in self.counts.items():
            assert count <= 1, f"{attempt} got {count} x {kind}"
            if kind == "RunTask":
                assert self.counts.get((attempt, str(Reason.STARTED))) == 1

    @invariant()
    def never_over_commits(self) -> None:
        self.h.worker.validate()


WorkerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestWorkerMachine = WorkerMachine.TestCase
