"""The Local Master: the truth about one cluster, and the judge of every GM decision.

The LM owns its nodes' free resources, the partition map (static node ownership plus the
logical nodes that repartitions create) and the running attempts. GMs plan on stale views;
the LM applies each launch, repartition or preemption item against the truth and refuses
what no longer fits (after Nomad's plan applier). It never over-commits a node, never runs
an attempt id twice, and answers every request with a fresh snapshot so the asking GM's view
converges at once.

`LocalMaster` is the protocol: which event does what. The mechanisms are books beside it:
- `LMAttemptBook` (common/lm_attempts.py): what it knows of each attempt, and in what state;
- `Judge` (common/lm_verdicts.py): the checks of each item against the truth;
- `NodeQueueBook` (common/lm_queues.py): the attempts waiting in its nodes' local queues, with
  `[policies.local_queues] depth` above 0 (docs/local-queues.md);
- `CopyBook` (common/lm_copies.py): the redundant copies it runs on its idle nodes, with a
  redundancy policy that makes copies (docs/redundancy.md);
- `WorkerWatch` (common/lm_workers.py): its workers' liveness and its recovery;
- `SnapshotMaker` (common/lm_snapshots.py): what its replies and heartbeats show the GMs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from common.cluster import ClusterTopology, JournaledState, LMSnapshot
from common.commands import (
    Command,
    Log,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReprioritizeOnWorker,
    StartOnWorker,
    StopOnWorker,
)
from common.errors import InvalidInput, InvariantViolated
from common.events import (
    CancelRequested,
    DispatchFailed,
    LaunchRequested,
    PreemptRequested,
    ReprioritizeRequested,
    TaskEventBacklog,
    Tick,
    WorkerHeartbeat,
    WorkerTaskCheckpointed,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
    WorkerTaskSuspended,
)
from common.lm_attempts import AttemptState, LMAttemptBook, RunningAttempt
from common.lm_copies import CopyBook
from common.lm_queues import NodeQueueBook
from common.lm_snapshots import SnapshotMaker
from common.lm_verdicts import Judge
from common.lm_workers import WorkerWatch
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.policies.copies import makes_copies, reprioritizes
from common.reasons import Reason
from common.step import Step
from common.story import TransitionLog

if TYPE_CHECKING:
    from common.policies.copies import CopyOptions

# ends the LM itself decides on: its worker must be told to stop the attempt
_STOPPED_BY_LM = frozenset({Reason.PREEMPTED, Reason.CANCELLED})

# the log line of each end (`task_finished`...), made once: formatting an enum member is
# slow, and every attempt ends
_END_LINES = {why: f"task_{why}" for why in Reason}

# read for every attempt: enum members looked up once (a descriptor call each time on
# Python 3.11)
_STARTED, _LAUNCHED, _QUEUED = Reason.STARTED, Reason.LAUNCHED, Reason.QUEUED
_REPARTITION, _LAUNCHED_STATE = RequestKind.REPARTITION, AttemptState.LAUNCHED


class LocalMaster:
    """One LM. Drive it with `handle(event, now)`; carry out the commands it returns. Its
    keywords set up its books (the module's docstring): `worker_timeout` (the testbed's is
    three heartbeat intervals), `dispatch_timeout` and `recovering` (a restarted LM) its
    `WorkerWatch`; `queue_depth` its `NodeQueueBook`; `redundancy`, `copy_options` (None: the
    policy's defaults) and `max_copies` its `CopyBook`; the heartbeat's its `SnapshotMaker`."""

    def __init__(
        self,
        topology: ClusterTopology,
        *,
        now: float = 0.0,
        epoch: int = 0,
        heartbeat_interval: float = 1.0,
        heartbeat_keepalive: float | None = None,
        report_ends: bool = False,
        worker_timeout: float = 3.0,
        dispatch_timeout: float | None = None,
        recovering: bool = False,
        queue_depth: int = 0,
        redundancy: str = "none",
        copy_options: CopyOptions | None = None,
        max_copies: int = 4,
        story_len: int = 100_000,
        ended_memory: int = 200_000,
    ) -> None:
        self.lm = topology.lm
        self.topology = topology
        self.state = JournaledState(topology)
        self.epoch = epoch
        self.log = TransitionLog(story_len)
        if queue_depth < 0:
            raise InvalidInput("queue_depth", f"must be >= 0, got {queue_depth}")
        self._attempts = LMAttemptBook(self.lm, self.log, ended_memory,
                                       by_job=reprioritizes(queue_depth, redundancy))
        self._judge = Judge(topology, self.state, self._attempts, epoch)
        # the local queues' book; at depth 0, opened only if a worker queues an attempt anyway
        self._queues = (NodeQueueBook(topology, self.state, self._attempts, queue_depth)
                        if queue_depth else None)
        self._copies = CopyBook(
            topology, self.state, self._attempts.running, policy=redundancy,
            options=copy_options, max_copies=max_copies, epoch=epoch,
        ) if makes_copies(redundancy) else None
        self._workers = WorkerWatch(
            topology, self.state, now, worker_timeout,
            4 * worker_timeout if dispatch_timeout is None else dispatch_timeout, recovering)
        self._snapshots = SnapshotMaker(topology, self.state, self._attempts, epoch,
                                        heartbeat_interval, now, heartbeat_keepalive, report_ends)
        # task events cannot leave (the driver's outbox is full): refuse new work meanwhile
        self.backlogged = False
        self._handlers: dict[type, Callable[..., None]] = {
            LaunchRequested: self._on_launch,
            PreemptRequested: self._on_preempt,
            CancelRequested: self._on_cancel,
            ReprioritizeRequested: self._on_reprioritize,
            WorkerTaskStarted: self._on_started,
            WorkerTaskFinished: self._on_finished,
            WorkerTaskFailed: self._on_failed,
            WorkerTaskSuspended: self._on_suspended,
            WorkerTaskCheckpointed: self._on_checkpointed,
            DispatchFailed: self._on_dispatch_failed,
            WorkerHeartbeat: self._on_worker_heartbeat,
            TaskEventBacklog: self._on_task_event_backlog,
            Tick: self._on_tick,
        }

    # -- the entry point ---------------------------------------------------------------------

    def handle(self, event, now: float) -> list[Command]:
        step = Step(event.stimulus_id, now)
        self._handlers[type(event)](event, step)
        if self._copies is not None:
            self._copies.rebalance(step, self._queues, self.accepting)
        if self._snapshots.ends_unreported:
            self._publish_heartbeat(step)
        return step.commands

    @property
    def running(self) -> dict[str, RunningAttempt]:
        """The live attempts (launched, running or adopted) by id; read, never write."""
        return self._attempts.running

    @property
    def recovering(self) -> bool:
        return self._workers.recovering

    unlisted_hold = property(lambda self: self._workers.unlisted_hold)  # see WorkerWatch
    # whether its Ticks can wait for the next event: they would publish the last heartbeat again
    waits_for_events = property(lambda self: self._snapshots.shown and not self._workers.timed)

    @property
    def accepting(self) -> bool:
        """Whether it takes new work: neither recovering nor backlogged."""
        return not self._workers.recovering and not self.backlogged

    def _refusal(self) -> Reason | None:
        """Why it takes no new work now, if it does not."""
        return (Reason.LM_RECOVERING if self._workers.recovering
                else Reason.LM_BACKLOGGED if self.backlogged else None)

    def beat_now(self) -> None:
        """Its next Tick publishes a heartbeat, however recent the last (a driver settling)."""
        self._snapshots.next_beat_at = float("-inf")

    @property
    def copies(self) -> CopyBook | None:
        """Its redundant copies, if its policy makes any; read, never write."""
        return self._copies

    def story(self, *keys: str) -> list[dict]:
        return self.log.story(*keys)

    # -- requests from GMs -------------------------------------------------------------------

    def _on_launch(self, event: LaunchRequested, step: Step) -> None:
        """Each item judged on its own, and acted on, in order."""
        refusal, results = self._refusal(), []
        gm, kind, lm_epoch = event.gm, event.kind, event.lm_epoch
        index, judge = self.topology.index, self._judge.launch
        for item in event.placements:
            i = index.get(item.node_id, -1)
            reason = judge(gm, kind, item, i, lm_epoch, refusal, self._queues)
            results.append(self._carry_out(step, kind, item, i, reason, "launch_refused"))
        step.emit(ReplyToGM(gm, event.request_id, tuple(results), self.reply_snapshot()))

    def _carry_out(self, step: Step, kind: RequestKind, item: Placement, i: int, reason: Reason,
                   refused: str) -> LaunchResult:
        """Act on the verdict on `item`: start it (launched or queued), or say why not."""
        if reason is _LAUNCHED or reason is _QUEUED:
            self._start(step, item, i, kind is _REPARTITION, reason is _QUEUED)
        elif reason is Reason.ALREADY_RUNNING:
            step.emit(Log("launch_repeated", _fields(self.lm, item)))
        else:
            step.emit(Log(refused, _fields(self.lm, item, reason=str(reason))))
        return LaunchResult(item.attempt_id, item.task.task_id, item.node_id, reason)

    def _start(self, step: Step, item: Placement, i: int, logical: bool,
               queued: bool = False) -> None:
        demand = item.task.demand
        if self._copies is not None:
            self._copies.node_taken(step, i)  # stopped before the new task reaches the worker
        self._hold(step, RunningAttempt(item, i, logical, step.now, queued=queued), item.node_id)
        if logical:
            owner = self.topology.gms[self.topology.owner[i]]
            step.emit(Log("repartition", _fields(self.lm, item, from_gm=owner,
                                                 cpu_m=demand.cpu_m, mem_mib=demand.mem_mib)))
        step.emit(_launched_line(self.lm, item, logical, queued))
        step.emit(StartOnWorker(self.topology.workers[i], item))

    def _on_preempt(self, event: PreemptRequested, step: Step) -> None:
        item = event.placement
        i = self.topology.index.get(item.node_id, -1)
        owner = self.topology.gms[self.topology.owner[i]] if i >= 0 else ""
        kind = RequestKind.LAUNCH if owner == event.gm else RequestKind.REPARTITION
        reason = self._judge.preemption(event.gm, kind, item, event.victims, i, event.lm_epoch,
                                        self._refusal(), self._queues)
        if reason is Reason.LAUNCHED:
            for victim in event.victims:
                self._end(step, victim, Reason.PREEMPTED,
                          detail=f"for {item.attempt_id} of {event.gm}")
        result = self._carry_out(step, kind, item, i, reason, "preemption_refused")
        step.emit(ReplyToGM(event.gm, event.request_id, (result,), self.reply_snapshot()))

    def _on_cancel(self, event: CancelRequested, step: Step) -> None:
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is None or attempt.placement.gm != event.gm:
            step.emit(Log("cancel_ignored", {"attempt": event.attempt_id, "gm": event.gm}))
            return
        self._end(step, event.attempt_id, Reason.CANCELLED, publish=False)

    def _on_reprioritize(self, event: ReprioritizeRequested, step: Step) -> None:
        """The GM's job has a new priority: its attempts here take it (a copy candidate is
        re-keyed), and each worker holding one of them is told once. A worker keys its queue
        by finite priorities only: an infinite one stays in this LM's books. An LM with
        neither local queues nor copies has no order to correct, and ignores it."""
        workers = self._attempts.reprioritize(event.job_id, event.gm, event.priority,
                                              self.topology.workers, self._copies)
        if workers is None:
            return
        if not workers:
            step.emit(Log("reprioritize_ignored", {"job": event.job_id, "gm": event.gm,
                                                   "lm": self.lm}))
        elif math.isfinite(event.priority):
            for worker in workers:
                step.emit(ReprioritizeOnWorker(worker, event.job_id, event.priority))

    # -- reports from worker agents ----------------------------------------------------------

    def _on_started(self, event: WorkerTaskStarted, step: Step) -> None:
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is None:  # a copy's (the GMs never hear of it), or unknown
            if self._copies is None or not self._copies.acknowledge(event.attempt_id):
                step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                        "kind": "started"}))
            return
        if attempt.queued:
            if (attempt.suspended_at is not None and event.at is not None
                    and event.at <= attempt.suspended_at):
                # a start from before its suspension, delivered again
                step.emit(Log("worker_report_repeated", {"attempt": event.attempt_id}))
                return
            if self._queues.started(attempt):
                self._snapshots.changed()
        if attempt.state is not _LAUNCHED_STATE:  # a retried report, adopted, resumed
            step.emit(Log("worker_report_repeated", {"attempt": event.attempt_id}))
        else:
            self._attempts.start(step, attempt)
            if self._copies is not None:
                self._copies.original_started(attempt, step.now)
            worker = self.topology.workers[attempt.node_index]
            if event.worker == worker:
                self._workers.heard(worker, step.now)
            # no line of its own: the worker's `task_started` says it, with the start's own
            # time (one line less per task is a seventh of what the engine carries under load)
            started = _task_event(self.lm, attempt.placement, _STARTED, at=event.at)
            step.emit(PublishTaskEvent(attempt.placement.gm, started))

    def _on_suspended(self, event: WorkerTaskSuspended, step: Step) -> None:
        """The worker paused a running attempt for a much shorter one: it is queued again."""
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is not None and self._queues is not None and self._queues.unstarted(attempt):
            attempt.suspended_at = event.at  # its start was still waiting for room
            return
        if attempt is None or attempt.queued:
            step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                    "kind": "suspended"}))
            return
        if self._copies is not None:
            self._copies.original_stopped(step, event.attempt_id, "suspended")
        self._queue_book().requeue(attempt)
        attempt.suspended_at = event.at
        self._snapshots.changed()

    def _on_finished(self, event: WorkerTaskFinished, step: Step) -> None:
        copies = self._copies
        if event.attempt_id in self._attempts.running:
            self._end(step, event.attempt_id, Reason.FINISHED, runtime=event.runtime)
        elif copies is not None and copies.knows(event.attempt_id):
            original = copies.copy_finished(step, event.attempt_id)
            if original is not None:  # the first of its task's attempts to finish: it wins
                runtime = copies.runtime_of(original, step.now)
                self._end(step, original, Reason.FINISHED,
                          runtime=event.runtime if runtime is None else runtime,
                          detail=f"won by copy {event.attempt_id}", stop=True)
        else:
            # a run that crossed its end on the way (its preemption, say) did its work for
            # nothing: `finished_after_end` says so; an attempt never known, `ignored`
            ended = self._attempts.ended.get(event.attempt_id)
            step.emit(Log("worker_report_ignored" if ended is None else "finished_after_end",
                          {"attempt": event.attempt_id, "kind": "finished", "lm": self.lm,
                           "ended": None if ended is None else str(ended),
                           "runtime": event.runtime}))

    def _on_checkpointed(self, event: WorkerTaskCheckpointed, step: Step) -> None:
        if self._copies is not None:
            self._copies.checkpointed(step, event.attempt_id, event.work)

    def _on_failed(self, event: WorkerTaskFailed, step: Step) -> None:
        if event.attempt_id in self._attempts.running:
            self._end(step, event.attempt_id, Reason.FAILED, detail=event.detail)
        elif self._copies is not None and self._copies.knows(event.attempt_id):
            self._copies.copy_ended(step, event.attempt_id, event.work, event.detail)
        elif event.attempt_id not in self._attempts.ended:  # else the answer to its own stop
            step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                    "kind": "failed"}))

    def _on_dispatch_failed(self, event: DispatchFailed, step: Step) -> None:
        if self._copies is not None and self._copies.is_copy(event.attempt_id):
            self._copies.copy_lost(step, event.attempt_id, event.detail)
            return
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is None or attempt.acknowledged:
            step.emit(Log("dispatch_failure_ignored", {"attempt": event.attempt_id}))
        else:
            self._end(step, event.attempt_id, Reason.LOST,
                      detail=f"never reached {event.worker}: {event.detail}")

    # -- taking on and ending attempts -------------------------------------------------------

    def _hold(self, step: Step, attempt: RunningAttempt, detail: str) -> None:
        """Take on a new attempt: its resources, or a place in its node's local queue."""
        i = attempt.node_index
        if attempt.queued:
            self._queue_book().enqueue(i)
        else:
            demand = attempt.placement.task.demand
            self.state.take(i, demand.cpu_m, demand.mem_mib)
        self._attempts.add(step, attempt, detail)
        self._snapshots.changed()

    def _queue_book(self) -> NodeQueueBook:
        """The local queues' book, for an attempt its worker queued: an LM without local
        queues opens one (of depth 0) when a worker's own queue holds one anyway (its
        preemptive queue suspended a task, or it took a launch the LM thought would fit)."""
        if self._queues is None:
            self._queues = NodeQueueBook(self.topology, self.state, self._attempts, 0)
        return self._queues

    def _end(
        self, step: Step, attempt_id: str, why: Reason, *, runtime: float | None = None,
        detail: str = "", publish: bool = True, stop: bool = False,
    ) -> None:
        """Free an attempt's resources (a logical node goes back to its node's owner); its
        copies end with it. `stop`: its worker still runs it (a copy of it won)."""
        attempt = self._attempts.end(step, attempt_id, why, detail)
        item = attempt.placement
        if self._copies is not None:
            self._copies.original_stopped(step, attempt_id, why)
        if self._queues is not None:
            self._queues.ended(attempt)
        else:
            demand = item.task.demand
            self.state.give(attempt.node_index, demand.cpu_m, demand.mem_mib)
        self._snapshots.changed(ended=True)
        if why in _STOPPED_BY_LM or stop:
            step.emit(StopOnWorker(self.topology.workers[attempt.node_index], attempt_id,
                                   why if why in _STOPPED_BY_LM else Reason.CANCELLED))
        step.emit(_ended_line(self.lm, item, why, runtime, detail))
        if publish:
            step.emit(PublishTaskEvent(item.gm, _task_event(self.lm, item, why, runtime,
                                                            detail)))

    # -- worker heartbeats and liveness ------------------------------------------------------

    def _on_worker_heartbeat(self, event: WorkerHeartbeat, step: Step) -> None:
        worker, now = event.worker, step.now
        nodes = self._workers.heard(worker, now)
        if nodes is None:
            step.emit(Log("unknown_worker", {"worker": worker}))
            return
        if self._workers.nodes_up(step, nodes):
            self._snapshots.changed()
        running = self._attempts.running
        reported = set()
        for item in event.running:
            reported.add(item.attempt_id)
            if item.copy_of is not None:
                copies = self._copies
                if copies is None or not copies.listed(item.attempt_id, now,
                                                       self._workers.timeout):
                    self._stop_stray(step, worker, item)
                continue
            known = running.get(item.attempt_id)
            if known is None:
                self._adopt_or_stop(step, worker, item, item.attempt_id in event.queued)
            else:
                known.acknowledged = True
        for attempt_id in self._workers.unlisted(running, nodes, reported, now):
            self._end(step, attempt_id, Reason.LOST, detail=f"{worker} no longer runs it")
        if self._copies is not None:
            overdue = self._workers.overdue
            for copy_id in list(self._copies.missing(nodes, reported, now, overdue)):
                self._copies.copy_lost(step, copy_id, f"{worker} no longer runs it")
        self._workers.listed(worker)
        self._maybe_end_recovery(step)

    def _adopt_or_stop(self, step: Step, worker: str, item: Placement, queued: bool) -> None:
        """A restarted LM learns running (and queued) attempts from workers; a dead one is
        stopped."""
        i = self._workers.adoptable(worker, item, queued, self._attempts.ended)
        if i < 0:
            self._stop_stray(step, worker, item)
            return
        owner = self.topology.gms[self.topology.owner[i]]
        self._hold(step, RunningAttempt(item, i, owner != item.gm, step.now, AttemptState.ADOPTED,
                                        acknowledged=True, queued=queued), worker)
        step.emit(Log("attempt_adopted", _fields(self.lm, item)))

    def _stop_stray(self, step: Step, worker: str, item: Placement) -> None:
        """The worker runs an attempt this LM does not hold (a copy included): stopped."""
        step.emit(StopOnWorker(worker, item.attempt_id, Reason.CANCELLED))
        step.emit(Log("attempt_stopped_on_worker", _fields(self.lm, item)))

    def _maybe_end_recovery(self, step: Step) -> None:
        unheard = self._workers.end_recovery(step.now)
        if unheard is not None:
            step.emit(Log("recovery_done", {"adopted": len(self._attempts.running),
                                            "unheard_workers": unheard}))

    def _mark_worker_down(self, step: Step, worker: str) -> None:
        if not self._workers.any_up(worker):
            return
        nodes = self._workers.nodes[worker]
        if self._copies is not None:
            self._copies.nodes_down(step, nodes)
        down = set(nodes)
        for attempt_id, attempt in list(self._attempts.running.items()):
            if attempt.node_index in down:
                self._end(step, attempt_id, Reason.LOST, detail=f"{worker} missed its heartbeats")
        self._workers.nodes_down(step, worker)
        self._snapshots.changed()

    # -- time, and the task-event backlog ----------------------------------------------------

    def _on_tick(self, event: Tick, step: Step) -> None:
        now = step.now
        for worker in self._workers.silent(now):
            self._mark_worker_down(step, worker)
        self._maybe_end_recovery(step)
        if self._snapshots.beat_due(now):
            self._publish_heartbeat(step)

    def _publish_heartbeat(self, step: Step) -> None:
        heartbeat = self._snapshots.heartbeat(step.now, self._queues, self.backlogged,
                                              self.accepting)
        if heartbeat is not None:
            step.emit(PublishHeartbeat(heartbeat))

    def _on_task_event_backlog(self, event: TaskEventBacklog, step: Step) -> None:
        """While its task events cannot leave, an LM takes no new work (each start and end
        would add to what cannot leave) and shows its nodes unavailable, so that GMs stop
        asking; when they drain, it shows them again."""
        if event.full == self.backlogged:
            return
        self.backlogged = event.full
        self.state.journal.extend(range(len(self.topology)))  # every node's `up` as shown
        self._snapshots.changed()
        self.log.record(step.now, step.stimulus_id, self.lm, "accepting" if event.full else
                        "backlogged", "backlogged" if event.full else "accepting",
                        f"{event.size} task events waiting")
        name = "lm_backlogged" if event.full else "lm_accepting"
        step.emit(Log(name, {"lm": self.lm, "task_events_waiting": event.size}))

    # -- state out ---------------------------------------------------------------------------

    def reply_snapshot(self) -> LMSnapshot:
        """The state a reply carries: resources and liveness, not the running list."""
        return self._snapshots.reply(self._queues, self.backlogged, self.accepting)

    def snapshot(self) -> LMSnapshot:
        """The full partition state; cached until something changes, so idle is cheap."""
        return self._snapshots.full(self._queues, self.backlogged, self.accepting)

    def queued_on(self, node_id: str) -> int:
        """How many attempts wait in the node's local queue."""
        return 0 if self._queues is None else self._queues.counts[self.topology.index[node_id]]

    # -- invariants --------------------------------------------------------------------------

    def validate(self) -> None:
        """Each book in order (its own `validate`; queued attempts only with local queues),
        and no node over-committed, its free resources its capacity less what runs there."""
        self._attempts.validate()
        if self._queues is not None:
            self._queues.validate(self._attempts.running.values())
        elif any(attempt.queued for attempt in self._attempts.running.values()):
            raise InvariantViolated(f"{self.lm}: queued attempts but no local queues")
        if self._copies is not None:
            self._copies.validate(self._queues, self.accepting)
        _check_resources(self.topology, self.state, self._attempts.running.values())


# -- helpers -------------------------------------------------------------------------------------


def _check_resources(topology: ClusterTopology, state: JournaledState,
                     attempts: Iterable[RunningAttempt]) -> None:
    """No node over-committed, free = capacity - what its attempts hold (queued ones hold
    nothing), nothing held on a node that is down."""
    used_cpu = [0] * len(topology)
    used_mem = [0] * len(topology)
    for attempt in attempts:
        if not attempt.queued:
            used_cpu[attempt.node_index] += attempt.placement.task.demand.cpu_m
            used_mem[attempt.node_index] += attempt.placement.task.demand.mem_mib
    for i, node_id in enumerate(topology.node_ids):
        cap_cpu, cap_mem = topology.cap_cpu[i], topology.cap_mem[i]
        if used_cpu[i] > cap_cpu or used_mem[i] > cap_mem:
            raise InvariantViolated(f"{topology.lm}: node {node_id} over-committed")
        if state.free_cpu[i] != cap_cpu - used_cpu[i] or state.free_mem[i] != cap_mem - used_mem[i]:
            raise InvariantViolated(f"{topology.lm}: node {node_id} free resources drifted")
        if not state.up[i] and used_cpu[i]:
            raise InvariantViolated(f"{topology.lm}: node {node_id} is down but runs tasks")


def _task_event(lm: str, item: Placement, kind: Reason, runtime: float | None = None,
                detail: str = "", at: float | None = None) -> TaskEvent:
    task = item.task
    return TaskEvent(kind, item.attempt_id, task.task_id, task.job_id, item.gm, lm,
                     item.node_id, runtime, detail, at)


# Every attempt's first and last lines: `_fields`'s, written out (each extra only where it
# says something), without a keyword dict and its loop for each.

def _launched_line(lm: str, item: Placement, logical: bool, queued: bool) -> Log:
    demand = item.task.demand
    fields = _fields(lm, item)
    fields["logical"] = logical
    fields["cpu_m"] = demand.cpu_m
    fields["mem_mib"] = demand.mem_mib
    if queued:
        fields["queued"] = True
    return Log("task_launched", fields)


def _ended_line(lm: str, item: Placement, why: Reason, runtime: float | None,
                detail: str) -> Log:
    fields = _fields(lm, item)
    if runtime is not None:
        fields["runtime"] = runtime
    if detail:
        fields["detail"] = detail
    return Log(_END_LINES[why], fields)


def _fields(lm: str, item: Placement, **extra) -> dict:
    """An attempt's fields in a log line, with `extra` where it says something."""
    fields = {"attempt": item.attempt_id, "task": item.task.task_id, "job": item.task.job_id,
              "gm": item.gm, "user": item.user, "lm": lm, "node": item.node_id}
    if extra:
        for key, value in extra.items():  # a plain loop: a generator here cost a third of it
            if value not in (None, ""):
                fields[key] = value
    return fields
