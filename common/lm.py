"""The Local Master: the truth about one cluster, and the judge of every GM decision.

The LM owns its nodes' free resources, the partition map (static node ownership plus the
logical nodes that repartitions create) and the running attempts. GMs plan on stale views;
the LM applies each launch, repartition or preemption item against the truth and refuses
what no longer fits (after Nomad's plan applier). It never over-commits a node, never runs
an attempt id twice, and answers every request with a fresh snapshot so the asking GM's view
converges at once. What it knows of each attempt, and in what state, is its `LMAttemptBook`
(`common/lm_attempts.py`); the redundant copies it runs on its idle nodes, with a redundancy
policy, are its `CopyBook` (`common/lm_copies.py`, docs/redundancy.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from bitarray import bitarray, frozenbitarray

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
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.policies.redundancy.copies import COPY_POLICIES
from common.reasons import Reason
from common.step import Step
from common.story import TransitionLog

# ends the LM itself decides on: its worker must be told to stop the attempt
_STOPPED_BY_LM = frozenset({Reason.PREEMPTED, Reason.CANCELLED})

# the log line of each end (`task_finished`...), made once: formatting an enum member is
# slow, and every attempt ends
_END_LINES = {why: f"task_{why}" for why in Reason}


class LocalMaster:
    """One LM. Drive it with `handle(event, now)`; carry out the commands it returns.

    `worker_timeout` is how long a worker may stay silent before its nodes are marked down
    and their attempts reported lost (the testbed uses three heartbeat intervals). A
    restarted LM is built with `recovering=True`: it refuses launches until every worker has
    reported what it runs (or `worker_timeout` passes), so it cannot over-commit a node
    whose running tasks it has not yet learnt. Meanwhile its snapshots show the nodes of
    workers not yet heard from as down, so GMs do not keep asking.

    `queue_depth` ([policies.local_queues] depth) lets a GM's launch wait in a busy node's
    local queue at its worker, up to that many per node (docs/local-queues.md). A queued
    attempt holds no resources here until its worker reports the start: while a node has
    queued attempts, the LM starts nothing else there at once (what its running tasks free
    goes to its queue, in the order the worker keeps), and snapshots show it with no free
    resources and, while its queue has room, in `queue_room`.

    `redundancy` ([policies.redundancy] policy, with `redundancy_beta` and `max_copies`)
    gives running tasks redundant copies on idle nodes (docs/redundancy.md); "none" runs
    none and costs nothing.

    With either, a GM's `ReprioritizeRequested` re-keys its job's attempts here and at their
    workers (docs/local-queues.md, Estimates that change); without both, there is no order
    to correct and the request is ignored.
    """

    def __init__(
        self,
        topology: ClusterTopology,
        *,
        now: float = 0.0,
        epoch: int = 0,
        heartbeat_interval: float = 1.0,
        heartbeat_keepalive: float | None = None,
        worker_timeout: float = 3.0,
        dispatch_timeout: float | None = None,
        recovering: bool = False,
        queue_depth: int = 0,
        redundancy: str = "none",
        redundancy_beta: float = 0.5,
        max_copies: int = 4,
        story_len: int = 100_000,
        ended_memory: int = 200_000,
    ) -> None:
        self.lm = topology.lm
        self.topology = topology
        self.state = JournaledState(topology)
        self.epoch = epoch
        self.seq = 0
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_keepalive = heartbeat_keepalive
        self._last_heartbeat: tuple[LMSnapshot, float] | None = None  # published, and when
        self.worker_timeout = worker_timeout
        self.dispatch_timeout = 4 * worker_timeout if dispatch_timeout is None else dispatch_timeout
        self.next_heartbeat_at = now
        self.log = TransitionLog(story_len)
        if queue_depth < 0:
            raise InvalidInput("queue_depth", f"must be >= 0, got {queue_depth}")
        self.queue_depth = queue_depth
        size = len(topology)
        self._queued = [0] * size  # attempts waiting in each node's local queue
        self._queuing: set[int] = set()  # the nodes with any
        self._room = bitarray(size)  # the nodes whose queue has room (depth > 0)
        self._room.setall(queue_depth > 0)
        # queued attempts whose start was reported before the end that made room for them
        # (reports of one worker may reorder on the way): they take it when it comes
        self._awaiting_room: dict[int, list[RunningAttempt]] = {}
        self._attempts = LMAttemptBook(self.lm, self.log, ended_memory,
                                       by_job=queue_depth > 0 or redundancy != "none")
        COPY_POLICIES.get(redundancy)  # an unknown name is refused whether it copies or not
        self._copies = None if redundancy == "none" else CopyBook(
            topology, self.state, self._attempts.running, policy=redundancy,
            beta=redundancy_beta, max_copies=max_copies, epoch=epoch)
        self._worker_nodes: dict[str, list[int]] = {}
        for i, worker in enumerate(topology.workers):
            self._worker_nodes.setdefault(worker, []).append(i)
        self._worker_seen: dict[str, float] = dict.fromkeys(self._worker_nodes, now)
        self._unheard_workers: set[str] = set(self._worker_nodes) if recovering else set()
        self._recovery_deadline = now + worker_timeout if recovering else None
        if recovering:
            for i in range(len(topology)):
                self.state.set_up(i, False)
        self._snapshot_cache: LMSnapshot | None = None
        # task events cannot leave (the driver's outbox is full): refuse new work meanwhile
        self.backlogged = False
        self._none_up = frozenbitarray(len(topology))
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
            self._copies.rebalance(step, self._queued, self.accepting)
        return step.commands

    @property
    def running(self) -> dict[str, RunningAttempt]:
        """The live attempts (launched, running or adopted) by id; read, never write."""
        return self._attempts.running

    @property
    def recovering(self) -> bool:
        return self._recovery_deadline is not None

    @property
    def accepting(self) -> bool:
        """Whether it takes new work: neither recovering nor backlogged."""
        return self._recovery_deadline is None and not self.backlogged

    @property
    def copies(self) -> CopyBook | None:
        """Its redundant copies, if its policy makes any; read, never write."""
        return self._copies

    def story(self, *keys: str) -> list[dict]:
        return self.log.story(*keys)

    # -- requests from GMs ---------------------------------------------------------------------

    def _on_launch(self, event: LaunchRequested, step: Step) -> None:
        results = tuple(self._apply_item(step, event.gm, event.kind, item, event.lm_epoch)
                        for item in event.placements)
        step.emit(ReplyToGM(event.gm, event.request_id, results, self.reply_snapshot()))

    def _apply_item(self, step: Step, gm: str, kind: RequestKind, item: Placement,
                    lm_epoch: int | None) -> LaunchResult:
        i = self.topology.index.get(item.node_id, -1)
        reason = self._verdict(gm, kind, item, i, lm_epoch)
        if reason is Reason.LAUNCHED or reason is Reason.QUEUED:
            self._start(step, item, i, kind is RequestKind.REPARTITION, reason is Reason.QUEUED)
        elif reason is Reason.ALREADY_RUNNING:
            step.emit(Log("launch_repeated", self._fields(item)))
        else:
            step.emit(Log("launch_refused", self._fields(item, reason=str(reason))))
        return LaunchResult(item.attempt_id, item.task.task_id, item.node_id, reason)

    def _verdict(self, gm: str, kind: RequestKind, item: Placement, i: int,
                 lm_epoch: int | None = None) -> Reason:
        """Check one item against the truth; the first failed check is the reason."""
        known = self._attempts.running.get(item.attempt_id)
        if known is not None:
            same = known.placement.node_id == item.node_id and known.placement.gm == gm
            return Reason.ALREADY_RUNNING if same else Reason.DUPLICATE
        if item.attempt_id in self._attempts.ended:
            return Reason.DUPLICATE
        if lm_epoch is not None and lm_epoch < self.epoch:
            # planned on an earlier incarnation, which may have run it before it died: its
            # ids are not remembered here, so only a placement made on this one is taken
            return Reason.LM_RESTARTED
        if self.recovering:
            return Reason.LM_RECOVERING
        if self.backlogged:
            return Reason.LM_BACKLOGGED
        if i < 0:
            return Reason.UNKNOWN_NODE
        if not self.state.up[i]:
            return Reason.NODE_DOWN
        owner = self.topology.gms[self.topology.owner[i]]
        if kind is RequestKind.LAUNCH and owner != gm:
            return Reason.NOT_OWNER
        if kind is RequestKind.REPARTITION and owner == gm:
            return Reason.OWNED_BY_REQUESTER
        if not item.task.constraints <= self.topology.nodes[i].constraints:
            return Reason.CONSTRAINT_MISMATCH
        demand = item.task.demand
        if not self._queued[i] and self.state.fits(i, demand.cpu_m, demand.mem_mib):
            return Reason.LAUNCHED
        if not self.queue_depth or kind is not RequestKind.LAUNCH:
            # only a node's owner queues there: a repartition borrows room that is free now
            return Reason.STALE_VIEW
        if self._queued[i] >= self.queue_depth:
            return Reason.QUEUE_FULL
        if not (demand.cpu_m <= self.topology.cap_cpu[i]
                and demand.mem_mib <= self.topology.cap_mem[i]):
            return Reason.STALE_VIEW  # could never start there (a GM's view has capacities)
        return Reason.QUEUED

    def _start(self, step: Step, item: Placement, i: int, logical: bool,
               queued: bool = False) -> None:
        demand = item.task.demand
        if self._copies is not None:
            self._copies.node_taken(step, i)  # stopped before the new task reaches the worker
        if queued:
            self._enqueue(i)
        else:
            self.state.take(i, demand.cpu_m, demand.mem_mib)
        self._attempts.add(step, RunningAttempt(item, i, logical, step.now, queued=queued),
                           item.node_id)
        self._snapshot_cache = None
        if logical:
            owner = self.topology.gms[self.topology.owner[i]]
            step.emit(Log("repartition", self._fields(item, from_gm=owner, cpu_m=demand.cpu_m,
                                                      mem_mib=demand.mem_mib)))
        step.emit(Log("task_launched", self._fields(
            item, logical=logical, cpu_m=demand.cpu_m, mem_mib=demand.mem_mib,
            queued=queued or None)))
        step.emit(StartOnWorker(self.topology.workers[i], item))

    def _on_preempt(self, event: PreemptRequested, step: Step) -> None:
        item = event.placement
        i = self.topology.index.get(item.node_id, -1)
        owner = self.topology.gms[self.topology.owner[i]] if i >= 0 else ""
        kind = RequestKind.LAUNCH if owner == event.gm else RequestKind.REPARTITION
        reason = self._preempt_verdict(event, kind, i)
        if reason is Reason.LAUNCHED:
            for victim in event.victims:
                self._end(step, victim, Reason.PREEMPTED,
                          detail=f"for {item.attempt_id} of {event.gm}")
            self._start(step, item, i, kind is RequestKind.REPARTITION)
        elif reason is Reason.ALREADY_RUNNING:
            step.emit(Log("launch_repeated", self._fields(item)))
        else:
            step.emit(Log("preemption_refused", self._fields(item, reason=str(reason))))
        result = LaunchResult(item.attempt_id, item.task.task_id, item.node_id, reason)
        step.emit(ReplyToGM(event.gm, event.request_id, (result,), self.reply_snapshot()))

    def _preempt_verdict(self, event: PreemptRequested, kind: RequestKind, i: int) -> Reason:
        """Verify the victims against the truth, then the item as if they were gone."""
        item = event.placement
        if item.attempt_id in self._attempts.running or item.attempt_id in self._attempts.ended:
            return self._verdict(event.gm, kind, item, i)  # a retry: never applied twice
        if event.lm_epoch is not None and event.lm_epoch < self.epoch:
            return Reason.LM_RESTARTED  # its victims are of an earlier incarnation's
        if i >= 0 and self._queued[i]:
            return Reason.QUEUE_FULL  # what the victims free would go to the node's queue
        freed_cpu = freed_mem = 0
        for victim in event.victims:
            attempt = self._attempts.running.get(victim)
            if attempt is None or attempt.node_index != i or attempt.queued:
                return Reason.VICTIM_GONE
            freed_cpu += attempt.placement.task.demand.cpu_m
            freed_mem += attempt.placement.task.demand.mem_mib
        reason = self._verdict(event.gm, kind, item, i)
        if reason not in (Reason.STALE_VIEW, Reason.QUEUED, Reason.QUEUE_FULL):
            return reason
        demand = item.task.demand
        if (self.state.free_cpu[i] + freed_cpu >= demand.cpu_m
                and self.state.free_mem[i] + freed_mem >= demand.mem_mib):
            return Reason.LAUNCHED
        return Reason.VICTIMS_INSUFFICIENT

    def _on_cancel(self, event: CancelRequested, step: Step) -> None:
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is None or attempt.placement.gm != event.gm:
            step.emit(Log("cancel_ignored", {"attempt": event.attempt_id, "gm": event.gm}))
            return
        self._end(step, event.attempt_id, Reason.CANCELLED, publish=False)

    def _on_reprioritize(self, event: ReprioritizeRequested, step: Step) -> None:
        """The GM's job has a new priority: its attempts here take it (a copy candidate is
        re-keyed), and each worker holding one of them is told once. A worker keys its queue
        by finite priorities only: an infinite one stays in this LM's books."""
        by_job = self._attempts.by_job
        attempts = by_job.get(event.job_id) if by_job is not None else None
        if not attempts:
            return
        priority, running = event.priority, self._attempts.running
        workers: dict[str, None] = {}  # in the order of their attempts, each once
        for attempt_id in attempts:
            attempt = running[attempt_id]
            placement = attempt.placement
            if placement.gm != event.gm:
                continue
            workers[self.topology.workers[attempt.node_index]] = None
            if placement.priority != priority:
                # a new placement, not a mutated one: the simulator shares it among roles
                attempt.placement = replace(placement, priority=priority)
                if self._copies is not None:
                    self._copies.reprioritized(attempt_id, priority)
        if not workers:
            step.emit(Log("reprioritize_ignored", {"job": event.job_id, "gm": event.gm,
                                                   "lm": self.lm}))
        elif math.isfinite(priority):
            for worker in workers:
                step.emit(ReprioritizeOnWorker(worker, event.job_id, priority))

    # -- reports from worker agents --------------------------------------------------------------

    def _on_started(self, event: WorkerTaskStarted, step: Step) -> None:
        attempt = self._attempts.running.get(event.attempt_id)
        if attempt is None and self._copies is not None and self._copies.acknowledge(
                event.attempt_id):
            return  # a copy: the GMs never hear of it
        if attempt is None:
            step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                    "kind": "started"}))
            return
        if attempt.queued:
            if (attempt.suspended_at is not None and event.at is not None
                    and event.at <= attempt.suspended_at):
                # a start from before its suspension, delivered again
                step.emit(Log("worker_report_repeated", {"attempt": event.attempt_id}))
                return
            self._take_queued(attempt)
        if attempt.state is not AttemptState.LAUNCHED:  # a retried report, adopted, resumed
            step.emit(Log("worker_report_repeated", {"attempt": event.attempt_id}))
        else:
            self._attempts.start(step, attempt)
            if self._copies is not None:
                self._copies.original_started(attempt, step.now)
            worker = self.topology.workers[attempt.node_index]
            if event.worker == worker:
                self._worker_seen[worker] = step.now
            # no line of its own: the worker's `task_started` says it, with the start's own
            # time (one line less per task is a seventh of what the engine carries under load)
            step.emit(PublishTaskEvent(attempt.placement.gm,
                                       self._task_event(attempt, Reason.STARTED, at=event.at)))

    def _on_suspended(self, event: WorkerTaskSuspended, step: Step) -> None:
        """The worker paused a running attempt for a much shorter one: it is queued again."""
        attempt = self._attempts.running.get(event.attempt_id)
        waiting = self._awaiting_room.get(attempt.node_index) if attempt is not None else None
        if waiting and attempt in waiting:  # its start is still waiting for room: no longer
            waiting.remove(attempt)
            attempt.suspended_at = event.at
            return
        if attempt is None or attempt.queued:
            step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                    "kind": "suspended"}))
            return
        demand = attempt.placement.task.demand
        if self._copies is not None:
            self._copies.original_stopped(step, event.attempt_id, "suspended")
        self.state.give(attempt.node_index, demand.cpu_m, demand.mem_mib)
        self._enqueue(attempt.node_index)  # past the depth, maybe: it was accepted before
        self._attempts.set_queued(attempt, True)
        attempt.suspended_at = event.at
        self._snapshot_cache = None
        self._settle_starts(attempt.node_index)

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
        copies = self._copies
        if copies is None:
            return
        copy = copies.copies.get(event.attempt_id)
        original = copy.placement.copy_of if copy is not None else event.attempt_id
        copies.progress(step, original, event.attempt_id, event.work)

    def _on_failed(self, event: WorkerTaskFailed, step: Step) -> None:
        copies = self._copies
        if (copies is not None and event.attempt_id not in self._attempts.running
                and copies.knows(event.attempt_id)):
            copies.copy_ended(step, event.attempt_id, event.work, event.detail)
            return
        if event.attempt_id not in self._attempts.running:
            if event.attempt_id not in self._attempts.ended:  # the answer to its own stop
                step.emit(Log("worker_report_ignored", {"attempt": event.attempt_id,
                                                        "kind": "failed"}))
        else:
            self._end(step, event.attempt_id, Reason.FAILED, detail=event.detail)

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

    def _end(
        self, step: Step, attempt_id: str, why: Reason, *, runtime: float | None = None,
        detail: str = "", publish: bool = True, stop: bool = False,
    ) -> None:
        """Free an attempt's resources (a logical node goes back to its node's owner); its
        copies end with it. `stop`: its worker still runs it (a copy of it won)."""
        attempt = self._attempts.end(step, attempt_id, why, detail)
        if self._copies is not None:
            self._copies.original_stopped(step, attempt_id, why)
        demand = attempt.placement.task.demand
        if attempt.queued:  # it never held resources (or gave them back when suspended)
            self._dequeue(attempt.node_index)
            waiting = self._awaiting_room.get(attempt.node_index)
            if waiting and attempt in waiting:
                waiting.remove(attempt)
        else:
            self.state.give(attempt.node_index, demand.cpu_m, demand.mem_mib)
            self._settle_starts(attempt.node_index)
        self._snapshot_cache = None
        worker = self.topology.workers[attempt.node_index]
        if why in _STOPPED_BY_LM or stop:
            step.emit(StopOnWorker(worker, attempt_id, why if why in _STOPPED_BY_LM
                                   else Reason.CANCELLED))
        step.emit(Log(_END_LINES[why], self._fields(attempt.placement, runtime=runtime,
                                                  detail=detail)))
        if publish:
            event = self._task_event(attempt, why, runtime=runtime, detail=detail)
            step.emit(PublishTaskEvent(attempt.placement.gm, event))

    def _on_worker_heartbeat(self, event: WorkerHeartbeat, step: Step) -> None:
        worker = event.worker
        nodes = self._worker_nodes.get(worker)
        if nodes is None:
            step.emit(Log("unknown_worker", {"worker": worker}))
            return
        now = step.now
        self._worker_seen[worker] = now
        for i in nodes:
            if not self.state.up[i]:
                self.state.set_up(i, True)
                self._snapshot_cache = None
                step.emit(Log("node_up", {"node": self.topology.node_ids[i]}))
        running = self._attempts.running
        reported = set()
        for item in event.running:
            reported.add(item.attempt_id)
            if item.copy_of is not None:
                self._heard_copy(step, worker, item)
                continue
            known = running.get(item.attempt_id)
            if known is None:
                self._adopt_or_stop(step, worker, item, item.attempt_id in event.queued)
            else:
                known.acknowledged = True
        # A heartbeat may overtake the report of an attempt's end, or a launch on its way
        # to the worker: only an attempt missing for a whole `worker_timeout` since its
        # launch was really dropped (its worker restarted, say). One its worker never
        # acknowledged gets `dispatch_timeout`: a busy LM can take a while to hand it over,
        # and the driver reports a hand-over that failed for good (`DispatchFailed`).
        for attempt_id, attempt in list(running.items()):
            if attempt_id in reported or attempt.node_index not in nodes:
                continue
            age = now - attempt.launched_at
            if age > (self.worker_timeout if attempt.acknowledged else self.dispatch_timeout):
                self._end(step, attempt_id, Reason.LOST, detail=f"{worker} no longer runs it")
        if self._copies is not None:
            for copy_id in list(self._copies.missing(nodes, reported, now, self.worker_timeout,
                                                     self.dispatch_timeout)):
                self._copies.copy_lost(step, copy_id, f"{worker} no longer runs it")
        self._unheard_workers.discard(worker)
        self._maybe_end_recovery(step)

    def _heard_copy(self, step: Step, worker: str, item: Placement) -> None:
        """A worker lists a copy: known, or cancelled with the stop on its way, or unknown
        (of an earlier incarnation of this LM): then stopped."""
        copies = self._copies
        if copies is not None and copies.acknowledge(item.attempt_id):
            return
        cancelled = None if copies is None else copies.cancelled_since(item.attempt_id)
        if cancelled is not None and step.now - cancelled <= self.worker_timeout:
            return  # its stop is on the way; past that, it was lost: stopped again
        step.emit(StopOnWorker(worker, item.attempt_id, Reason.CANCELLED))
        step.emit(Log("attempt_stopped_on_worker", self._fields(item)))

    def _adopt_or_stop(self, step: Step, worker: str, item: Placement, queued: bool) -> None:
        """A restarted LM learns running (and queued) attempts from workers; a dead one is
        stopped."""
        i = self.topology.index.get(item.node_id, -1)
        demand = item.task.demand
        adoptable = (
            item.attempt_id not in self._attempts.ended
            and i >= 0
            and self.topology.workers[i] == worker
            and (queued or self.state.fits(i, demand.cpu_m, demand.mem_mib))
        )
        if not adoptable:
            step.emit(StopOnWorker(worker, item.attempt_id, Reason.CANCELLED))
            step.emit(Log("attempt_stopped_on_worker", self._fields(item)))
            return
        owner = self.topology.gms[self.topology.owner[i]]
        if queued:
            self._enqueue(i)
        else:
            self.state.take(i, demand.cpu_m, demand.mem_mib)
        attempt = RunningAttempt(item, i, owner != item.gm, step.now, AttemptState.ADOPTED,
                                 acknowledged=True, queued=queued)
        self._attempts.add(step, attempt, worker)
        self._snapshot_cache = None
        step.emit(Log("attempt_adopted", self._fields(item)))

    def _maybe_end_recovery(self, step: Step) -> None:
        if self._recovery_deadline is None:
            return
        if not self._unheard_workers or step.now >= self._recovery_deadline:
            self._recovery_deadline = None
            unheard = sorted(self._unheard_workers)
            step.emit(Log("recovery_done", {"adopted": len(self._attempts.running),
                                            "unheard_workers": unheard}))

    def _on_task_event_backlog(self, event: TaskEventBacklog, step: Step) -> None:
        """While its task events cannot leave, an LM takes no new work (each start and end
        would add to what cannot leave) and shows its nodes unavailable, so that GMs stop
        asking; when they drain, it shows them again."""
        if event.full == self.backlogged:
            return
        self.backlogged = event.full
        self.state.journal.extend(range(len(self.topology)))  # every node's `up` as shown
        self._snapshot_cache = None
        self.log.record(step.now, step.stimulus_id, self.lm, "accepting" if event.full else
                        "backlogged", "backlogged" if event.full else "accepting",
                        f"{event.size} task events waiting")
        name = "lm_backlogged" if event.full else "lm_accepting"
        step.emit(Log(name, {"lm": self.lm, "task_events_waiting": event.size}))

    def _shown_up(self) -> frozenbitarray:
        return self._none_up if self.backlogged else frozenbitarray(self.state.up)

    # -- time ----------------------------------------------------------------------------------

    def _on_tick(self, event: Tick, step: Step) -> None:
        now = step.now
        for worker, seen in self._worker_seen.items():
            if now - seen > self.worker_timeout:
                self._mark_worker_down(step, worker)
        self._maybe_end_recovery(step)
        if now >= self.next_heartbeat_at:
            # on the interval's own beat, not a tick late each time; after a stall, anew
            self.next_heartbeat_at += self.heartbeat_interval
            if self.next_heartbeat_at <= now:
                self.next_heartbeat_at = now + self.heartbeat_interval
            snapshot = self.snapshot()  # the same object while nothing changes
            last = self._last_heartbeat
            if (last is None or snapshot is not last[0] or self.heartbeat_keepalive is None
                    or now - last[1] >= self.heartbeat_keepalive):
                self._last_heartbeat = (snapshot, now)
                step.emit(PublishHeartbeat(snapshot))

    def _mark_worker_down(self, step: Step, worker: str) -> None:
        nodes = self._worker_nodes[worker]
        if not any(self.state.up[i] for i in nodes):
            return
        down = set(nodes)
        if self._copies is not None:
            self._copies.nodes_down(step, nodes)
        for attempt_id, attempt in list(self._attempts.running.items()):
            if attempt.node_index in down:
                self._end(step, attempt_id, Reason.LOST, detail=f"{worker} missed its heartbeats")
        for i in nodes:
            self.state.set_up(i, False)
            step.emit(Log("node_down", {"node": self.topology.node_ids[i], "worker": worker}))
        self._snapshot_cache = None

    # -- state out -------------------------------------------------------------------------------

    def reply_snapshot(self) -> LMSnapshot:
        """The state a reply carries: resources and liveness, not the running list."""
        self.seq += 1
        free_cpu, free_mem = self._shown_free()
        return LMSnapshot(self.lm, self.epoch, self.seq, self.topology, free_cpu, free_mem,
                          self._shown_up(), None, self.state.mark(),
                          queue_room=self._shown_room())

    def snapshot(self) -> LMSnapshot:
        """The full partition state; cached until something changes, so idle is cheap."""
        if self._snapshot_cache is None or self._snapshot_cache.seq != self.seq:
            self.seq += 1
            free_cpu, free_mem = self._shown_free()
            self._snapshot_cache = LMSnapshot(
                lm=self.lm,
                epoch=self.epoch,
                seq=self.seq,
                topology=self.topology,
                free_cpu=free_cpu,
                free_mem=free_mem,
                up=self._shown_up(),
                running=tuple(self._attempts.infos.values()),
                changes=self.state.mark(),
                attempts_by_gm=self._attempts.ids_of_gms(),
                queue_room=self._shown_room(),
            )
        return self._snapshot_cache

    # -- local queues --------------------------------------------------------------------------

    def _enqueue(self, i: int) -> None:
        count = self._queued[i] = self._queued[i] + 1
        if count == 1:
            self._queuing.add(i)
            self.state.journal.append(i)  # its shown free resources change
        if count >= self.queue_depth:
            self._room[i] = 0

    def _dequeue(self, i: int) -> None:
        count = self._queued[i] = self._queued[i] - 1
        if count == 0:
            self._queuing.discard(i)
            self.state.journal.append(i)
        if count < self.queue_depth:
            self._room[i] = 1

    def _take_queued(self, attempt: RunningAttempt) -> None:
        """A queued attempt started: it takes its resources now. Its worker started it in
        what its running tasks freed; if the LM has not yet heard those ends (reports
        reordered), it takes them when they come (`_settle_starts`)."""
        i = attempt.node_index
        waiting = self._awaiting_room.get(i)
        if waiting and attempt in waiting:
            return  # its start was reported before, and waits for room already
        demand = attempt.placement.task.demand
        if self.state.fits(i, demand.cpu_m, demand.mem_mib) and i not in self._awaiting_room:
            self._dequeue(i)
            self.state.take(i, demand.cpu_m, demand.mem_mib)
            self._attempts.set_queued(attempt, False)
            self._snapshot_cache = None
        else:
            self._awaiting_room.setdefault(i, []).append(attempt)

    def _settle_starts(self, i: int) -> None:
        """Resources came back on node i: started attempts waiting for them take them."""
        waiting = self._awaiting_room.pop(i, None)
        while waiting:
            attempt = waiting[0]
            demand = attempt.placement.task.demand
            if not self.state.fits(i, demand.cpu_m, demand.mem_mib):
                self._awaiting_room[i] = waiting
                return
            waiting.pop(0)
            self._dequeue(i)
            self.state.take(i, demand.cpu_m, demand.mem_mib)
            self._attempts.set_queued(attempt, False)
            self._snapshot_cache = None

    def _shown_free(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Free resources as GMs see them: none on a node with queued attempts."""
        if not self._queuing:
            return tuple(self.state.free_cpu), tuple(self.state.free_mem)
        free_cpu, free_mem = list(self.state.free_cpu), list(self.state.free_mem)
        for i in self._queuing:
            free_cpu[i] = free_mem[i] = 0
        return tuple(free_cpu), tuple(free_mem)

    def _shown_room(self) -> frozenbitarray | None:
        if not self.queue_depth:
            return None
        return self._none_up if self.backlogged or self.recovering else frozenbitarray(
            self._room & self.state.up)

    def queued_on(self, node_id: str) -> int:
        """How many attempts wait in the node's local queue."""
        return self._queued[self.topology.index[node_id]]

    def validate(self) -> None:
        """No node over-committed; free = capacity - what runs there; the attempt book in
        order (its listings match, every attempt held is in a live state); copies only on
        idle nodes, one a node."""
        self._attempts.validate()
        if self._copies is not None:
            self._copies.validate(self._queued, self.accepting)
        used_cpu = [0] * len(self.topology)
        used_mem = [0] * len(self.topology)
        queued = [0] * len(self.topology)
        for attempt in self._attempts.running.values():
            if attempt.queued:
                queued[attempt.node_index] += 1
                continue
            used_cpu[attempt.node_index] += attempt.placement.task.demand.cpu_m
            used_mem[attempt.node_index] += attempt.placement.task.demand.mem_mib
        if queued != self._queued or self._queuing != {i for i, n in enumerate(queued) if n}:
            raise InvariantViolated(f"{self.lm}: queued counts drifted")
        if self.queue_depth and any(
                self._room[i] != (n < self.queue_depth) for i, n in enumerate(queued)):
            raise InvariantViolated(f"{self.lm}: queue room drifted")
        for i, node_id in enumerate(self.topology.node_ids):
            cap_cpu, cap_mem = self.topology.cap_cpu[i], self.topology.cap_mem[i]
            if used_cpu[i] > cap_cpu or used_mem[i] > cap_mem:
                raise InvariantViolated(f"{self.lm}: node {node_id} over-committed")
            if (self.state.free_cpu[i] != cap_cpu - used_cpu[i]
                    or self.state.free_mem[i] != cap_mem - used_mem[i]):
                raise InvariantViolated(f"{self.lm}: node {node_id} free resources drifted")
            if not self.state.up[i] and used_cpu[i]:
                raise InvariantViolated(f"{self.lm}: node {node_id} is down but runs tasks")

    # -- helpers -----------------------------------------------------------------------------------

    def _task_event(
        self, attempt: RunningAttempt, kind: Reason, *, runtime: float | None = None,
        detail: str = "", at: float | None = None,
    ) -> TaskEvent:
        item = attempt.placement
        return TaskEvent(kind, item.attempt_id, item.task.task_id, item.task.job_id, item.gm,
                         self.lm, item.node_id, runtime, detail, at)

    def _fields(self, item: Placement, **extra) -> dict:
        fields = {"attempt": item.attempt_id, "task": item.task.task_id,
                  "job": item.task.job_id, "gm": item.gm, "user": item.user, "lm": self.lm,
                  "node": item.node_id}
        for key, value in extra.items():  # a plain loop: a generator here cost a third of it
            if value not in (None, ""):
                fields[key] = value
        return fields
