"""The Global Master: places its user queues' tasks on a possibly stale view of every LM.

Flow (DESIGN section 3): tasks leave the pending queue in policy order; each is tried in the
GM's internal partitions round-robin across LMs, then in external partitions (a repartition
request), then, if the fairness policy allows, by preempting tasks of a queue above its
share. A match is reserved in the view and batched per LM; the LM's answer commits or
refuses each item and carries a fresh snapshot that replaces the view (plan on the view,
apply on the truth). A refused task returns to the front of its job's queue.

Attempts: every launch of a task gets a new attempt id `task#epoch.n`. A task completes at
most once: the first attempt to finish wins and any other live attempt is cancelled, so a
request whose answer was lost (`LMRequestFailed`) can be retried under a new attempt id
without ever counting a task twice.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from common.blocked import BlockedDemands
from common.cluster import ClusterTopology, RunningInfo
from common.commands import (
    Command,
    JobEnded,
    Log,
    SendCancel,
    SendLaunch,
    SendPreempt,
)
from common.dispatch import LMRequest, RequestWindow
from common.errors import InvalidInput, InvariantViolated
from common.events import (
    HeartbeatReceived,
    JobSubmitted,
    LMReplied,
    LMRequestFailed,
    TaskEventReceived,
    TaskEventsReceived,
    Tick,
)
from common.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    check_transition,
)
from common.messages import Placement, RequestKind, TaskEvent
from common.models import DEFAULT_NUM_CONSTRAINTS, JobSpec, TaskSpec, validate_job
from common.policies.fairness import (
    Usage,
    UserQueue,
    choose_victims,
    make_fairness_policy,
)
from common.policies.job import JobProgress, make_job_policy
from common.reasons import Reason
from common.story import TransitionLog
from common.usage import PendingPreemption, estimate_usage
from common.view import FederationView, LMSlot


@dataclass(frozen=True, slots=True)
class GMConfig:
    gm_id: str
    queues: tuple[UserQueue, ...]  # every queue of the federation; this GM serves its own
    job_policy: str = "fifo"
    job_policy_options: dict = field(default_factory=dict)
    fairness: str = "fair_share"
    best_fit: bool = False
    work_conserving: bool = True  # slearn: idle capacity may run held tasks
    lm_timeout: float = 5.0  # an LM silent this long is left out of searches
    # A launched attempt that its LM's heartbeats stop listing for this long is taken as
    # lost (its end was never reported: the LM restarted, say) and its task is requeued.
    attempt_grace: float = 3.0
    max_failures: int = 3  # worker-reported failures of one task before its job fails
    max_losses: int = 20  # node losses and unanswered requests tolerated per task
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS
    epoch: int = 0  # incarnation: attempt ids of a restarted GM never collide
    seed: int = 0
    # requests in flight to one LM: placements made meanwhile join the next batch
    lm_window: int = 1


_PLACEMENT_COUNTER = {kind: f"placements_total.{kind}" for kind in RequestKind}
_KIND_NAME = {kind: str(kind) for kind in RequestKind}
_LAUNCHED_STATES = frozenset({TaskState.LAUNCHED, TaskState.RUNNING})
_WAITING_STATES = frozenset({TaskState.PENDING, TaskState.HELD})


# -- the GM's records --------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class TaskRecord:
    spec: TaskSpec
    job: JobRecord
    index: int
    shape: tuple  # TaskSpec.shape, computed once: placement caches and skips by it
    state: TaskState = TaskState.PENDING
    reason: Reason = Reason.NO_VIEW  # why it is where it is; for a pending task, why it waits
    attempts: int = 0
    live: str | None = None  # the attempt the GM is waiting for
    lm: str | None = None
    node: str | None = None
    failures: int = 0
    losses: int = 0
    runtime: float | None = None
    started_at: float | None = None  # first start: the worker's clock, else when the GM heard
    launched_at: tuple[int, int] | None = None  # the LM's version when it took the attempt
    missing_since: float | None = None  # first heartbeat that no longer listed it
    listed: tuple[str, str] | None = None  # (lm, attempt) under which `_live_on` holds it


@dataclass(slots=True, eq=False)
class JobRecord:
    spec: JobSpec
    progress: JobProgress
    tasks: list[TaskRecord] = field(default_factory=list)
    pending: deque[TaskRecord] = field(default_factory=deque)
    held: deque[TaskRecord] = field(default_factory=deque)
    state: JobState = JobState.PENDING
    key: tuple = ()
    reason: str = ""
    finished_at: float | None = None


# -- the state machine --------------------------------------------------------------------------


class GlobalMaster:
    """One GM. Drive it with `handle(event, now)`; carry out the commands it returns."""

    def __init__(
        self,
        config: GMConfig,
        *,
        topologies: Iterable[ClusterTopology] = (),
        story_len: int = 100_000,
        ended_jobs_kept: int = 100_000,
    ) -> None:
        self.config = config
        self.gm = config.gm_id
        self.rng = random.Random(config.seed)
        self.policy = make_job_policy(config.job_policy, **config.job_policy_options)
        self.fairness = make_fairness_policy(config.fairness, config.queues)
        self.own_queues = {q.name for q in config.queues if q.gm == config.gm_id}
        self.view = FederationView(self.gm)
        self._topologies = {topology.lm: topology for topology in topologies}
        self._federation: ClusterTopology | None = None
        self._federation_key = -1  # the view's `layouts` when `_federation` was merged
        self.jobs: dict[str, JobRecord] = {}
        # ended jobs in the order they ended; the first is number `_ended_base` (a feed for
        # clients: `ended_since`), the oldest forgotten past `ended_jobs_kept`
        self._ended_jobs: deque[str] = deque()
        self._ended_base = 1
        self._ended_jobs_kept = ended_jobs_kept
        self._tasks: dict[str, TaskRecord] = {}
        self._attempts: dict[str, TaskRecord] = {}  # every unfinished task's attempts
        self._requests = RequestWindow(self.gm, config.epoch, config.lm_window)
        self._order: SortedList = SortedList()  # (key, job id) of jobs with pending tasks
        self._held_jobs: dict[str, JobRecord] = {}  # jobs with held tasks, in arrival order
        self._orphans: dict[str, tuple[str, str, str]] = {}  # task id -> (attempt, lm, node)
        self._preemptions: dict[str, PendingPreemption] = {}  # by request id
        self._live_on: dict[str, dict[str, TaskRecord]] = {}  # lm -> launched attempts there
        self._oldest_launch: dict[str, int] = {}  # lm -> the oldest LM epoch launched under
        self._job_seq = 0
        self._rr_internal = 0
        self._rr_external = 0
        self._blocked = BlockedDemands()  # what fits nowhere now, until capacity matches
        self._pass_usage: Usage | None = None  # usage, computed once per pass if needed
        self.waiting = 0  # pending and held tasks: the backlog a GM bounds (see services)
        self.counters: Counter[str] = Counter()
        self.log = TransitionLog(story_len)
        self._handlers: dict[type, Callable[..., list[Command]]] = {
            JobSubmitted: self._on_job,
            LMReplied: self._on_reply,
            LMRequestFailed: self._on_request_failed,
            HeartbeatReceived: self._on_heartbeat,
            TaskEventReceived: self._on_task_event,
            TaskEventsReceived: self._on_task_events,
            Tick: self._on_tick,
        }

    # -- the entry point ---------------------------------------------------------------------

    def handle(self, event, now: float) -> list[Command]:
        commands = self._handlers[type(event)](event, now)
        self._schedule(event.stimulus_id, now, commands)
        self._dispatch(commands)
        return commands

    def story(self, *keys: str) -> list[dict]:
        return self.log.story(*keys)

    # -- submission --------------------------------------------------------------------------

    def _on_job(self, event: JobSubmitted, now: float) -> list[Command]:
        job = event.job
        if job.job_id in self.jobs:
            return [Log("job_duplicate", {"job": job.job_id, "user": job.user})]
        self.check_job(job)
        self._job_seq += 1
        progress = JobProgress(len(job.tasks), self._job_seq, job.arrival,
                               job.estimated_task_duration)
        record = JobRecord(job, progress)
        self.policy.admit(progress, self.rng)
        view = self.view
        for index, spec in enumerate(job.tasks):
            view.expect_demand(spec.demand.cpu_m, spec.demand.mem_mib)
            task = TaskRecord(spec, record, index, spec.shape)
            record.tasks.append(task)
            self._tasks[spec.task_id] = task
            if progress.pilots and index not in progress.pilots:
                task.state, task.reason = TaskState.HELD, Reason.HELD_FOR_PILOTS
                record.held.append(task)
            else:
                record.pending.append(task)
            self.waiting += 1
            self._blocked.arrived((job.user, task.shape), job.job_id)
            self.log.record(now, event.stimulus_id, spec.task_id, "new", task.state)
        self.jobs[job.job_id] = record
        self.log.record(now, event.stimulus_id, job.job_id, "new", "pending",
                        f"{len(job.tasks)} tasks, user {job.user}")
        commands: list[Command] = [
            Log("job_arrived", {"job": job.job_id, "user": job.user, "gm": self.gm,
                                "tasks": len(job.tasks), "arrival": job.arrival,
                                "pilots": len(progress.pilots)})
        ]
        if self._orphans:
            for task in list(record.pending) + list(record.held):
                self._adopt_orphan(task, event.stimulus_id, now, commands)
        for task_id, runtime in event.done_tasks:
            self._recover_done(record, task_id, runtime, event.stimulus_id, now)
        if record.held:
            self._held_jobs[job.job_id] = record
        if record.progress.done == record.progress.num_tasks:
            record.finished_at = now
            self._move_job(record, JobState.DONE, event.stimulus_id, now)
            self._end_job(record, commands)
            return commands
        self._requeue_job(record)
        return commands

    def _recover_done(self, job: JobRecord, task_id: str, runtime: float, stimulus_id: str,
                      now: float) -> None:
        task = self._tasks.get(task_id)
        if task is None or task.job is not job or task.state is TaskState.DONE:
            return
        self._remove_waiting(task)
        task.runtime = runtime
        self._move(task, TaskState.DONE, Reason.FINISHED, stimulus_id, now, "recovered")
        job.progress.done += 1
        if self.policy.task_finished(job.progress, task.index, runtime):
            self._release_held(job, stimulus_id, now)
        if job.state is JobState.PENDING:
            self._move_job(job, JobState.RUNNING, stimulus_id, now)

    def check_job(self, job: JobSpec) -> None:
        """Raise `InvalidInput` for a job this GM must refuse; changes nothing."""
        validate_job(job, self.config.num_constraints)
        if job.user not in self.own_queues:
            served = ", ".join(sorted(self.own_queues)) or "none"
            raise InvalidInput("user", f"queue {job.user!r} is not served by {self.gm} "
                                       f"(it serves: {served})")
        federation = self._federation_topology()
        checked: set[tuple] = set()
        for index, task in enumerate(job.tasks):
            other = self._tasks.get(task.task_id)
            if other is not None and other.job.spec.job_id != job.job_id:
                raise InvalidInput(f"tasks[{index}].task_id",
                                   f"{task.task_id!r} already belongs to job "
                                   f"{other.job.spec.job_id!r}")
            shape = task.shape
            if federation is None or shape in checked:
                continue
            if not federation.can_ever_run(*shape):
                raise InvalidInput(f"tasks[{index}]", self._infeasible_reason(task, federation))
            checked.add(shape)

    def _federation_topology(self) -> ClusterTopology | None:
        """Every LM this GM knows of (configured or heard from), merged: one feasibility check
        per task shape instead of one per LM. Rebuilt only when the view's layout moves (the
        configured topologies are fixed), so admitting a job costs no walk over the LMs."""
        if self._federation_key != self.view.layouts:
            self._federation_key = self.view.layouts
            known = dict(self._topologies)
            known.update((lm, slot.topology) for lm, slot in self.view.slots.items())
            self._federation = (ClusterTopology.merge([known[lm] for lm in sorted(known)])
                                if known else None)
        return self._federation

    @staticmethod
    def _infeasible_reason(task: TaskSpec, federation: ClusterTopology) -> str:
        matching = federation.mask_for(task.constraints).count()
        if matching == 0:
            rarest = min(task.constraints,
                         key=lambda c: federation.constraint_vectors[c].count())
            return (f"no node in the federation satisfies constraints "
                    f"{sorted(task.constraints)} (rarest: {rarest})")
        return (f"asks cpu_m={task.demand.cpu_m}, mem_mib={task.demand.mem_mib}, more than any "
                f"of the {matching} nodes satisfying its constraints has")

    # -- the scheduling pass --------------------------------------------------------------------

    def _schedule(self, stimulus_id: str, now: float, commands: list[Command]) -> None:
        if not (self._order or self._held_jobs):
            return
        view = self.view
        if not view.any_reachable:
            return
        blocked = self._blocked
        blocked.wake_by_capacity(view.take_gained(), view.topology, view.state,
                                 None if view.all_reachable else view.reachable)
        if not blocked.dirty:
            return  # nothing new waits, and nothing blocked could fit now
        blocked.dirty = False
        self._pass_usage = None
        parked = blocked.parked
        for _, job_id in list(self._order):
            if job_id in parked:
                continue  # all its waiting tasks are blocked, and none of them was woken
            job = self.jobs[job_id]
            still = deque()
            for task in job.pending:
                if not self._try_place(task, stimulus_id, now, commands):
                    still.append(task)  # its demand is blocked now (`_try_place`)
            self._set_pending(job, still)
            if still:
                user = job.spec.user
                blocked.park(job_id, {(user, task.shape) for task in still})
        if self.config.work_conserving:
            self._run_held(stimulus_id, now, commands)

    def _dispatch(self, commands: list[Command]) -> None:
        """Send what the request window lets out (placements already made joined their LM's
        open batch); the rest leaves when an answer frees a place."""
        if not self._requests.queued:
            return
        priorities: dict[str, float] = {}  # per job: the same for all its tasks at once
        for request in self._requests.ready():
            # while it waited its turn, a task may have ended (an older attempt finished,
            # its job failed): what is no longer placing stays home
            attempts = [a for a in request.attempts if self._is_placing(a)]
            if not attempts:
                self._requests.finished(request.request_id)
                self.view.release(request.request_id)
                self._preemptions.pop(request.request_id, None)
                continue
            placements = tuple(self._placement_of(self._attempts[a], a, priorities)
                               for a in attempts)
            if request.preempt:
                victims = self._preemptions[request.request_id].victim_ids
                commands.append(SendPreempt(request.lm, request.request_id, placements[0],
                                            victims))
            else:
                commands.append(SendLaunch(request.lm, request.request_id, request.kind,
                                           placements))

    def _is_placing(self, attempt_id: str) -> bool:
        task = self._attempts.get(attempt_id)
        return task is not None and task.live == attempt_id and task.state is TaskState.PLACING

    def _run_held(self, stimulus_id: str, now: float, commands: list[Command]) -> None:
        """Work conservation: held tasks may use what the eligible ones could not."""
        for job in list(self._held_jobs.values()):
            still = deque()
            for task in job.held:
                if task.state is not TaskState.HELD or not self._try_place(
                    task, stimulus_id, now, commands, allow_preempt=False
                ):
                    still.append(task)
            job.held = still
            if not still:
                del self._held_jobs[job.spec.job_id]

    def _try_place(
        self,
        task: TaskRecord,
        stimulus_id: str,
        now: float,
        commands: list[Command],
        allow_preempt: bool = True,
    ) -> bool:
        spec = task.spec
        demand = (task.job.spec.user, task.shape)
        blocked = self._blocked.reason(demand)
        if blocked is not None:
            task.reason = blocked
            return False
        self.counters["decisions_total"] += 1
        kind = RequestKind.LAUNCH
        slot, i = self._search(spec, internal=True)
        if slot is None:
            kind = RequestKind.REPARTITION
            slot, i = self._search(spec, internal=False)
        if slot is not None:
            request = self._requests.batch_for(slot.lm, kind)
            self._launch(task, slot, i, request, stimulus_id, now, commands)
            return True
        if allow_preempt and self._try_preempt(task, stimulus_id, now, commands):
            return True
        self._blocked.block(demand, Reason.NO_CAPACITY)
        task.reason = Reason.NO_CAPACITY
        return False

    def _search(self, spec: TaskSpec, internal: bool) -> tuple[LMSlot | None, int]:
        """Round-robin over LMs, starting after the LM that took the last such task."""
        view = self.view
        start = self._rr_internal if internal else self._rr_external
        k, i = view.find(spec.constraints, spec.demand.cpu_m, spec.demand.mem_mib, internal,
                         start, self.config.best_fit)
        if k < 0:
            return None, -1
        if internal:
            self._rr_internal = k + 1
        else:
            self._rr_external = k + 1
        return view.order[k], i

    def _launch(
        self, task: TaskRecord, slot: LMSlot, i: int, request: LMRequest,
        stimulus_id: str, now: float, commands: list[Command],
    ) -> None:
        demand = task.spec.demand
        kind, request_id = request.kind, request.request_id
        self.view.reserve(request_id, slot, i, demand.cpu_m, demand.mem_mib)
        attempt_id = self._new_attempt(task)
        request.attempts.append(attempt_id)
        task.lm, task.node = slot.lm, slot.topology.node_ids[i]
        self._move(task, TaskState.PLACING, Reason.WAITING_FOR_LM, stimulus_id, now, task.node)
        self.counters[_PLACEMENT_COUNTER[kind]] += 1
        commands.append(Log("task_placed", {
            "attempt": attempt_id, "task": task.spec.task_id, "job": task.job.spec.job_id,
            "user": task.job.spec.user, "gm": self.gm, "lm": task.lm, "node": task.node,
            "kind": _KIND_NAME[kind], "request": request_id}))

    def _new_attempt(self, task: TaskRecord) -> str:
        task.attempts += 1
        attempt_id = f"{task.spec.task_id}#{self.config.epoch}.{task.attempts}"
        task.live = attempt_id
        self._attempts[attempt_id] = task
        return attempt_id

    def _placement_of(self, task: TaskRecord, attempt_id: str,
                      priorities: dict[str, float] | None = None) -> Placement:
        job = task.job
        progress = job.progress
        priority = None if priorities is None else priorities.get(job.spec.job_id)
        if priority is None:
            priority = self.policy.worker_priority(progress)
            if priorities is not None:
                priorities[job.spec.job_id] = priority
        return Placement(attempt_id, task.spec, task.node or "", self.gm, job.spec.user,
                         priority, progress.sampling and task.index in progress.pilots)

    # -- fairness ------------------------------------------------------------------------------

    def _try_preempt(self, task: TaskRecord, stimulus_id: str, now: float,
                     commands: list[Command]) -> bool:
        if not self.fairness.preempts:
            return False
        total_cpu, total_mem = self.view.capacity
        usage = self._pass_usage
        if usage is None:
            usage = self._pass_usage = self.usage()
        spec = task.spec
        demand = (spec.demand.cpu_m / total_cpu, spec.demand.mem_mib / total_mem)
        victim_queues = self.fairness.victim_queues(task.job.spec.user, usage, demand)
        if not victim_queues:
            return False
        claimed = {v for p in self._preemptions.values() for v in p.victim_ids}
        for victim_queue in victim_queues:
            for slot in self.view.order:
                if not slot.reachable:
                    continue
                found = self._victims_in(slot, spec, victim_queue, claimed)
                if found is None:
                    continue
                i, victims = found
                if self.fairness.may_take(victim_queue, usage, self._fractions(victims)):
                    self._preempt(task, slot, i, victims, stimulus_id, now, commands)
                    self._pass_usage = None  # the next decision sees this one
                    return True
        return False

    def usage(self) -> Usage:
        """Each queue's (cpu, memory) fractions of the federation as this GM sees them: the
        LMs' last heartbeats, adjusted by the preemptions it asked for that they do not show
        yet (common/usage.py)."""
        preemptions = self._preemptions.values()
        return estimate_usage(
            ((slot.lm, slot.usage(), slot.running_ids() if preemptions else frozenset())
             for slot in self.view.order), preemptions, self.view.capacity)

    def _fractions(self, victims: tuple[RunningInfo, ...]) -> tuple[float, float]:
        total_cpu, total_mem = self.view.capacity
        return (sum(info.cpu_m for info in victims) / total_cpu,
                sum(info.mem_mib for info in victims) / total_mem)

    def _victims_in(self, slot: LMSlot, spec: TaskSpec, victim_queue: str, claimed: set[str]):
        free_cpu, free_mem, up = self.view.free_of(slot)
        mask = slot.topology.mask_for(spec.constraints) & up
        for i in mask.search(1):
            candidates = [info for info in slot.running_on(i)
                          if info.user == victim_queue and info.attempt_id not in claimed]
            if not candidates:
                continue
            chosen = choose_victims(candidates, free_cpu[i], free_mem[i],
                                    spec.demand.cpu_m, spec.demand.mem_mib)
            if chosen is not None:
                by_id = {info.attempt_id: info for info in candidates}
                return i, tuple(by_id[attempt_id] for attempt_id in chosen)
        return None

    def _preempt(self, task: TaskRecord, slot: LMSlot, i: int, victims: tuple[RunningInfo, ...],
                 stimulus_id: str, now: float, commands: list[Command]) -> None:
        request = self._requests.single(slot.lm, RequestKind.LAUNCH)
        request_id = request.request_id
        demand = task.spec.demand
        # Only the demand is reserved, not the victims' release: a reservation is re-applied
        # on every newer snapshot, and one taken after the LM stopped the victims would free
        # them twice (an optimistic view). Until the answer the node looks over-full instead.
        self.view.reserve(request_id, slot, i, demand.cpu_m, demand.mem_mib)
        attempt_id = self._new_attempt(task)
        self._preemptions[request_id] = PendingPreemption(
            slot.lm, victims, task.job.spec.user, attempt_id, demand.cpu_m, demand.mem_mib)
        request.attempts.append(attempt_id)
        task.lm, task.node = slot.lm, slot.topology.node_ids[i]
        self._move(task, TaskState.PLACING, Reason.WAITING_FOR_LM, stimulus_id, now,
                   f"preempting {len(victims)} on {task.lm}/{task.node}")
        self.counters["preemption_requests_total"] += 1
        commands.append(Log("preemption_requested", {
            "attempt": attempt_id, "task": task.spec.task_id, "job": task.job.spec.job_id,
            "user": task.job.spec.user, "gm": self.gm, "lm": task.lm, "node": task.node,
            "victims": [v.attempt_id for v in victims], "request": request_id}))

    # -- answers from LMs ------------------------------------------------------------------------

    def _on_reply(self, event: LMReplied, now: float) -> list[Command]:
        commands: list[Command] = []
        request = self._requests.finished(event.request_id)
        self.view.release(event.request_id)
        self.view.apply(event.snapshot, now)
        for result in event.results:
            self._preemption_answered(event.request_id, result.accepted)
            task = self._attempts.get(result.attempt_id)
            if task is None or task.live != result.attempt_id:
                continue
            if result.accepted:
                task.launched_at = event.snapshot.version
                self._note_launch(event.lm, task.launched_at)
                if task.state is TaskState.PLACING:
                    self._move(task, TaskState.LAUNCHED, Reason.LAUNCHED, event.stimulus_id,
                               now, f"{event.lm}/{result.node_id}")
            else:
                self.counters[f"launch_refused_total.{result.reason}"] += 1
                self._requeue(task, result.reason, event.stimulus_id, now, commands)
        if request is None:
            commands.append(Log("reply_unexpected", {"lm": event.lm, "request": event.request_id}))
        return commands

    def _on_request_failed(self, event: LMRequestFailed, now: float) -> list[Command]:
        request = self._requests.finished(event.request_id)
        commands: list[Command] = []
        if request is None:
            return commands
        self._preemption_answered(event.request_id, accepted=False)
        self.view.release(event.request_id)
        for attempt_id in request.attempts:
            task = self._attempts.get(attempt_id)
            # a start already reported means the LM did take it: nothing to retry
            if task is not None and task.live == attempt_id and task.state is TaskState.PLACING:
                task.losses += 1
                self._requeue(task, event.reason, event.stimulus_id, now, commands)
        return commands

    def _on_heartbeat(self, event: HeartbeatReceived, now: float) -> list[Command]:
        commands: list[Command] = []
        if self.view.apply(event.snapshot, now):
            self._settle_preemptions(event.snapshot.lm)
            self._adopt_running(self.view.slots[event.snapshot.lm], event.stimulus_id, now,
                                commands)
            if event.snapshot.running is not None:
                self._wake_preemptors()
        # an idle LM repeats the same snapshot: its running list still counts for leases
        self._check_leases(event.snapshot, event.stimulus_id, now, commands)
        return commands

    def _check_leases(self, snapshot, stimulus_id: str, now: float,
                      commands: list[Command]) -> None:
        """Requeue launched attempts a restarted LM has not listed for `attempt_grace` s.

        Normally an attempt's end arrives as a task event. Only an LM incarnation that
        launched an attempt knows to report its end; a restarted one (a newer epoch) that
        has not adopted it from its worker never will. Within one epoch the LM's task events
        may lag its heartbeats under load, so those attempts are left to their events. A
        finish that does arrive later still completes the task: the first one wins.
        """
        live = self._live_on.get(snapshot.lm)
        if not live or snapshot.running is None:
            return
        # Only attempts launched by an older incarnation are at stake; in the common case
        # (the LM never restarted since) there are none, which costs nothing to know.
        epoch = snapshot.epoch
        if epoch <= self._oldest_launch.get(snapshot.lm, epoch):
            return
        older = [(attempt_id, task) for attempt_id, task in live.items()
                 if task.launched_at is not None and task.launched_at[0] < epoch]
        if not older:
            return
        listed = {info.attempt_id for info in snapshot.running if info.gm == self.gm}
        for attempt_id, task in older:
            if attempt_id in listed:
                task.missing_since = None
                continue
            if task.missing_since is None:
                task.missing_since = now
            elif now - task.missing_since >= self.config.attempt_grace:
                task.losses += 1
                self._requeue(task, Reason.LOST, stimulus_id, now, commands)

    def _note_launch(self, lm: str, version: tuple[int, int]) -> None:
        oldest = self._oldest_launch.get(lm)
        if oldest is None or version[0] < oldest:
            self._oldest_launch[lm] = version[0]

    def _preemption_answered(self, request_id: str, accepted: bool) -> None:
        """The next heartbeat of its LM settles it. A refused (or unanswered) one changed
        nothing: it leaves the usage estimate at once, but its victims stay claimed until
        that heartbeat, or the GM would name the same ones again from the same stale list."""
        pending = self._preemptions.get(request_id)
        if pending is not None:
            pending.answered = True
            pending.refused = not accepted

    def _wake_preemptors(self) -> None:
        """New running lists or released claims: users whose queue may now take from
        another look again at what they could not place."""
        if not (self.fairness.preempts and len(self._blocked)):
            return
        usage = self.usage()
        self._blocked.wake_users(user for user in self.own_queues
                                 if self.fairness.victim_queues(user, usage))

    def _settle_preemptions(self, lm: str) -> None:
        """A heartbeat lists what really runs on `lm`: answered preemptions there are in it."""
        for request_id in [rid for rid, p in self._preemptions.items()
                           if p.lm == lm and p.answered]:
            del self._preemptions[request_id]

    def _on_tick(self, event: Tick, now: float) -> list[Command]:
        self.view.update_reachability(now, self.config.lm_timeout)
        return []

    # -- task events --------------------------------------------------------------------------

    def _on_task_event(self, event: TaskEventReceived, now: float) -> list[Command]:
        commands: list[Command] = []
        self._apply_task_event(event.event, event.stimulus_id, now, commands)
        return commands

    def _on_task_events(self, event: TaskEventsReceived, now: float) -> list[Command]:
        commands: list[Command] = []
        for report in event.events:
            self._apply_task_event(report, event.stimulus_id, now, commands)
        return commands

    def _apply_task_event(self, report: TaskEvent, stimulus_id: str, now: float,
                          commands: list[Command]) -> None:
        task = self._attempts.get(report.attempt_id)
        if task is None:
            commands.append(Log("task_event_ignored", {"attempt": report.attempt_id,
                                                       "kind": str(report.kind)}))
            return
        if report.kind is Reason.STARTED:
            if task.live == report.attempt_id and task.state in (TaskState.PLACING,
                                                                 TaskState.LAUNCHED):
                if task.launched_at is None:  # the start overtook the LM's answer
                    slot = self.view.slots.get(report.lm)
                    task.launched_at = slot.version if slot is not None else (-1, -1)
                    self._note_launch(report.lm, task.launched_at)
                self._move(task, TaskState.RUNNING, Reason.STARTED, stimulus_id, now)
                if task.started_at is None:  # allocation time counts the first start only
                    task.started_at = report.at if report.at is not None else now
                if task.job.state is JobState.PENDING:
                    self._move_job(task.job, JobState.RUNNING, stimulus_id, now)
        elif report.kind is Reason.FINISHED:
            self._finish(task, report, stimulus_id, now, commands)
        elif task.live == report.attempt_id:
            self._attempt_ended(task, report, stimulus_id, now, commands)

    def _attempt_ended(self, task: TaskRecord, report: TaskEvent, stimulus_id: str,
                       now: float, commands: list[Command]) -> None:
        """Preempted, lost, failed or cancelled: requeue, or fail the job past the limits."""
        self.counters[f"attempts_ended_total.{report.kind}"] += 1
        if report.kind is Reason.FAILED:
            task.failures += 1
        elif report.kind is Reason.LOST:
            task.losses += 1
        if task.failures >= self.config.max_failures or task.losses > self.config.max_losses:
            why = (f"task {task.spec.task_id} ended {task.failures} times with failures and "
                   f"{task.losses} times lost; last: {report.kind} {report.detail}".strip())
            self._fail_job(task.job, why, stimulus_id, now, commands)
            return
        self._requeue(task, report.kind, stimulus_id, now, commands)

    def _finish(self, task: TaskRecord, report: TaskEvent, stimulus_id: str, now: float,
                commands: list[Command]) -> None:
        job = task.job
        if task.state in (TaskState.DONE, TaskState.FAILED):
            return
        if task.live is not None and task.live != report.attempt_id:
            commands.append(SendCancel(task.lm or report.lm, task.live))
        if task.state in (TaskState.PENDING, TaskState.HELD):
            self._remove_waiting(task)
        task.runtime = report.runtime
        task.lm, task.node = report.lm, report.node_id
        self._move(task, TaskState.DONE, Reason.FINISHED, stimulus_id, now, report.attempt_id)
        self._forget_attempts(task)
        job.progress.done += 1
        commands.append(Log("task_done", {
            "attempt": report.attempt_id, "task": task.spec.task_id, "job": job.spec.job_id,
            "user": job.spec.user, "gm": self.gm, "lm": report.lm, "node": report.node_id,
            "runtime": report.runtime}))
        if job.state is JobState.PENDING:
            self._move_job(job, JobState.RUNNING, stimulus_id, now)
        released = self.policy.task_finished(job.progress, task.index, report.runtime or 0.0)
        if released:
            self._release_held(job, stimulus_id, now)
        if job.progress.done == job.progress.num_tasks:
            job.finished_at = now
            self._move_job(job, JobState.DONE, stimulus_id, now)
            self._end_job(job, commands)
        else:
            self._requeue_job(job)

    def _release_held(self, job: JobRecord, stimulus_id: str, now: float) -> None:
        for held in job.held:
            if held.state is TaskState.HELD:
                self._move(held, TaskState.PENDING, Reason.NO_CAPACITY, stimulus_id, now,
                           "pilots measured")
                self._blocked.arrived((job.spec.user, held.shape), job.spec.job_id)
                job.pending.append(held)
        job.held = deque()
        self._held_jobs.pop(job.spec.job_id, None)

    # -- moving tasks and jobs -------------------------------------------------------------------

    def _requeue(self, task: TaskRecord, why: Reason, stimulus_id: str, now: float,
                 commands: list[Command]) -> None:
        task.live = None
        self._move(task, TaskState.PENDING, why, stimulus_id, now)
        self._blocked.arrived((task.job.spec.user, task.shape), task.job.spec.job_id)
        task.job.pending.appendleft(task)
        self._requeue_job(task.job)
        self.counters[f"requeues_total.{why}"] += 1
        commands.append(Log("task_requeued", {"task": task.spec.task_id,
                                              "job": task.job.spec.job_id, "gm": self.gm,
                                              "reason": str(why)}))

    def _move(self, task: TaskRecord, new: TaskState, reason: Reason, stimulus_id: str,
              now: float, detail: str = "") -> None:
        old = task.state
        if new not in TASK_TRANSITIONS[old]:
            check_transition(TASK_TRANSITIONS, task.spec.task_id, old, new, self.log)
        self.log.record(now, stimulus_id, task.spec.task_id, old, new, detail or reason)
        task.state, task.reason = new, reason
        if (old in _WAITING_STATES) != (new in _WAITING_STATES):
            self.waiting += 1 if new in _WAITING_STATES else -1
        if new in _LAUNCHED_STATES:
            if old not in _LAUNCHED_STATES and task.lm is not None and task.live is not None:
                self._live_on.setdefault(task.lm, {})[task.live] = task
                task.listed = (task.lm, task.live)
        elif old in _LAUNCHED_STATES:
            # by where it was listed: a finish may come from an older attempt on another LM
            if task.listed is not None:
                lm, attempt_id = task.listed
                self._live_on[lm].pop(attempt_id, None)
                task.listed = None
            task.launched_at = task.missing_since = None

    def _move_job(self, job: JobRecord, new: JobState, stimulus_id: str, now: float) -> None:
        check_transition(JOB_TRANSITIONS, job.spec.job_id, job.state, new, self.log)
        self.log.record(now, stimulus_id, job.spec.job_id, job.state, new)
        job.state = new

    def _set_pending(self, job: JobRecord, pending: deque[TaskRecord]) -> None:
        job.pending = pending
        if not pending:
            self._order.discard((job.key, job.spec.job_id))

    def _requeue_job(self, job: JobRecord) -> None:
        """Keep the job in the ordered queue under its current key iff it has pending tasks."""
        self._order.discard((job.key, job.spec.job_id))
        job.key = self.policy.order_key(job.progress)
        if job.pending:
            self._order.add((job.key, job.spec.job_id))

    def _remove_waiting(self, task: TaskRecord) -> None:
        job = task.job
        if task in job.pending:
            job.pending.remove(task)
        if task in job.held:
            job.held.remove(task)

    def _forget_attempts(self, task: TaskRecord) -> None:
        for n in range(1, task.attempts + 1):
            self._attempts.pop(f"{task.spec.task_id}#{self.config.epoch}.{n}", None)
        task.live = None

    def _fail_job(self, job: JobRecord, why: str, stimulus_id: str, now: float,
                  commands: list[Command]) -> None:
        for task in job.tasks:
            if task.state in (TaskState.DONE, TaskState.FAILED):
                continue
            if task.live is not None and task.state is not TaskState.PENDING and task.lm:
                commands.append(SendCancel(task.lm, task.live))
            self._move(task, TaskState.FAILED, Reason.FAILED, stimulus_id, now, why)
            self._forget_attempts(task)
        job.pending.clear()
        job.held.clear()
        self._held_jobs.pop(job.spec.job_id, None)
        self._blocked.unpark(job.spec.job_id)
        job.reason = why
        job.finished_at = now
        self._move_job(job, JobState.FAILED, stimulus_id, now)
        self._end_job(job, commands)

    def _end_job(self, job: JobRecord, commands: list[Command]) -> None:
        spec = job.spec
        self._order.discard((job.key, spec.job_id))
        for task in job.tasks:
            self._tasks.pop(task.spec.task_id, None)
        event = "job_done" if job.state is JobState.DONE else "job_failed"
        commands.append(Log(event, {"job": spec.job_id, "user": spec.user, "gm": self.gm,
                                    "tasks": len(job.tasks), "arrival": spec.arrival,
                                    "reason": job.reason}))
        commands.append(JobEnded(spec.job_id, spec.user, str(job.state), job.reason))
        self._ended_jobs.append(spec.job_id)
        if len(self._ended_jobs) > self._ended_jobs_kept:
            old = self._ended_jobs.popleft()
            self._ended_base += 1
            self.jobs.pop(old, None)

    # -- recovery after a restart -----------------------------------------------------------------

    def _adopt_running(self, slot: LMSlot, stimulus_id: str, now: float,
                       commands: list[Command]) -> None:
        """Attempts this GM launched before a restart keep running: take them back."""
        # the common case, checked in C: every attempt of this GM listed is one it tracks
        listing = slot.snapshot
        if listing.running is slot.running and all(
                map(self._attempts.__contains__, listing.attempts_of(self.gm))):
            return
        for info in slot.running:
            if info.gm != self.gm or info.attempt_id in self._attempts:
                continue
            task_id = info.attempt_id.rpartition("#")[0]
            self._orphans[task_id] = (info.attempt_id, slot.lm,
                                      slot.topology.node_ids[info.node_index])
            task = self._tasks.get(task_id)
            if task is not None:
                self._adopt_orphan(task, stimulus_id, now, commands)

    def _adopt_orphan(self, task: TaskRecord, stimulus_id: str, now: float,
                      commands: list[Command]) -> None:
        orphan = self._orphans.pop(task.spec.task_id, None)
        if orphan is None or task.state not in (TaskState.PENDING, TaskState.HELD):
            return
        attempt_id, lm, node = orphan
        self._remove_waiting(task)
        if task.state is TaskState.HELD:
            self._move(task, TaskState.PENDING, Reason.NO_CAPACITY, stimulus_id, now)
        # known before the move to LAUNCHED, which lists it for lease checks under them
        task.live, task.lm, task.node = attempt_id, lm, node
        self._attempts[attempt_id] = task
        self._move(task, TaskState.PLACING, Reason.WAITING_FOR_LM, stimulus_id, now)
        self._move(task, TaskState.LAUNCHED, Reason.LAUNCHED, stimulus_id, now,
                   f"adopted {attempt_id} on {lm}/{node}")
        self._set_pending(task.job, task.job.pending)
        commands.append(Log("attempt_adopted", {"attempt": attempt_id, "task": task.spec.task_id,
                                                "job": task.job.spec.job_id, "gm": self.gm,
                                                "lm": lm, "node": node}))

    # -- questions users ask ----------------------------------------------------------------------

    def job_status(self, job_id: str) -> dict | None:
        job = self.jobs.get(job_id)
        if job is None:
            return None
        progress = job.progress
        return {
            "job": job_id, "user": job.spec.user, "state": str(job.state),
            "reason": job.reason, "arrival": job.spec.arrival, "finished_at": job.finished_at,
            "tasks_total": progress.num_tasks, "tasks_done": progress.done,
            "estimated_task_duration": progress.estimated_task_duration,
            "estimated_remaining_work": progress.estimated_remaining_work,
            "tasks": [
                {"task": t.spec.task_id, "state": str(t.state), "reason": str(t.reason),
                 "attempt": t.live, "lm": t.lm, "node": t.node, "runtime": t.runtime,
                 "started_at": t.started_at,
                 "pilot": t.index in progress.pilots}
                for t in job.tasks
            ],
        }

    def explain(self, task_id: str) -> dict:
        """Why a task waits: how many nodes each filter leaves, across this GM's views."""
        task = self._tasks.get(task_id)
        if task is None:
            raise KeyError(task_id)
        spec = task.spec
        nodes = up = constraint_ok = cpu_ok = fits = internal = 0
        lacking: Counter[int] = Counter()
        for slot in self.view.order:
            topology = slot.topology
            free_cpu, free_mem, node_up = self.view.free_of(slot)
            nodes += len(topology)
            up += node_up.count()
            for c in spec.constraints:
                lacking[c] += len(topology) - topology.constraint_vectors[c].count()
            mask = topology.mask_for(spec.constraints) & node_up
            constraint_ok += mask.count()
            g = topology.gm_index.get(self.gm)
            for i in mask.search(1):
                if free_cpu[i] >= spec.demand.cpu_m:
                    cpu_ok += 1
                    if free_mem[i] >= spec.demand.mem_mib:
                        fits += 1
                        internal += g is not None and topology.owner[i] == g
        return {
            "task": task_id, "state": str(task.state), "reason": str(task.reason),
            "nodes": nodes, "nodes_up": up,
            "nodes_lacking_constraint": {str(c): n for c, n in sorted(lacking.items())},
            "nodes_satisfying_constraints": constraint_ok,
            "with_enough_cpu": cpu_ok, "with_enough_cpu_and_memory": fits,
            "of_which_internal": internal,
        }

    def ended_since(self, after: int, limit: int) -> tuple[list[str], int]:
        """Up to `limit` jobs that ended after the `after`-th (1 is the first to end), and the
        number of the last one returned (`after` if none): a cursor for a client that follows
        completions without asking about each job. Jobs forgotten already are skipped."""
        start = max(after + 1, self._ended_base)
        first = start - self._ended_base
        ended = self._ended_jobs  # a deque indexes from its nearer end: clients read the tail
        ids = [ended[k] for k in range(first, min(len(ended), first + max(0, limit)))]
        return ids, (start + len(ids) - 1) if ids else after

    def would_complete(self, attempt_id: str) -> bool:
        """Whether a finish of this attempt would complete its task (it is the first)."""
        task = self._attempts.get(attempt_id)
        return task is not None and task.state not in (TaskState.DONE, TaskState.FAILED)

    def pending_count(self) -> int:
        """Tasks waiting here (pending or held), kept as a count: O(1)."""
        return self.waiting

    # -- invariants ----------------------------------------------------------------------------

    def validate(self) -> None:
        in_order = {job_id for _, job_id in self._order}
        for job_id, job in self.jobs.items():
            if job.state in (JobState.DONE, JobState.FAILED):
                continue
            done = sum(t.state is TaskState.DONE for t in job.tasks)
            if done != job.progress.done:
                raise InvariantViolated(f"{self.gm}: job {job_id} counts {job.progress.done} "
                                        f"done tasks, has {done}")
            for task in job.pending:
                if task.state is not TaskState.PENDING:
                    raise InvariantViolated(f"{self.gm}: {task.spec.task_id} queued as "
                                            f"pending in state {task.state}")
            if bool(job.pending) != (job_id in in_order):
                raise InvariantViolated(f"{self.gm}: job {job_id} queue membership is wrong")
            if job_id in self._blocked.parked:
                for task in job.pending:
                    if (job.spec.user, task.shape) not in self._blocked:
                        raise InvariantViolated(f"{self.gm}: job {job_id} is parked but "
                                                f"{task.spec.task_id}'s demand is not blocked")
            for task in job.tasks:
                placed = task.state in (TaskState.PLACING, TaskState.LAUNCHED, TaskState.RUNNING)
                if placed and (task.live is None or self._attempts.get(task.live) is not task):
                    raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is {task.state} "
                                            f"without a live attempt")
                if task.state in _LAUNCHED_STATES and task.listed is None:
                    raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is {task.state} "
                                            f"but not listed for lease checks")
        for lm, live in self._live_on.items():
            for attempt_id, task in live.items():
                if task.listed != (lm, attempt_id) or task.state not in _LAUNCHED_STATES:
                    raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is listed as "
                                            f"launched on {lm} as {attempt_id} while "
                                            f"{task.state}")
        waiting = sum(t.state in _WAITING_STATES for job in self.jobs.values()
                      if job.state not in (JobState.DONE, JobState.FAILED) for t in job.tasks)
        if waiting != self.waiting:
            raise InvariantViolated(f"{self.gm}: counts {self.waiting} waiting tasks, "
                                    f"has {waiting}")
        reserved = set(self.view.inflight)
        if not reserved <= set(self._requests.requests):
            raise InvariantViolated(f"{self.gm}: reservations outlive their requests: "
                                    f"{sorted(reserved - set(self._requests.requests))}")
        self._requests.validate()
