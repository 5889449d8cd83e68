"""The worker's preemptive local queue: a far shorter arrival suspends running tasks.

Event in, commands out, with `validate()` after every event (the `Harness` of test_worker).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from common.commands import Command, KillTask, Log, ReportToLM, RunTask
from common.events import TaskAssigned, TaskRunEnded, Tick
from common.messages import Placement
from common.models import NodeSpec
from common.policies.local_queue import LocalQueueOptions
from common.reasons import Reason
from common.resources import Resources
from common.speed import SpeedModel
from common.worker import AttemptState
from common.worker_suspension import MAX_SUSPENSIONS
from tests.unit.test_worker import (
    WORKER,
    Harness,
    expect,
    harness,
    matches,
    node,
    place,
    started,
    started_ids,
    stim,
)


def preemptive(*nodes: NodeSpec, **kwargs: object) -> Harness:
    return harness(*nodes, preemptive=True, **kwargs)


def suspended(attempt: str, for_attempt: str, **fields: object) -> tuple:
    return (
        (KillTask, {"attempt_id": attempt}),
        (ReportToLM, {"kind": Reason.SUSPENDED, "attempt_id": attempt}),
        (Log, {"event": "task_suspended",
               "fields": {"attempt": attempt, "for_attempt": for_attempt} | fields}),
    )


def _ended(attempt: str, runtime: float) -> TaskRunEnded:
    return TaskRunEnded(stim(), attempt, runtime)


def _assigned(placement: Placement) -> TaskAssigned:
    return TaskAssigned(stim(), placement)


def log_of(commands: list[Command], event: str, attempt: str) -> Log:
    return next(c for c in commands
                if matches(c, Log, event=event) and c.fields["attempt"] == attempt)


# --- one suspension, its resumption and its runtime -------------------------------------------


def test_a_long_task_is_suspended_for_a_ten_times_shorter_arrival() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0, duration=50.0))  # t=1
    commands = h.send(Tick(stim()), advance=9.0) + h.assign(  # t=11: 10 s of its work done
        place("short#1", cpu=1000, priority=10.0, duration=5.0))
    expect(
        commands,
        *suspended("long#1", "short#1", work_done=10.0, remaining_work=40.0, worker=WORKER,
                   priority=100.0, suspensions=1, ran_seconds=10.0),
        *started("short#1"),
    )
    assert commands[1].at == 11.0
    assert h.worker.state_of("long#1") is AttemptState.QUEUED
    assert h.worker.queued_ids() == {"long#1"}
    assert h.worker.free("n1") == Resources(0, 500)


def test_the_suspended_task_resumes_with_its_remaining_work_and_reports_its_whole_runtime() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0, duration=50.0))  # t=1
    h.send(Tick(stim()), advance=9.0)
    h.assign(place("short#1", cpu=1000, priority=10.0, duration=5.0))  # t=11
    commands = h.end("short#1", runtime=5.0)  # t=12
    expect(
        commands,
        (ReportToLM, {"kind": Reason.FINISHED, "attempt_id": "short#1", "runtime": 5.0}),
        (Log, {"event": "task_finished", "fields": {"attempt": "short#1"}}),
        (RunTask, {"attempt_id": "long#1", "duration": 40.0}),
        (ReportToLM, {"kind": Reason.STARTED, "attempt_id": "long#1", "at": 12.0}),
        (Log, {"event": "task_started",
               "fields": {"attempt": "long#1", "resumed": True, "remaining_work": 40.0,
                          "duration": 50.0, "queued_seconds": 1.0}}),
    )
    # the runner measures its last run (40 s); the report adds the first one (10 s)
    expect(
        h.send(_ended("long#1", 40.0), advance=40.0),
        (ReportToLM, {"kind": Reason.FINISHED, "attempt_id": "long#1", "runtime": 50.0}),
        (Log, {"event": "task_finished",
               "fields": {"attempt": "long#1", "runtime": 50.0, "suspensions": 1}}),
    )


def test_a_new_start_has_no_resume_fields() -> None:
    commands = preemptive().assign(place("a#1"))
    assert "resumed" not in commands[2].fields and "remaining_work" not in commands[2].fields


def test_on_a_varying_node_the_resumed_run_lasts_what_the_node_takes_for_the_rest() -> None:
    h = preemptive(speed=SpeedModel("constant"))
    h.assign(place("long#1", cpu=1000, priority=100.0, duration=50.0))  # t=1
    h.send(Tick(stim()), advance=19.0)
    h.assign(place("short#1", cpu=1000, priority=1.0, duration=5.0))  # t=21: 20 done
    commands = h.end("short#1", runtime=1.0)
    run = next(c for c in commands if matches(c, RunTask, attempt_id="long#1"))
    assert run.duration == pytest.approx(30.0)
    assert log_of(commands, "task_started", "long#1").fields["run_for"] == pytest.approx(30.0)


def test_a_task_without_a_duration_is_suspended_and_resumed_until_killed() -> None:
    h = preemptive()
    h.assign(place("forever#1", cpu=1000, priority=100.0, duration=None))
    commands = h.assign(place("short#1", cpu=1000, priority=1.0))
    log = log_of(commands, "task_suspended", "forever#1")
    assert log.fields["work_done"] is None and log.fields["remaining_work"] is None
    resumed = h.end("short#1")
    assert matches(resumed[2], RunTask, attempt_id="forever#1", duration=None)


# --- who may be suspended ---------------------------------------------------------------------


def test_a_running_task_less_than_the_factor_longer_is_not_suspended() -> None:
    h = preemptive(preempt_factor=10.0)
    h.assign(place("long#1", cpu=1000, priority=99.0))
    expect(h.assign(place("short#1", cpu=1000, priority=10.0)),
           (Log, {"event": "task_queued", "fields": {"attempt": "short#1"}}))
    h2 = preemptive(preempt_factor=4.0)
    h2.assign(place("long#1", cpu=1000, priority=99.0))
    assert started_ids(h2.assign(place("short#1", cpu=1000, priority=10.0))) == ["short#1"]


def test_an_arrival_without_an_estimate_suspends_nothing() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0))
    assert started_ids(h.assign(place("zero#1", cpu=1000, priority=0.0))) == []
    h2 = preemptive()  # nor is a running task without an estimate suspended, even by a pilot
    h2.assign(place("unknown#1", cpu=1000, priority=0.0))
    assert started_ids(h2.assign(place("pilot#1", cpu=1000, priority=0.0, pilot=True))) == []


def test_a_pilot_arrival_counts_as_the_shortest_and_pilots_are_never_suspended() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=1.5))
    commands = h.assign(place("pilot#1", cpu=1000, priority=80.0, pilot=True))
    expect(commands, *suspended("long#1", "pilot#1"), *started("pilot#1"))
    expect(h.assign(place("other-pilot#1", cpu=1000, priority=0.1, pilot=True)),
           (Log, {"event": "task_queued"}))
    assert started_ids(h.assign(place("short#1", cpu=1000, priority=0.01))) == []


def test_a_non_preemptive_worker_queues_as_before() -> None:
    h = harness()
    h.assign(place("long#1", cpu=1000, priority=1000.0))
    expect(h.assign(place("short#1", cpu=1000, priority=1.0)),
           (Log, {"event": "task_queued", "fields": {"attempt": "short#1"}}))


def test_an_attempt_is_suspended_at_most_max_suspensions_times() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0, duration=1000.0))
    for index in range(MAX_SUSPENSIONS):
        short = f"short{index}#1"
        assert started_ids(h.assign(place(short, cpu=1000, priority=1.0))) == [short]
        assert started_ids(h.end(short)) == ["long#1"]
    expect(h.assign(place("one-more#1", cpu=1000, priority=1.0)),
           (Log, {"event": "task_queued", "fields": {"attempt": "one-more#1"}}))
    assert [e["detail"] for e in h.worker.story("long#1") if e["new"] == "queued"] == [
        f"suspended for short{index}#1" for index in range(MAX_SUSPENSIONS)]


# --- which victims ----------------------------------------------------------------------------


def test_one_victim_when_one_suffices_the_longest_first() -> None:
    h = preemptive()
    h.assign(place("small#1", cpu=300, mem=100, priority=900.0))
    h.assign(place("mid#1", cpu=300, mem=100, priority=100.0))
    h.assign(place("wide#1", cpu=400, mem=100, priority=50.0))
    commands = h.assign(place("short#1", cpu=400, mem=100, priority=1.0))
    # small#1 is the longest but frees too little alone; wide#1 alone makes room
    expect(commands, *suspended("wide#1", "short#1"), *started("short#1"))


def test_several_victims_the_fewest_longest_first_in_order() -> None:
    h = preemptive()
    for name, priority in (("a", 300.0), ("b", 200.0), ("c", 100.0), ("d", 400.0)):
        h.assign(place(f"{name}#1", cpu=250, mem=100, priority=priority))
    commands = h.assign(place("short#1", cpu=500, mem=100, priority=1.0))
    expect(commands, *suspended("d#1", "short#1"), *suspended("a#1", "short#1"),
           *started("short#1"))
    assert h.worker.queued_ids() == {"a#1", "d#1"}


def test_no_suspension_when_all_candidates_would_not_make_room() -> None:
    h = preemptive()
    h.assign(place("pilot#1", cpu=600, mem=100, priority=900.0, pilot=True))
    h.assign(place("long#1", cpu=400, mem=100, priority=900.0))
    expect(h.assign(place("short#1", cpu=500, mem=100, priority=1.0)),
           (Log, {"event": "task_queued"}))
    assert h.worker.state_of("long#1") is AttemptState.RUNNING


def test_a_suspension_needs_room_in_the_queue() -> None:
    h = preemptive(max_queue=0)
    h.assign(place("long#1", cpu=1000, priority=100.0))
    expect(h.assign(place("short#1", cpu=1000, priority=1.0)),
           (ReportToLM, {"kind": Reason.FAILED, "detail": "local queue full"}),
           (Log, {"event": "task_failed"}))


def test_what_the_victims_free_beyond_the_arrival_goes_to_the_queue() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=800, mem=100, priority=100.0))
    h.assign(place("small#1", cpu=200, mem=100, priority=50.0))
    h.assign(place("waiting#1", cpu=300, mem=100, priority=60.0))  # queued: 0 cpu free
    commands = h.assign(place("short#1", cpu=500, mem=100, priority=1.0))
    expect(commands, *suspended("long#1", "short#1"), *started("short#1"),
           *started("waiting#1"))


# --- cancels ----------------------------------------------------------------------------------


def test_a_suspended_attempt_is_cancelled_like_any_queued_one() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0))
    h.assign(place("short#1", cpu=1000, priority=1.0))
    expect(
        h.cancel("long#1", Reason.CANCELLED),
        (ReportToLM, {"kind": Reason.CANCELLED, "attempt_id": "long#1"}),
        (Log, {"event": "task_cancelled", "fields": {"was": "queued"}}),
    )
    assert h.worker.queued_ids() == frozenset()
    assert started_ids(h.end("short#1")) == []


def test_the_runners_late_end_of_a_suspended_run_is_ignored() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0))
    h.assign(place("short#1", cpu=1000, priority=1.0))
    expect(h.send(_ended("long#1", 3.0)), (Log, {"event": "worker_unknown_attempt"}))
    assert h.worker.state_of("long#1") is AttemptState.QUEUED


def test_a_reprioritized_running_task_is_weighed_with_its_new_priority() -> None:
    h = preemptive()
    h.assign(place("long#1", cpu=1000, priority=100.0, job="long"))
    h.reprioritize("long", 5.0)  # nearly done, as its job's estimate says now
    assert started_ids(h.assign(place("short#1", cpu=1000, priority=1.0))) == []


# --- property: random sequences, with a runner that measures each run -------------------------


class PreemptiveWorkerMachine(RuleBasedStateMachine):
    """A preemptive worker never over-commits; every attempt finishes at most once, with the
    runtime its runs took in all; a suspension always comes with a kill and a requeue."""

    def __init__(self) -> None:
        super().__init__()
        nodes = (node("n1", 1000, 1000), node("n2", 700, 2000))
        self.h = preemptive(*nodes, max_queue=8, ended_memory=10_000,
                            queue_options=LocalQueueOptions(aging=0.5))
        self.assigned: list[str] = []
        self.runs: dict[str, tuple[float, float | None]] = {}  # attempt -> start, duration
        self.ran: dict[str, float] = {}  # attempt -> wall time of its ended runs
        self.finished: set[str] = set()
        self.suspensions: dict[str, int] = {}

    def _apply(self, commands: list[Command]) -> None:
        now = self.h.now
        reports = [c for c in commands if isinstance(c, ReportToLM)]
        kinds = [(c.kind, c.attempt_id) for c in reports]
        for command in commands:
            if isinstance(command, RunTask):
                assert command.attempt_id not in self.runs
                self.runs[command.attempt_id] = (now, command.duration)
            elif isinstance(command, KillTask):
                start, _ = self.runs.pop(command.attempt_id)
                self.ran[command.attempt_id] = self.ran.get(command.attempt_id, 0.0) + now - start
            elif isinstance(command, ReportToLM) and command.kind is Reason.SUSPENDED:
                attempt = command.attempt_id
                self.suspensions[attempt] = self.suspensions.get(attempt, 0) + 1
                assert self.suspensions[attempt] <= MAX_SUSPENSIONS
                assert self.h.worker.state_of(attempt) in (AttemptState.QUEUED,
                                                           AttemptState.RUNNING)
        # every suspension report comes before the start report of the step's arrival
        suspended_at = [i for i, (kind, _) in enumerate(kinds) if kind is Reason.SUSPENDED]
        if suspended_at:
            assert kinds[suspended_at[-1] + 1][0] is Reason.STARTED
            assert suspended_at == list(range(len(suspended_at)))

    @rule(
        node_id=st.sampled_from(["n1", "n2"]),
        cpu=st.integers(1, 1000),
        mem=st.integers(1, 1000),
        priority=st.sampled_from([0.0, 0.5, 1.0, 5.0, 20.0, 100.0, 1000.0]),
        pilot=st.booleans(),
        duration=st.sampled_from([1.0, 10.0, 100.0]),
        advance=st.sampled_from([0.0, 1.0, 7.5]),
    )
    def assign(self, node_id: str, cpu: int, mem: int, priority: float, pilot: bool,
               duration: float, advance: float) -> None:
        attempt = f"t{len(self.assigned)}#1"
        self.assigned.append(attempt)
        job = f"job-{len(self.assigned) % 3}"
        self._apply(self.h.send(_assigned(place(attempt, node_id, cpu, mem, priority, pilot,
                                                duration, job)), advance=advance))

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), advance=st.sampled_from([0.0, 2.0, 30.0]))
    def end(self, data: st.DataObject, advance: float) -> None:
        attempt = data.draw(st.sampled_from(sorted(self.runs)))
        start, _duration = self.runs[attempt]
        self.h.now += advance
        runtime = self.h.now - start
        del self.runs[attempt]
        commands = self.h.send(_ended(attempt, runtime), advance=0.0)
        expected = self.ran.pop(attempt, 0.0) + runtime
        finish = next(c for c in commands if matches(c, ReportToLM, kind=Reason.FINISHED))
        assert finish.attempt_id == attempt and finish.runtime == pytest.approx(expected)
        assert attempt not in self.finished
        self.finished.add(attempt)
        self._apply([c for c in commands if c is not finish])

    @precondition(lambda self: self.assigned)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        attempt = data.draw(st.sampled_from(self.assigned))
        was = self.h.worker.state_of(attempt)
        commands = self.h.cancel(attempt)
        if was is AttemptState.RUNNING:
            assert matches(commands[0], KillTask, attempt_id=attempt)
        elif was is AttemptState.QUEUED:
            assert not any(isinstance(c, KillTask) for c in commands)
        self._apply(commands)

    @rule(job=st.sampled_from(["job-0", "job-1", "job-2"]),
          priority=st.sampled_from([0.5, 3.0, 50.0, 500.0]))
    def reprioritize(self, job: str, priority: float) -> None:
        self._apply(self.h.reprioritize(job, priority))

    @invariant()
    def books_agree(self) -> None:
        self.h.worker.validate()
        running = {a for a in self.assigned if self.h.worker.state_of(a) is AttemptState.RUNNING}
        assert running == set(self.runs)
        queued = {a for a in self.assigned if self.h.worker.state_of(a) is AttemptState.QUEUED}
        assert queued == self.h.worker.queued_ids()


PreemptiveWorkerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40,
                                                     deadline=None)
TestPreemptiveWorkerMachine = PreemptiveWorkerMachine.TestCase
