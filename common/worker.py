"""The worker agent's core: runs assigned tasks on the nodes it hosts, queues the rest.

One agent hosts many nodes (a few containers stand for hundreds of nodes). It holds each
running task's logical resources on its node, keeps a local run queue per node in the order
of a named policy (`common/policies/local_queue.py`), and reports started, finished, failed
and cancelled attempts to its LM. It never runs an attempt id twice: ids of live and recently
ended attempts are remembered and duplicates are refused.

Each node's books are a `NodeState` (common/worker_nodes.py), each attempt's a `LiveAttempt`
(common/worker_attempts.py). Optionally (`preemptive`) a node's queue is preemptive: an
arrival that does not fit, and whose job has far less estimated remaining work than running
tasks there, suspends the fewest of them that make room; the worker's `SuspensionBook`
(common/worker_suspension.py) decides and keeps count.

Progress. The worker knows how much work each attempt has done, exactly under varying speed
(`LiveAttempt.progress`). Its LM may ask for it (`TaskCheckpointRequested`: a `checkpointed`
report per attempt) and may tell an attempt to continue from further on (`TaskRestored`: a
copy of its task got that far); a cancelled attempt's report carries it too
(docs/redundancy.md).

Like every role it is a state object with one entry point, `handle(event, now)`, that returns
commands (`RunTask`, `KillTask`, `ReportToLM`, `Log`) for the driver to carry out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from common.commands import Command, KillTask, Log, ReportToLM, RunTask
from common.errors import InvalidInput, InvariantViolated
from common.events import (
    Event,
    JobReprioritized,
    TaskAssigned,
    TaskCancelled,
    TaskCheckpointRequested,
    TaskRestored,
    TaskRunEnded,
    Tick,
)
from common.lifecycle import check_transition
from common.policies.local_queue import LOCAL_QUEUE_POLICIES
from common.reasons import Reason
from common.step import Step
from common.story import TransitionLog
from common.worker_attempts import AttemptState, LiveAttempt, WorkerAttemptBook
from common.worker_nodes import build_nodes
from common.worker_suspension import SuspensionBook

if TYPE_CHECKING:
    from common.messages import Placement
    from common.models import NodeSpec
    from common.policies.local_queue import LocalQueueOptions
    from common.resources import Resources
    from common.speed import SpeedModel
    from common.worker_nodes import NodeState

DEFAULT_ENDED_MEMORY = 20_000

# the states every attempt passes through, looked up once: reading an enum member off its
# class costs a descriptor call on Python 3.11, and these are read several times per task
_NEW, _QUEUED, _RUNNING = AttemptState.NEW, AttemptState.QUEUED, AttemptState.RUNNING
_FINISHED = AttemptState.FINISHED
_STARTED_REPORT, _FINISHED_REPORT = Reason.STARTED, Reason.FINISHED


ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.NEW: frozenset(
        {AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.FAILED, AttemptState.CANCELLED}
    ),
    AttemptState.QUEUED: frozenset({AttemptState.RUNNING, AttemptState.CANCELLED}),
    # running -> queued: suspended by a preemptive queue for a much shorter arrival
    AttemptState.RUNNING: frozenset(
        {AttemptState.FINISHED, AttemptState.CANCELLED, AttemptState.QUEUED}
    ),
    AttemptState.FINISHED: frozenset(),
    AttemptState.CANCELLED: frozenset(),
    AttemptState.FAILED: frozenset(),
}


class WorkerAgent:
    """Executes placements on its nodes; `handle(event, now)` is the only way to change it."""

    def __init__(
        self,
        worker_id: str,
        nodes: Sequence[NodeSpec],
        queue_policy: str = "srpt",
        max_queue: int = 10_000,
        story_len: int = 10_000,
        ended_memory: int = DEFAULT_ENDED_MEMORY,
        speed: SpeedModel | None = None,
        speed_seed: int = 0,
        queue_options: LocalQueueOptions | None = None,
        preemptive: bool = False,
        preempt_factor: float = 10.0,
    ) -> None:
        """`queue_options`: every local queue's (`aging`, the work-seconds of priority credit
        a queued task gains per second waited, under `srpt`); None: the policy's defaults.
        `preemptive`: an arrival that does not fit suspends running tasks whose priority is
        at least `preempt_factor` times its own, when that makes room."""
        if not worker_id:
            raise InvalidInput("worker_id", "must be a non-empty string")
        queue_class = LOCAL_QUEUE_POLICIES.get(queue_policy)
        if queue_options is None:
            queue_options = LOCAL_QUEUE_POLICIES.defaults(queue_policy)
        if max_queue < 0:
            raise InvalidInput("max_queue", f"must be >= 0, got {max_queue}")
        self._attempts = WorkerAttemptBook(ended_memory)
        suspensions = SuspensionBook(preempt_factor)  # its option is refused whether on or not
        self.worker_id = worker_id
        self.queue_policy = queue_policy
        self.max_queue = max_queue
        self._suspensions = suspensions if preemptive else None
        self._nodes = build_nodes(worker_id, nodes, queue_class, queue_options, speed,
                                  speed_seed)
        self._live = self._attempts.live  # read here; the book adds and ends them
        self._queued_total = 0
        self._arrival_seq = 0
        self._log = TransitionLog(maxlen=story_len)
        self._handlers: dict[type, Callable[..., None]] = {
            TaskAssigned: self._on_assigned,
            TaskRunEnded: self._on_run_ended,
            TaskCancelled: self._on_cancelled,
            JobReprioritized: self._on_reprioritized,
            TaskCheckpointRequested: self._on_checkpoint,
            TaskRestored: self._on_restored,
            Tick: self._on_tick,
        }

    # --- entry point ----------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Command]:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise InvalidInput("event", f"a worker agent does not handle {type(event).__name__}")
        step = Step(event.stimulus_id, now)
        handler(event, step)
        return step.commands

    # --- queries --------------------------------------------------------------------------

    def running_placements(self) -> tuple[Placement, ...]:
        """Everything running or queued here, for the heartbeat that lets an LM adopt it."""
        return tuple(live.placement for live in self._live.values())

    def queued_ids(self) -> frozenset[str]:
        """The attempts waiting in a local queue (suspended ones too), for the heartbeat that
        lets a restarted LM tell them from the running ones."""
        return frozenset(attempt_id for attempt_id, live in self._live.items()
                         if live.state is AttemptState.QUEUED)

    @property
    def suspensions(self) -> SuspensionBook | None:
        """Its preemptive mode, if on; read, never write."""
        return self._suspensions

    def story(self, *keys: str) -> list[dict]:
        return self._log.story(*keys)

    def free(self, node_id: str) -> Resources:
        return self._nodes[node_id].free

    def queue_length(self, node_id: str | None = None) -> int:
        if node_id is None:
            return self._queued_total
        return len(self._nodes[node_id].queue)

    def state_of(self, attempt_id: str) -> AttemptState | None:
        """The attempt's state if it is live or remembered as ended, else None."""
        return self._attempts.state_of(attempt_id)

    # --- handlers -------------------------------------------------------------------------

    def _on_tick(self, event: Tick, step: Step) -> None:
        # nothing is time-driven here: the driver's runner ends tasks, and queued tasks
        # start on the release that makes room for them
        pass

    def _on_assigned(self, event: TaskAssigned, step: Step) -> None:
        placement = event.placement
        known = self._attempts.state_of(placement.attempt_id)
        if known is not None:
            fields = self._fields(placement, state=str(known))
            step.emit(Log("worker_duplicate_assignment", fields))
            return
        node = self._nodes.get(placement.node_id)
        if node is None:
            self._refuse(step, placement, f"unknown node {placement.node_id!r}")
            return
        demand = placement.task.demand
        try:
            demand.validate_demand("demand")
        except InvalidInput as error:
            self._refuse(step, placement, f"invalid demand: {error}")
            return
        if not demand.fits_in(node.spec.capacity):
            self._refuse(step, placement, "demand exceeds node capacity")
        elif demand.cpu_m <= node.free_cpu and demand.mem_mib <= node.free_mem:  # node.fits
            # Work conservation keeps every queued task of this node unable to fit its free
            # resources, so none of higher order could start before this one if it fits now.
            self._start(step, node, placement)
        elif self._suspend_for(step, node, placement):
            self._start(step, node, placement)
            self._start_queued(step, node)  # what the victims freed beyond the arrival's need
        elif self._queued_total >= self.max_queue:
            self._refuse(step, placement, "local queue full")
        else:
            self._enqueue(step, node, placement)

    def _on_run_ended(self, event: TaskRunEnded, step: Step) -> None:
        live = self._live.get(event.attempt_id)
        if live is None or live.state is not _RUNNING:
            # e.g. the runner's own end of a task already killed: it was reported then
            step.emit(self._unknown_attempt_log("task_run_ended", event.attempt_id))
            return
        placement = live.placement
        attempt_id = placement.attempt_id
        node = self._nodes[placement.node_id]
        self._release(step, node, placement, _FINISHED)
        # the runner measured its last run only: a suspended attempt ran before, too
        runtime = live.ran_seconds + event.runtime
        fields = self._line(node, placement)
        fields["runtime"] = runtime
        work_left = live.work_left()
        if work_left is not None:
            fields["own_work"] = live.own_work + work_left
        if self._suspensions is not None:
            self._suspensions.finished(attempt_id, fields)
        step.emit(ReportToLM(_FINISHED_REPORT, attempt_id, runtime=runtime))
        step.emit(Log("task_finished", fields))
        if self._queued_total:
            self._start_queued(step, node)

    def _on_reprioritized(self, event: JobReprioritized, step: Step) -> None:
        """The job's attempts here take its new priority; the queued ones are re-keyed.
        Nothing starts: an order change frees no resources."""
        priority = event.priority
        if not math.isfinite(priority):
            raise InvalidInput("priority", f"must be a finite number, got {priority}")
        attempts = self._attempts.by_job.get(event.job_id)
        if not attempts:
            return
        queued_on: dict[str, NodeState] = {}
        for attempt_id in attempts:
            live = self._live[attempt_id]
            placement = live.placement
            if placement.priority == priority:
                continue
            node = self._nodes[placement.node_id]
            if live.state is AttemptState.QUEUED:
                queued_on[placement.node_id] = node
            else:
                # a new placement, not a mutated one: the simulator shares it among roles
                live.placement = node.running[attempt_id] = replace(placement, priority=priority)
        requeued = sum(node.queue.reprioritize(event.job_id, priority)
                       for node in queued_on.values())
        if not requeued:
            return
        for attempt_id in attempts:
            live = self._live[attempt_id]
            if live.state is AttemptState.QUEUED:
                live.placement = self._nodes[live.placement.node_id].queue.get(attempt_id)
        step.emit(Log("worker_reprioritized", {"job": event.job_id, "priority": priority,
                                               "requeued": requeued, "worker": self.worker_id}))

    def _on_cancelled(self, event: TaskCancelled, step: Step) -> None:
        attempt_id = event.attempt_id
        live = self._live.get(attempt_id)
        if live is None:
            self._cancel_unknown(step, attempt_id)
            return
        if self._suspensions is not None:
            self._suspensions.forget(attempt_id)
        placement = live.placement
        node = self._nodes[placement.node_id]
        detail = str(event.reason)
        fields = self._fields(placement, reason=detail, was=str(live.state))
        work = live.progress(node.speed, step.now)
        if live.state is AttemptState.RUNNING and work is not None:
            live.own_work += work - live.base_work
        if work is not None:
            fields["work_done"], fields["own_work"] = work, live.own_work
        report = ReportToLM(Reason.CANCELLED, attempt_id, detail=detail, work=work)
        if live.state is AttemptState.QUEUED:
            node.queue.remove(attempt_id)
            self._queued_total -= 1
            self._end(step, attempt_id, live.state, AttemptState.CANCELLED)
            step.emit(report)
            step.emit(Log("task_cancelled", fields))
            return
        self._release(step, node, placement, AttemptState.CANCELLED)
        step.emit(KillTask(attempt_id))
        step.emit(report)
        step.emit(Log("task_cancelled", fields))
        self._start_queued(step, node)

    def _on_checkpoint(self, event: TaskCheckpointRequested, step: Step) -> None:
        """Report how far each of these attempts has come (those it still holds)."""
        for attempt_id in event.attempt_ids:
            live = self._live.get(attempt_id)
            if live is None:
                continue
            placement = live.placement
            work = live.progress(self._nodes[placement.node_id].speed, step.now)
            if work is None:
                continue
            step.emit(ReportToLM(Reason.CHECKPOINTED, attempt_id, work=work))
            step.emit(Log("task_checkpointed", self._fields(placement, work_done=work)))

    def _on_restored(self, event: TaskRestored, step: Step) -> None:
        """Continue the attempt from `work` done, if it is behind: a copy of its task got
        that far. A running attempt restarts its run with the work left."""
        live = self._live.get(event.attempt_id)
        if live is None:
            return
        placement = live.placement
        node = self._nodes[placement.node_id]
        now = step.now
        progress = live.progress(node.speed, now)
        duration = placement.task.duration
        if progress is None or event.work <= progress or not math.isfinite(event.work):
            return
        work = min(event.work, duration)
        fields = self._fields(placement, from_work=progress, to_work=work)
        if live.state is AttemptState.RUNNING:
            live.bank_run(progress, now)
            live.base_work = work
            step.emit(KillTask(placement.attempt_id))  # no TaskRunEnded of the old run
            run_for = live.plan_run(node.speed, now, fields)
            step.emit(RunTask(placement.attempt_id, node.spec.node_id, duration=run_for))
        else:
            live.base_work = work
        step.emit(Log("task_restored", fields))

    def _cancel_unknown(self, step: Step, attempt_id: str) -> None:
        if attempt_id not in self._attempts.ended:
            # The cancel overtook its assignment: remember it, so the late assignment is
            # refused instead of running on resources the LM has already taken back.
            self._end(step, attempt_id, AttemptState.NEW, AttemptState.CANCELLED)
        step.emit(self._unknown_attempt_log("task_cancelled", attempt_id))

    # --- transitions ----------------------------------------------------------------------

    def _start(
        self,
        step: Step,
        node: NodeState,
        placement: Placement,
        live: LiveAttempt | None = None,
        queued_seconds: float = 0.0,
    ) -> None:
        """Start a new attempt (`live` None) or a queued one, suspended before or not."""
        attempt_id = placement.attempt_id
        now = step.now
        # new -> running and queued -> running are always allowed: recorded, not checked
        if live is None:
            self._log.add((now, step.stimulus_id, attempt_id, _NEW, _RUNNING, ""))
            live = LiveAttempt(placement, _RUNNING, now, base_work=placement.start_work)
            self._attempts.add(live)
        else:
            self._log.add((now, step.stimulus_id, attempt_id, _QUEUED, _RUNNING, ""))
            live.placement, live.state, live.since = placement, _RUNNING, now
        node.take(placement)
        fields = self._line(node, placement)
        fields["duration"] = placement.task.duration
        fields["queued_seconds"] = queued_seconds
        fields["priority"] = placement.priority
        fields["pilot"] = placement.pilot
        if placement.copy_of is not None:
            fields["copy_of"] = placement.copy_of
        if live.base_work:
            fields["start_work"] = live.base_work
        if self._suspensions is not None:
            self._suspensions.resuming(live, fields)
        run_for = live.plan_run(node.speed, now, fields)
        step.emit(RunTask(attempt_id, node.spec.node_id, duration=run_for))
        step.emit(ReportToLM(_STARTED_REPORT, attempt_id, at=now))
        step.emit(Log("task_started", fields))

    def _enqueue(self, step: Step, node: NodeState, placement: Placement) -> None:
        attempt_id = placement.attempt_id
        self._transition(step, attempt_id, AttemptState.NEW, AttemptState.QUEUED)
        self._push(node, placement, step.now)
        self._attempts.add(LiveAttempt(placement, AttemptState.QUEUED, step.now,
                                       base_work=placement.start_work))
        fields = self._fields(placement, queue_length=len(node.queue),
                             priority=placement.priority, pilot=placement.pilot)
        step.emit(Log("task_queued", fields))

    def _start_queued(self, step: Step, node: NodeState) -> None:
        """Start queued tasks that fit, in policy order; one that does not fit is skipped.
        (A task's end skips the call while no node queues anything.)"""
        for placement in node.startable():
            node.queue.remove(placement.attempt_id)
            self._queued_total -= 1
            live = self._live[placement.attempt_id]
            self._start(step, node, placement, live, step.now - live.since)

    def _push(self, node: NodeState, placement: Placement, now: float) -> None:
        """Queue on its node: a new arrival, or one suspended (its wait ages from `now`)."""
        self._arrival_seq += 1
        node.queue.push(placement, self._arrival_seq, now)
        self._queued_total += 1

    # --- preemptive mode ------------------------------------------------------------------

    def _suspend_for(self, step: Step, node: NodeState, arrival: Placement) -> bool:
        """Suspend the running attempts that make room for `arrival`, if the mode is on and
        some do: each waits in its node's queue again, with the work it has left."""
        suspensions = self._suspensions
        if suspensions is None:
            return False
        victims = suspensions.victims(node, arrival, self._live,
                                      self.max_queue - self._queued_total)
        for victim in victims:
            attempt_id = victim.attempt_id
            live = self._live[attempt_id]
            suspensions.suspend(step, node, live, arrival.attempt_id, self._fields(victim))
            node.give_back(victim)
            self._transition(step, attempt_id, AttemptState.RUNNING, AttemptState.QUEUED,
                             f"suspended for {arrival.attempt_id}")
            live.state, live.run_for = AttemptState.QUEUED, None
            self._push(node, victim, step.now)
        return bool(victims)

    def _release(
        self, step: Step, node: NodeState, placement: Placement, new: AttemptState
    ) -> None:
        node.give_back(placement)
        self._end(step, placement.attempt_id, _RUNNING, new)

    def _refuse(self, step: Step, placement: Placement, detail: str) -> None:
        attempt_id = placement.attempt_id
        self._end(step, attempt_id, AttemptState.NEW, AttemptState.FAILED, detail)
        step.emit(ReportToLM(Reason.FAILED, attempt_id, detail=detail))
        step.emit(Log("task_failed", self._fields(placement, detail=detail)))

    def _end(
        self,
        step: Step,
        attempt_id: str,
        old: AttemptState,
        new: AttemptState,
        detail: str = "",
    ) -> None:
        self._transition(step, attempt_id, old, new, detail)
        self._attempts.end(attempt_id, new)

    def _transition(
        self, step: Step, attempt_id: str, old: AttemptState, new: AttemptState, detail: str = ""
    ) -> None:
        if new not in ATTEMPT_TRANSITIONS[old]:  # the check costs a call only when it fails
            check_transition(ATTEMPT_TRANSITIONS, attempt_id, old, new, self._log)
        self._log.add((step.now, step.stimulus_id, attempt_id, old, new, detail))

    # --- log fields -----------------------------------------------------------------------

    def _fields(self, placement: Placement, **extra) -> dict:
        """A line's fields about the placement, then `extra`: one dict, not a merge of two."""
        fields = self._line(self._nodes.get(placement.node_id), placement)
        fields.update(extra)
        return fields

    def _line(self, node: NodeState | None, placement: Placement) -> dict:
        """`_fields` without extras, its node (None: not this worker's) already known: every
        task's start and end line is made here, their extras then set one by one."""
        task = placement.task
        return {
            "attempt": placement.attempt_id,
            "task": task.task_id,
            "job": task.job_id,
            "node": placement.node_id,
            "worker": self.worker_id,
            "lm": node.spec.lm if node is not None else None,
            "gm": placement.gm,
            "user": placement.user,
        }

    def _unknown_attempt_log(self, stimulus: str, attempt_id: str) -> Log:
        known = self._attempts.ended.get(attempt_id)
        return Log(
            "worker_unknown_attempt",
            {
                "attempt": attempt_id,
                "worker": self.worker_id,
                "stimulus": stimulus,
                "state": str(known) if known is not None else None,
            },
        )

    # --- invariants -----------------------------------------------------------------------

    def validate(self) -> None:
        """Raise `InvariantViolated` if a node is over-committed or the books disagree."""
        queued_total = 0
        for node in self._nodes.values():
            node.validate()
            queued_total += len(node.queue)
        if queued_total != self._queued_total:
            raise InvariantViolated(f"queued count {self._queued_total} != {queued_total}")
        running_total = sum(len(node.running) for node in self._nodes.values())
        if running_total + queued_total != len(self._live):
            raise InvariantViolated(
                f"{len(self._live)} live attempts, {running_total} running + {queued_total} queued"
            )
        for attempt_id, live in self._live.items():
            self._validate_filed(attempt_id, live)
        self._attempts.validate()
        if self._suspensions is not None:
            self._suspensions.validate(self._live)

    def _validate_filed(self, attempt_id: str, live: LiveAttempt) -> None:
        placement = live.placement
        node = self._nodes[placement.node_id]
        if live.state is AttemptState.RUNNING:
            filed = node.running.get(attempt_id)
        else:
            filed = node.queue.get(attempt_id)
        # the very object: a re-keyed priority reaches the books and the heartbeat alike
        if filed is not placement:
            raise InvariantViolated(f"attempt {attempt_id}: {live.state} but misfiled")
