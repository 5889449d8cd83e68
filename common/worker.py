"""The worker agent's core: runs assigned tasks on the nodes it hosts, queues the rest.

One agent hosts many nodes (a few containers stand for hundreds of nodes). It holds each
running task's logical resources on its node, keeps a local run queue per node in the order
of a named policy (`common/policies/local_queue.py`), and reports started, finished, failed
and cancelled attempts to its LM. It never runs an attempt id twice: ids of live and recently
ended attempts are remembered and duplicates are refused.

Optionally (`preemptive`) a node's queue is preemptive: an arrival that does not fit, and whose
job has far less estimated remaining work than running tasks there, suspends the fewest of
them that make room. A suspended attempt waits in the queue again with the work it has left,
and its reported runtime is its whole time running.

Progress. The worker knows how much work each attempt has done: the work it started with
(`Placement.start_work`: a redundant copy starts from its task's checkpoint), plus what its
runs did, read off its node's speed process (`NodeSpeed.work_until`), so it is exact under
varying speed. Its LM may ask for it (`TaskCheckpointRequested`: a `checkpointed` report per
attempt) and may tell an attempt to continue from further on (`TaskRestored`: a copy of its
task got that far); a cancelled attempt's report carries it too (docs/redundancy.md).

Like every role it is a state object with one entry point, `handle(event, now)`, that returns
commands (`RunTask`, `KillTask`, `ReportToLM`, `Log`) for the driver to carry out.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

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
from common.messages import Placement
from common.models import NodeSpec, validate_node
from common.policies.local_queue import LOCAL_QUEUE_POLICIES, LocalQueue
from common.reasons import Reason
from common.resources import ZERO, Resources
from common.speed import NodeSpeed, SpeedModel
from common.step import Step
from common.story import TransitionLog

DEFAULT_ENDED_MEMORY = 20_000
# An attempt is suspended at most this often, then runs to its end: this bounds the thrash of
# a long task that a stream of short arrivals would otherwise pause again and again (each
# suspension costs a kill, two reports and a restart, and delays the long task's job).
MAX_SUSPENSIONS = 3


class AttemptState(StrEnum):
    """An attempt as the worker sees it; NEW is only the origin of its first transition."""

    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"  # also a cancel that arrived before its assignment
    FAILED = "failed"  # refused: unknown node, impossible demand, local queue full


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


@dataclass(slots=True)
class _NodeState:
    spec: NodeSpec
    # free resources as two numbers, not a `Resources`: a frozen pair made anew at every
    # start and end of a task was a twentieth of the worker's cost in a 10,000-node run
    free_cpu: int
    free_mem: int
    running: dict[str, Placement]
    queue: LocalQueue
    speed: NodeSpeed | None = None  # its service rate over time, if the federation varies it

    @property
    def free(self) -> Resources:
        return Resources(self.free_cpu, self.free_mem)

    def fits(self, demand: Resources) -> bool:
        return demand.cpu_m <= self.free_cpu and demand.mem_mib <= self.free_mem


@dataclass(slots=True)
class _LiveAttempt:
    placement: Placement
    state: AttemptState
    # when it entered `state`: queued time gives the worker-queuing part; running, the start
    # of its current run
    since: float
    run_for: float | None = None  # running: the current run's planned wall time (RunTask's)
    # work done before its current run: where it started (a copy's checkpoint), what it
    # did before a suspension, or where a restore moved it; its task's duration less this
    # is what the current run does
    base_work: float = 0.0
    mark: float = 0.0  # its node's `work_until` when the current run started (varying speed)
    own_work: float = 0.0  # work its own runs did (a restore's jump is not its own)
    ran_seconds: float = 0.0  # wall time of its runs before its suspensions
    suspensions: int = 0


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
        aging: float = 0.0,
        preemptive: bool = False,
        preempt_factor: float = 10.0,
    ) -> None:
        """`aging`: work-seconds of priority credit a queued task gains per second waited
        (`srpt`). `preemptive`: an arrival that does not fit suspends running tasks whose
        priority is at least `preempt_factor` times its own, when that makes room."""
        if not worker_id:
            raise InvalidInput("worker_id", "must be a non-empty string")
        queue_class = LOCAL_QUEUE_POLICIES.get(queue_policy)
        if max_queue < 0:
            raise InvalidInput("max_queue", f"must be >= 0, got {max_queue}")
        if ended_memory < 1:
            raise InvalidInput("ended_memory", f"must be >= 1, got {ended_memory}")
        if not 0 <= aging < math.inf:
            raise InvalidInput("aging", f"must be a finite number >= 0, got {aging}")
        if not 1 < preempt_factor < math.inf:
            raise InvalidInput("preempt_factor", f"must be a finite number > 1, got "
                                                 f"{preempt_factor}")
        self.worker_id = worker_id
        self.queue_policy = queue_policy
        self.max_queue = max_queue
        self.preemptive = preemptive
        self.preempt_factor = preempt_factor
        self._nodes: dict[str, _NodeState] = {}
        for index, node in enumerate(nodes):
            validate_node(node)
            if node.node_id in self._nodes:
                raise InvalidInput(f"nodes[{index}].node_id", f"duplicate {node.node_id!r}")
            if node.worker != worker_id:
                raise InvalidInput(
                    f"nodes[{index}].worker", f"{node.worker!r} is not this worker {worker_id!r}"
                )
            self._nodes[node.node_id] = _NodeState(
                node, node.capacity.cpu_m, node.capacity.mem_mib, {}, queue_class(aging=aging),
                None if speed is None else NodeSpeed(speed, f"{speed_seed}/{node.node_id}"))
        self._live: dict[str, _LiveAttempt] = {}
        self._live_by_job: dict[str, set[str]] = {}  # job id -> its live attempts' ids
        # terminal states of recent attempts: refuses late duplicates with flat memory
        self._ended: OrderedDict[str, AttemptState] = OrderedDict()
        self._ended_memory = ended_memory
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
        live = self._live.get(attempt_id)
        if live is not None:
            return live.state
        return self._ended.get(attempt_id)

    # --- handlers -------------------------------------------------------------------------

    def _on_tick(self, event: Tick, step: Step) -> None:
        # nothing is time-driven here: the driver's runner ends tasks, and queued tasks
        # start on the release that makes room for them
        pass

    def _on_assigned(self, event: TaskAssigned, step: Step) -> None:
        placement = event.placement
        known = self.state_of(placement.attempt_id)
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
        elif node.fits(demand):
            # Work conservation keeps every queued task of this node unable to fit its free
            # resources, so none of higher order could start before this one if it fits now.
            self._start(step, node, placement)
        elif self.preemptive and self._suspend_for(step, node, placement):
            self._start(step, node, placement)
            self._start_queued(step, node)  # what the victims freed beyond the arrival's need
        elif self._queued_total >= self.max_queue:
            self._refuse(step, placement, "local queue full")
        else:
            self._enqueue(step, node, placement)

    def _on_run_ended(self, event: TaskRunEnded, step: Step) -> None:
        live = self._live.get(event.attempt_id)
        if live is None or live.state is not AttemptState.RUNNING:
            # e.g. the runner's own end of a task already killed: it was reported then
            step.emit(self._unknown_attempt_log("task_run_ended", event.attempt_id))
            return
        placement = live.placement
        node = self._nodes[placement.node_id]
        self._release(step, node, placement, AttemptState.FINISHED)
        # the runner measured its last run only: a suspended attempt ran before, too
        runtime = live.ran_seconds + event.runtime
        fields = self._fields(placement, runtime=runtime)
        duration = placement.task.duration
        if duration is not None:
            fields["own_work"] = live.own_work + max(0.0, duration - live.base_work)
        if live.suspensions:
            fields["suspensions"] = live.suspensions
        step.emit(ReportToLM(Reason.FINISHED, placement.attempt_id, runtime=runtime))
        step.emit(Log("task_finished", fields))
        self._start_queued(step, node)

    def _on_reprioritized(self, event: JobReprioritized, step: Step) -> None:
        """The job's attempts here take its new priority; the queued ones are re-keyed.
        Nothing starts: an order change frees no resources."""
        priority = event.priority
        if not math.isfinite(priority):
            raise InvalidInput("priority", f"must be a finite number, got {priority}")
        attempts = self._live_by_job.get(event.job_id)
        if not attempts:
            return
        queued_on: dict[str, _NodeState] = {}
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
        placement = live.placement
        node = self._nodes[placement.node_id]
        detail = str(event.reason)
        fields = self._fields(placement, reason=detail, was=str(live.state))
        work = self._progress(node, live, step.now)
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
            work = self._progress(self._nodes[placement.node_id], live, step.now)
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
        progress = self._progress(node, live, now)
        duration = placement.task.duration
        if progress is None or event.work <= progress or not math.isfinite(event.work):
            return
        work = min(event.work, duration)
        fields = self._fields(placement, from_work=progress, to_work=work)
        if live.state is AttemptState.RUNNING:
            live.own_work += progress - live.base_work
            live.ran_seconds += max(0.0, now - live.since)
            live.since = now
            live.base_work = work
            step.emit(KillTask(placement.attempt_id))  # no TaskRunEnded of the old run
            live.run_for = self._plan_run(node, live, now, fields)
            step.emit(RunTask(placement.attempt_id, node.spec.node_id, duration=live.run_for))
        else:
            live.base_work = work
        step.emit(Log("task_restored", fields))

    def _cancel_unknown(self, step: Step, attempt_id: str) -> None:
        if attempt_id not in self._ended:
            # The cancel overtook its assignment: remember it, so the late assignment is
            # refused instead of running on resources the LM has already taken back.
            self._end(step, attempt_id, AttemptState.NEW, AttemptState.CANCELLED)
        step.emit(self._unknown_attempt_log("task_cancelled", attempt_id))

    # --- transitions ----------------------------------------------------------------------

    def _start(
        self,
        step: Step,
        node: _NodeState,
        placement: Placement,
        live: _LiveAttempt | None = None,
        queued_seconds: float = 0.0,
    ) -> None:
        """Start a new attempt (`live` None) or a queued one, suspended before or not."""
        attempt_id = placement.attempt_id
        now = step.now
        if live is None:
            self._transition(step, attempt_id, AttemptState.NEW, AttemptState.RUNNING)
            live = self._live[attempt_id] = _LiveAttempt(placement, AttemptState.RUNNING, now,
                                                         base_work=placement.start_work)
            self._index_job(placement)
        else:
            self._transition(step, attempt_id, AttemptState.QUEUED, AttemptState.RUNNING)
            live.placement, live.state, live.since = placement, AttemptState.RUNNING, now
        demand = placement.task.demand
        node.free_cpu -= demand.cpu_m
        node.free_mem -= demand.mem_mib
        node.running[attempt_id] = placement
        duration = placement.task.duration
        fields = self._fields(placement, duration=duration,
                             queued_seconds=queued_seconds, priority=placement.priority,
                             pilot=placement.pilot)
        if placement.copy_of is not None:
            fields["copy_of"] = placement.copy_of
        if live.base_work:
            fields["start_work"] = live.base_work
        if live.suspensions:
            fields["remaining_work"] = self._work_left(live)
            fields["resumed"] = True
        live.run_for = self._plan_run(node, live, now, fields)
        step.emit(RunTask(attempt_id, node.spec.node_id, duration=live.run_for))
        step.emit(ReportToLM(Reason.STARTED, attempt_id, at=now))
        step.emit(Log("task_started", fields))

    def _plan_run(self, node: _NodeState, live: _LiveAttempt, now: float,
                  fields: dict) -> float | None:
        """The wall time of a run starting now: the work left, at its node's speed (a
        varying node's run lasts what the node takes to do it; `run_for` says so)."""
        work = self._work_left(live)
        if node.speed is not None and work is not None:
            live.mark = node.speed.work_until(now)
            work = fields["run_for"] = node.speed.time_to_do(now, work)
        return work

    @staticmethod
    def _work_left(live: _LiveAttempt) -> float | None:
        duration = live.placement.task.duration
        return None if duration is None else max(0.0, duration - live.base_work)

    def _progress(self, node: _NodeState, live: _LiveAttempt, now: float) -> float | None:
        """The work the attempt has done by `now`; None for a task of no known duration."""
        duration = live.placement.task.duration
        if duration is None:
            return None
        if live.state is not AttemptState.RUNNING:
            return live.base_work
        # its current run's work: the node's clock at constant speed, else its speed process
        ran = now - live.since if node.speed is None else node.speed.work_until(now) - live.mark
        return live.base_work + min(max(0.0, ran), duration - live.base_work)

    def _enqueue(self, step: Step, node: _NodeState, placement: Placement) -> None:
        attempt_id = placement.attempt_id
        self._transition(step, attempt_id, AttemptState.NEW, AttemptState.QUEUED)
        self._arrival_seq += 1
        node.queue.push(placement, self._arrival_seq, step.now)
        self._queued_total += 1
        self._live[attempt_id] = _LiveAttempt(placement, AttemptState.QUEUED, step.now,
                                              base_work=placement.start_work)
        self._index_job(placement)
        fields = self._fields(placement, queue_length=len(node.queue),
                             priority=placement.priority, pilot=placement.pilot)
        step.emit(Log("task_queued", fields))

    def _start_queued(self, step: Step, node: _NodeState) -> None:
        """Start queued tasks that fit, in policy order; one that does not fit is skipped."""
        chosen: list[Placement] = []
        free_cpu, free_mem = node.free_cpu, node.free_mem
        for placement in node.queue:
            if free_cpu <= 0 or free_mem <= 0:
                break  # every demand is positive in both kinds: nothing more can fit
            demand = placement.task.demand
            if demand.cpu_m <= free_cpu and demand.mem_mib <= free_mem:
                chosen.append(placement)
                free_cpu -= demand.cpu_m
                free_mem -= demand.mem_mib
        for placement in chosen:
            node.queue.remove(placement.attempt_id)
            self._queued_total -= 1
            live = self._live[placement.attempt_id]
            self._start(step, node, placement, live, step.now - live.since)

    # --- preemptive mode ------------------------------------------------------------------

    def _suspend_for(self, step: Step, node: _NodeState, arrival: Placement) -> bool:
        """Suspend the running attempts that make room for `arrival`, if some do."""
        victims = _fewest_releasing(self._candidates(node, arrival),
                                    arrival.task.demand.cpu_m - node.free_cpu,
                                    arrival.task.demand.mem_mib - node.free_mem)
        # a suspended attempt waits in the queue: it needs room there
        if not victims or self._queued_total + len(victims) > self.max_queue:
            return False
        for victim in victims:
            self._suspend(step, node, self._live[victim.attempt_id], arrival.attempt_id)
        return True

    def _candidates(self, node: _NodeState, arrival: Placement) -> list[Placement]:
        """Running attempts the arrival may suspend, the longest (and then the latest
        started, which lose the least work) first."""
        if arrival.pilot:
            threshold = 0.0  # a pilot counts as the shortest: any estimate is far longer
        elif arrival.priority > 0:
            threshold = self.preempt_factor * arrival.priority
        else:
            return []  # no estimate: nothing to weigh a running task against
        live = self._live
        candidates = [
            placement for attempt_id, placement in node.running.items()
            if not placement.pilot and placement.copy_of is None and placement.priority > 0
            and placement.priority >= threshold
            and live[attempt_id].suspensions < MAX_SUSPENSIONS
        ]
        candidates.sort(key=lambda p: (-p.priority, -live[p.attempt_id].since))
        return candidates

    def _suspend(self, step: Step, node: _NodeState, live: _LiveAttempt, for_attempt: str) -> None:
        placement = live.placement
        attempt_id = placement.attempt_id
        now = step.now
        ran = max(0.0, now - live.since)
        progress = self._progress(node, live, now)
        work_done = remaining = None
        if progress is not None:
            work_done = progress - live.base_work
            live.own_work += work_done
            live.base_work = progress
            remaining = self._work_left(live)
        del node.running[attempt_id]
        demand = placement.task.demand
        node.free_cpu += demand.cpu_m
        node.free_mem += demand.mem_mib
        self._transition(step, attempt_id, AttemptState.RUNNING, AttemptState.QUEUED,
                         f"suspended for {for_attempt}")
        live.state, live.since, live.run_for = AttemptState.QUEUED, now, None
        live.ran_seconds += ran
        live.suspensions += 1
        self._arrival_seq += 1
        node.queue.push(placement, self._arrival_seq, now)  # its wait ages from now
        self._queued_total += 1
        step.emit(KillTask(attempt_id))  # drivers cancel its run: no TaskRunEnded follows
        step.emit(ReportToLM(Reason.SUSPENDED, attempt_id, at=now))
        step.emit(Log("task_suspended", self._fields(
            placement, work_done=work_done, remaining_work=remaining, for_attempt=for_attempt,
            priority=placement.priority, suspensions=live.suspensions,
            ran_seconds=live.ran_seconds)))

    def _release(
        self, step: Step, node: _NodeState, placement: Placement, new: AttemptState
    ) -> None:
        del node.running[placement.attempt_id]
        demand = placement.task.demand
        node.free_cpu += demand.cpu_m
        node.free_mem += demand.mem_mib
        self._end(step, placement.attempt_id, AttemptState.RUNNING, new)

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
        live = self._live.pop(attempt_id, None)
        if live is not None:
            self._unindex_job(live.placement)
        self._ended[attempt_id] = new
        if len(self._ended) > self._ended_memory:
            self._ended.popitem(last=False)

    def _index_job(self, placement: Placement) -> None:
        self._live_by_job.setdefault(placement.task.job_id, set()).add(placement.attempt_id)

    def _unindex_job(self, placement: Placement) -> None:
        job_id = placement.task.job_id
        attempts = self._live_by_job[job_id]
        attempts.discard(placement.attempt_id)
        if not attempts:
            del self._live_by_job[job_id]

    def _transition(
        self, step: Step, attempt_id: str, old: AttemptState, new: AttemptState, detail: str = ""
    ) -> None:
        if new not in ATTEMPT_TRANSITIONS[old]:  # the check costs a call only when it fails
            check_transition(ATTEMPT_TRANSITIONS, attempt_id, old, new, self._log)
        self._log.record(step.now, step.stimulus_id, attempt_id, old, new, detail)

    # --- log fields -----------------------------------------------------------------------

    def _fields(self, placement: Placement, **extra) -> dict:
        """A line's fields about the placement, then `extra`: one dict, not a merge of two
        (every task's lines come through here)."""
        node = self._nodes.get(placement.node_id)
        fields = {
            "attempt": placement.attempt_id,
            "task": placement.task.task_id,
            "job": placement.task.job_id,
            "node": placement.node_id,
            "worker": self.worker_id,
            "lm": node.spec.lm if node is not None else None,
            "gm": placement.gm,
            "user": placement.user,
        }
        fields.update(extra)
        return fields

    def _unknown_attempt_log(self, stimulus: str, attempt_id: str) -> Log:
        known = self._ended.get(attempt_id)
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
        for node_id, node in self._nodes.items():
            held = ZERO
            for placement in node.running.values():
                held = held + placement.task.demand
            if not held.fits_in(node.spec.capacity):
                raise InvariantViolated(f"node {node_id}: running {held} > {node.spec.capacity}")
            if node.free_cpu < 0 or node.free_mem < 0:
                raise InvariantViolated(f"node {node_id}: negative free {node.free}")
            if held + node.free != node.spec.capacity:
                raise InvariantViolated(
                    f"node {node_id}: free {node.free} + running {held} != {node.spec.capacity}"
                )
            self._validate_queue(node)
            queued_total += len(node.queue)
        if queued_total != self._queued_total:
            raise InvariantViolated(f"queued count {self._queued_total} != {queued_total}")
        running_total = sum(len(node.running) for node in self._nodes.values())
        if running_total + queued_total != len(self._live):
            raise InvariantViolated(
                f"{len(self._live)} live attempts, {running_total} running + {queued_total} queued"
            )
        for attempt_id, live in self._live.items():
            self._validate_live(attempt_id, live)
        indexed = sum(len(attempts) for attempts in self._live_by_job.values())
        if indexed != len(self._live):
            raise InvariantViolated(f"{indexed} attempts indexed by job, {len(self._live)} live")

    def _validate_live(self, attempt_id: str, live: _LiveAttempt) -> None:
        placement = live.placement
        node = self._nodes[placement.node_id]
        if live.state is AttemptState.RUNNING:
            filed = node.running.get(attempt_id)
        else:
            filed = node.queue.get(attempt_id)
        # the very object: a re-keyed priority reaches the books and the heartbeat alike
        if filed is not placement or attempt_id in self._ended:
            raise InvariantViolated(f"attempt {attempt_id}: {live.state} but misfiled")
        if attempt_id not in self._live_by_job.get(placement.task.job_id, ()):
            raise InvariantViolated(f"attempt {attempt_id}: not indexed by its job")
        if not 0 <= live.suspensions <= MAX_SUSPENSIONS:
            raise InvariantViolated(f"attempt {attempt_id}: suspended {live.suspensions} times")
        duration = placement.task.duration
        if live.base_work < 0 or (duration is not None and live.base_work > duration + 1e-9):
            raise InvariantViolated(f"attempt {attempt_id}: {live.base_work} work done of "
                                    f"{duration}")

    def _validate_queue(self, node: _NodeState) -> None:
        # work conservation: a queued task that fits now should have been started
        for placement in node.queue:
            if node.fits(placement.task.demand):
                raise InvariantViolated(
                    f"node {node.spec.node_id}: queued {placement.attempt_id} fits {node.free}"
                )


def _fewest_releasing(
    candidates: Sequence[Placement], need_cpu: int, need_mem: int
) -> list[Placement]:
    """Victims among `candidates` (most wanted first) whose demands add up to the need in
    both kinds; empty if all of them do not.

    One victim when one suffices (the first such). Otherwise the shortest prefix that
    suffices, less those the others make redundant (the last first): no victim is left that
    the arrival could do without, so none of them fits what remains beside the arrival. The
    true minimum is a set cover; a node runs few tasks, and one victim is the common case.
    """
    for placement in candidates:
        demand = placement.task.demand
        if demand.cpu_m >= need_cpu and demand.mem_mib >= need_mem:
            return [placement]
    chosen: list[Placement] = []
    cpu = mem = 0
    for placement in candidates:
        chosen.append(placement)
        cpu += placement.task.demand.cpu_m
        mem += placement.task.demand.mem_mib
        if cpu >= need_cpu and mem >= need_mem:
            break
    else:
        return []
    for placement in reversed(chosen[:-1]):  # the last one was needed to reach the need
        demand = placement.task.demand
        if cpu - demand.cpu_m >= need_cpu and mem - demand.mem_mib >= need_mem:
            chosen.remove(placement)
            cpu -= demand.cpu_m
            mem -= demand.mem_mib
    return chosen
