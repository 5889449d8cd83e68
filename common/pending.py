"""A GM's backlog: the tasks waiting to be placed, kept so that a scheduling pass costs what it
places, not what waits.

Each job keeps its waiting tasks in two queues, `pending` (to place, in order) and `held`
(waiting for the job's pilots, `policies/job.py`); a queue groups its tasks by shape, so all
tasks of one *demand* (user queue and shape: they succeed or fail alike on one view,
`common/blocked.py`) sit together, each group in queue order.

An index per kind of queue (`WaitingIndex`) lists, per demand, the jobs with waiting tasks of
it, in the order a pass visits jobs (the job policy's key for pending tasks, arrival for held
ones), and keeps the demands that are *ready*: waiting, and not blocked. A pass merges the
ready demands' job lists in order and, in each job it visits, its ready groups in queue order:
exactly the order of walking every job's every task and skipping the blocked ones, without the
walk. A group whose next task finds no node stops (the GM blocks its demand, which leaves the
ready set), so after a pass nothing is ready, and the next pass looks only at what was woken
since (capacity that matches, a chance to preempt) or newly arrived.

With `queue_order = "round_robin"` (the paper's Algorithm 2, common/policies/fairness.py) a
pass serves the GM's user queues in turn, one placed task each, instead of every job in the
job policy's order: one stream per queue over the same index (its demands are its own, so the
streams never touch each other's lists), taken in turn from the queue after the one served
last, so no queue is always first. Within a queue the job policy's order holds.

Measured on a saturated run (10,000 nodes, YH1_sub, `--jobs 600 --target-load 1.2`): the
previous index walked every task of every job not parked, and parking was undone for all of
a user's jobs whenever one node freed up; the pass took more than half of the run
(benchmarks/bench_sim.py, py-spy).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from heapq import heapify, heappop, heapreplace
from operator import attrgetter
from typing import Protocol, runtime_checkable

from sortedcontainers import SortedList

from common.blocked import BlockedDemands, Demand
from common.errors import InvariantViolated
from common.gm_records import ENDED_JOB_STATES, JobRecord, TaskRecord
from common.job_queue import JobQueue
from common.lifecycle import TaskState
from common.policies.job import JobPolicy, JobProgress
from common.policies.jobs.ladder import LevelShares
from common.reasons import Reason
from common.view import FederationView


class WaitingIndex:
    """Jobs with waiting tasks of one kind (`field`: the JobRecord's `pending` or `held`), per
    demand, in visiting order (`key_of(job)`, unique per job)."""

    def __init__(self, field: str, blocked: BlockedDemands,
                 key_of: Callable[[JobRecord], tuple]) -> None:
        self.field = field
        self.blocked = blocked
        self.key_of = key_of
        # a SortedList, not a plain list kept with `insort`: a saturated simulation has no
        # backlog bound, and at 100,000 waiting jobs of one demand a plain list's add and
        # remove cost 32 us against 7 us (1.7 against 1.5 us at 5,000)
        self.jobs_by_demand: dict[Demand, SortedList] = {}
        self.ready: set[Demand] = set()  # demands with waiting tasks here, not blocked

    def queue_of(self, job: JobRecord) -> JobQueue:
        return getattr(job, self.field)

    def push(self, task: TaskRecord, front: bool = False) -> None:
        job = task.job
        if self.queue_of(job).push(task, front):
            self._file(job, (job.spec.user, task.shape), self.key_of(job))

    def push_new(self, job: JobRecord, tasks: list[TaskRecord]) -> None:
        """`push` each of `tasks`, new tasks of `job`, at the back in order (at once: a job
        brings its tasks together, mostly of one shape)."""
        opened = self.queue_of(job).extend(tasks)
        if opened:
            entry, user = self.key_of(job), job.spec.user
            for shape in opened:
                self._file(job, (user, shape), entry)

    def _file(self, job: JobRecord, demand: Demand, entry: tuple) -> None:
        jobs = self.jobs_by_demand.get(demand)
        if jobs is None:
            jobs = self.jobs_by_demand[demand] = SortedList()
        jobs.add(entry)
        if demand not in self.blocked:
            self.ready.add(demand)

    def _unfile(self, demand: Demand, entry: tuple) -> None:
        jobs = self.jobs_by_demand[demand]
        jobs.remove(entry)
        if not jobs:
            del self.jobs_by_demand[demand]
            self.ready.discard(demand)

    def remove(self, task: TaskRecord) -> None:
        job = task.job
        if self.queue_of(job).remove(task):
            self._unfile((job.spec.user, task.shape), self.key_of(job))

    def drop(self, job: JobRecord) -> list[TaskRecord]:
        """Nothing of `job` waits here any more; its tasks that did, in queue order."""
        queue, entry, user = self.queue_of(job), self.key_of(job), job.spec.user
        for shape in queue.groups:
            self._unfile((user, shape), entry)
        return queue.take_all()

    def rekey(self, job: JobRecord, update: Callable[[], None]) -> None:
        """Refile `job` under the key it has after `update()`."""
        old = self.key_of(job)
        update()
        new = self.key_of(job)
        if new == old:
            return
        user = job.spec.user
        for shape in self.queue_of(job).groups:
            jobs = self.jobs_by_demand[(user, shape)]
            jobs.remove(old)
            jobs.add(new)

    def move(self, job: JobRecord, other: WaitingIndex) -> None:
        """File `job` in `other` instead (it changed priority queue), under the same key."""
        entry, user = self.key_of(job), job.spec.user
        for shape in self.queue_of(job).groups:
            self._unfile((user, shape), entry)
            other._file(job, (user, shape), entry)

    def files(self, job: JobRecord) -> bool:
        """Whether `job` is filed here under some demand (for checks)."""
        entry, user = self.key_of(job), job.spec.user
        return any(entry in self.jobs_by_demand.get((user, shape), ())
                   for shape in self.queue_of(job).groups)

    def wake(self, demands: list[Demand]) -> None:
        for demand in demands:
            if demand in self.jobs_by_demand:
                self.ready.add(demand)

    # -- the pass ------------------------------------------------------------------------------

    def place(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool]) -> None:
        """Try the waiting tasks of ready demands, job by job in order and in queue order
        within a job. `try_place` returns False when the task found no node, and the GM has
        then blocked its demand (`Backlog.block`), which takes it out of `ready`."""
        for _ in self.placing(jobs, try_place):
            pass

    def placing(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool],
                user: str | None = None) -> Iterator[None]:
        """`place`, one placed task at a time (of `user`'s queue only, if given): the pass of
        a policy with priority queues interleaves the queues' indexes by weight
        (`Backlog._placing_levels`), a round-robin pass the user queues (`Backlog.place`)."""
        ready, by_demand = self.ready, self.jobs_by_demand
        if not ready:
            return
        # one cursor per ready demand over its jobs, merged in order: (entry, n, demand, i)
        cursors = [(by_demand[demand][0], n, demand, 0) for n, demand in enumerate(ready)
                   if user is None or demand[0] == user]
        heapify(cursors)
        visited: set[str] = set()
        closed: list[tuple[Demand, tuple]] = []  # groups emptied: unfiled after the merge
        try:
            while cursors:
                entry, n, demand, i = cursors[0]
                if demand not in ready:  # blocked by a task of an earlier job in this pass
                    heappop(cursors)
                    continue
                job_id = entry[1]
                if job_id not in visited:
                    visited.add(job_id)
                    yield from self._place_job(jobs[job_id], entry, try_place, closed)
                listed = by_demand[demand]
                if i + 1 < len(listed):
                    heapreplace(cursors, (listed[i + 1], n, demand, i + 1))
                else:
                    heappop(cursors)
        finally:
            for demand, entry in closed:
                self._unfile(demand, entry)

    def _place_job(self, job: JobRecord, entry: tuple, try_place: Callable[[TaskRecord], bool],
                   closed: list[tuple[Demand, tuple]]) -> Iterator[None]:
        queue, ready, user = self.queue_of(job), self.ready, job.spec.user
        heads = [(group[0].seq, shape) for shape, group in queue.groups.items()
                 if (user, shape) in ready]
        if len(heads) == 1:  # the common case: one shape ready in this job
            shape = heads[0][1]
            group = queue.groups[shape]
            while try_place(group[0]):
                if queue.pop_first(shape):
                    closed.append(((user, shape), entry))
                    yield
                    return
                yield
            return
        heapify(heads)
        while heads:
            shape = heads[0][1]
            group = queue.groups[shape]
            if not try_place(group[0]):
                heappop(heads)  # blocked now: the rest of this group stays
                continue
            if queue.pop_first(shape):
                closed.append(((user, shape), entry))
                heappop(heads)
            else:
                heapreplace(heads, (group[0].seq, shape))
            yield

    # -- checks -----------------------------------------------------------------------------------

    def validate(self, gm: str, job: JobRecord, state: TaskState) -> None:
        queue, entry, user = self.queue_of(job), self.key_of(job), job.spec.user
        size = 0
        for shape, group in queue.groups.items():
            if not group:
                raise InvariantViolated(f"{gm}: job {job.spec.job_id} keeps an empty group")
            size += len(group)
            seqs = [task.seq for task in group]
            if seqs != sorted(seqs):
                raise InvariantViolated(f"{gm}: job {job.spec.job_id}'s {self.field} tasks of "
                                        f"one shape are out of order")
            for task in group:
                if task.state is not state or task.shape != shape:
                    raise InvariantViolated(f"{gm}: {task.spec.task_id} queued as {self.field}"
                                            f" in state {task.state}")
            jobs = self.jobs_by_demand.get((user, shape))
            if jobs is None or entry not in jobs:
                raise InvariantViolated(f"{gm}: job {job.spec.job_id} is not filed under its "
                                        f"{self.field} demand {shape}")
        if size != len(queue):
            raise InvariantViolated(f"{gm}: job {job.spec.job_id} counts {len(queue)} "
                                    f"{self.field} tasks, has {size}")

    def validate_index(self, gm: str) -> None:
        expected = {demand for demand in self.jobs_by_demand if demand not in self.blocked}
        if self.ready != expected:
            raise InvariantViolated(f"{gm}: ready {self.field} demands are "
                                    f"{len(self.ready)}, expected {len(expected)}")


@runtime_checkable
class Reordering(Protocol):
    """A job policy whose keys may all change at once (`lp`, which solves an LP over the GM's
    jobs now and then; `psrs`, whose keys depend on the pool's capacity). The GM's backlog
    asks before every pass and re-keys every waiting job when told to."""

    last: dict | None  # what the last solve did, for the GM's log (None: nothing to say)

    def reorder(self, now: float, capacity: tuple[float, float]) -> bool:
        """Given the clock and the federation's (millicores, MiB): True when keys changed."""

    def job_ended(self, job: JobProgress) -> None:
        """The job is done or failed: it leaves the policy's view."""


class Backlog:
    """The GM's waiting tasks: pending (one index per priority queue of the job policy, one
    when it has none) and held, and the memo of demands that fit nowhere."""

    def __init__(self, policy: JobPolicy, round_robin: bool = False,
                 refused_to_tail: bool = False) -> None:
        self.policy = policy
        self.round_robin = round_robin  # serve the user queues in turn (`place`)
        self.refused_to_tail = refused_to_tail  # a task an LM refused goes to its job's tail
        self._last_served = ""  # round-robin: the queue the last placement went to
        self.blocked = BlockedDemands()
        ladder = policy.ladder
        if ladder is None:  # one queue, in the policy's order
            self.levels = [WaitingIndex("pending", self.blocked,
                                        lambda job: (job.key, job.spec.job_id))]
            self.shares = None
        else:  # a queue per level, each in arrival order, shared by weight
            self.levels = [WaitingIndex("pending", self.blocked,
                                        lambda job: (job.progress.seq, job.spec.job_id))
                           for _ in range(ladder.levels)]
            self.shares = LevelShares(ladder)
        self.held = WaitingIndex("held", self.blocked,
                                 lambda job: (job.progress.seq, job.spec.job_id))
        self.reordering = policy if isinstance(policy, Reordering) else None

    def __bool__(self) -> bool:
        # asked after every event a GM handles: `map` runs in C, a generator would not
        return bool(self.held.jobs_by_demand) or any(map(_jobs_by_demand, self.levels))

    def ready(self, work_conserving: bool) -> bool:
        """Whether a pass may place something."""
        return any(index.ready for index in self.levels) or bool(
            work_conserving and self.held.ready)

    def _pending(self, job: JobRecord) -> WaitingIndex:
        return self.levels[job.level]

    def _index_of(self, task: TaskRecord) -> WaitingIndex:
        """Where a waiting task is kept: held, or its job's level."""
        return self.held if task.state is TaskState.HELD else self.levels[task.job.level]

    # -- tasks in and out ---------------------------------------------------------------------

    def add(self, task: TaskRecord) -> None:
        """A new task of a job (held or pending, as the job policy chose)."""
        (self.held if task.state is TaskState.HELD else self.levels[task.job.level]).push(task)

    def add_job(self, job: JobRecord) -> None:
        """A new job's tasks: `add` each, in order."""
        tasks = job.tasks
        if job.progress.pilots:  # some may be held: each queue takes its own, in order
            self.held.push_new(job, [task for task in tasks if task.state is TaskState.HELD])
            tasks = [task for task in tasks if task.state is not TaskState.HELD]
        self.levels[job.level].push_new(job, tasks)

    def requeue(self, task: TaskRecord, refused: bool = False) -> None:
        """A task back from an attempt: first of its job's pending tasks; last of them if an LM
        refused it and the paper's option says so (its job keeps its place among the jobs:
        the backlog orders tasks within jobs, jobs by the job policy)."""
        self._pending(task.job).push(task, front=not (refused and self.refused_to_tail))

    def release_held(self, job: JobRecord) -> list[TaskRecord]:
        """The job's held tasks, now to be placed: they leave the held queue (the caller
        moves each to pending and `add`s it)."""
        return self.held.drop(job)

    def remove(self, task: TaskRecord) -> None:
        """A waiting task stops waiting without being placed (it finished, or was adopted)."""
        self._index_of(task).remove(task)

    def drop(self, job: JobRecord) -> None:
        """The job ended: nothing of it waits any more."""
        self._pending(job).drop(job)
        self.held.drop(job)
        if self.reordering is not None:
            self.reordering.job_ended(job.progress)

    def reorder(self, now: float, capacity: tuple[float, float],
                jobs: Iterable[JobRecord]) -> dict | None:
        """Before a pass: if the job policy re-keyed its jobs (an LP solve), refile every
        unfinished job under its new key; what the policy says of it, for the log."""
        if self.reordering is None or not self.reordering.reorder(now, capacity):
            return None
        for job in jobs:
            if job.state not in ENDED_JOB_STATES:
                self.refile(job)
        return self.reordering.last

    def refile(self, job: JobRecord) -> None:
        """A task of the job ended or its size became known: the job policy's key or level
        for it may have changed."""
        if self.shares is None:
            def update() -> None:
                job.key = self.policy.order_key(job.progress)
            self.levels[0].rekey(job, update)
            return
        old, new = job.level, job.progress.level
        if new == old:
            return
        self.levels[old].move(job, self.levels[new])
        self.shares.move(old, new, job.active)
        job.level = new

    def occupy(self, job: JobRecord, tasks: int) -> None:
        """`tasks` of the job started (or, negative, stopped) holding resources."""
        job.active += tasks
        if self.shares is not None:
            self.shares.occupy(job.level, tasks)

    # -- blocking and waking ------------------------------------------------------------------

    def block(self, demand: Demand, reason: Reason) -> None:
        if reason is Reason.NO_CAPACITY and demand[1][3] is not None:
            reason = Reason.PLACEMENT_SET_BUSY  # what "no room" means to a placement set
        self.blocked.block(demand, reason)
        for index in self.levels:
            index.ready.discard(demand)
        self.held.ready.discard(demand)

    def wake(self, demands: list[Demand]) -> None:
        if demands:
            for index in self.levels:
                index.wake(demands)
            self.held.wake(demands)

    def wake_users(self, users: Iterable[str]) -> None:
        """These users' queues may take from another now: look again at their demands."""
        self.wake(self.blocked.wake_users(users))

    def wake_by_capacity(self, view: FederationView) -> None:
        """Wake the demands the nodes that gained room since the last pass can take (and,
        when a local queue gained room, every demand: a queue takes any shape its node can
        ever run, and the next search says which)."""
        if view.room_gained:
            view.room_gained = False
            self.wake(self.blocked.wake_all())
        self.wake(self.blocked.wake_by_capacity(
            view.take_gained(), view.topology, view.state,
            None if view.all_reachable else view.reachable))

    def reason_of(self, task: TaskRecord) -> Reason:
        """Why a task is where it is; for a waiting one whose demand is blocked, that (for a
        task with a placement set, no room is `PLACEMENT_SET_BUSY`)."""
        if task.state is TaskState.PENDING:
            blocked = self.blocked.reason((task.job.spec.user, task.shape))
            if blocked is not None:
                return blocked
            if task.reason is Reason.NO_CAPACITY and task.spec.nodes is not None:
                return Reason.PLACEMENT_SET_BUSY
        return task.reason

    # -- the pass ------------------------------------------------------------------------------

    def place(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool],
              try_place_held: Callable[[TaskRecord], bool] | None,
              bound: int | None = None) -> bool:
        """Pending tasks in policy order (or the user queues in turn, round-robin); then, for
        work conservation, held tasks may use what the pending ones could not. At most
        `bound` placed tasks (None: no bound); True when the bound stopped the pass, which
        then goes on in a later one from where it stopped (the index keeps the order)."""
        if self.round_robin:
            placed = self._place_round_robin(jobs, try_place, bound)
        else:
            placed = _run(self._placing(jobs, try_place, None), bound)
        if bound is not None and placed >= bound:
            return True
        if try_place_held is not None:
            left = None if bound is None else bound - placed
            return _run(self.held.placing(jobs, try_place_held), left) == left
        return False

    def _placing(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool],
                 user: str | None) -> Iterator[None]:
        """The pending tasks (of `user`'s queue, if given), one placed task at a time."""
        if self.shares is None:
            return self.levels[0].placing(jobs, try_place, user)
        return self._placing_levels(jobs, try_place, user)

    def _place_round_robin(self, jobs: dict[str, JobRecord],
                           try_place: Callable[[TaskRecord], bool], bound: int | None) -> int:
        """One placed task of each user queue in turn, starting after the queue served last,
        until no queue can place more (or `bound` were placed); a queue leaves the pass when
        nothing more of it fits. Every stream is run to its end or closed: each unfiles its
        emptied groups when it ends. The number placed."""
        users = sorted({demand[0] for index in self.levels for demand in index.ready})
        start = bisect_right(users, self._last_served)
        streams = {user: self._placing(jobs, try_place, user)
                   for user in users[start:] + users[:start]}
        placed = 0
        try:
            while streams:
                for user in list(streams):
                    if bound is not None and placed >= bound:
                        return placed
                    if next(streams[user], True):  # exhausted: nothing more of it fits now
                        del streams[user]
                    else:
                        self._last_served = user
                        placed += 1
        finally:
            for stream in streams.values():
                stream.close()
        return placed

    def _placing_levels(self, jobs: dict[str, JobRecord],
                        try_place: Callable[[TaskRecord], bool],
                        user: str | None) -> Iterator[None]:
        """Each placement goes to the level furthest below its weighted share among those
        with tasks still to try (`LevelShares.pick`); a level leaves the pass when nothing
        more of it can be placed. The GM counts each placed task in its job's level
        (`occupy`), so the shares move as the pass goes."""
        streams = {level: index.placing(jobs, try_place, user)
                   for level, index in enumerate(self.levels) if index.ready}
        pick = self.shares.pick
        try:
            while streams:
                level = pick(streams) if len(streams) > 1 else next(iter(streams))
                if next(streams[level], True):  # exhausted: nothing more of it fits now
                    del streams[level]
                else:
                    yield
        finally:  # a bounded pass closes this one early: its streams unfile what they emptied
            for stream in streams.values():
                stream.close()

    def validate(self, gm: str, job: JobRecord) -> None:
        self._pending(job).validate(gm, job, TaskState.PENDING)
        self.held.validate(gm, job, TaskState.HELD)
        for level, index in enumerate(self.levels):
            if level != job.level and index.files(job):
                raise InvariantViolated(f"{gm}: job {job.spec.job_id} is filed in queue "
                                        f"{level}, it is in {job.level}")

    def validate_index(self, gm: str) -> None:
        for index in self.levels:
            index.validate_index(gm)
        self.held.validate_index(gm)

    def validate_shares(self, gm: str, jobs: Iterable[JobRecord]) -> None:
        """The running tasks counted per level are those of the jobs in each level."""
        if self.shares is None:
            return
        counted = [0] * len(self.levels)
        for job in jobs:
            counted[job.level] += job.active
        if counted != self.shares.running:
            raise InvariantViolated(f"{gm}: counts {self.shares.running} tasks running per "
                                    f"queue, has {counted}")


_jobs_by_demand = attrgetter("jobs_by_demand")


def _run(stream: Iterator[None], bound: int | None) -> int:
    """Take up to `bound` placements of a pass's stream (None: all of them), then close it
    (its `finally` unfiles the groups it emptied); the number taken."""
    placed = 0
    try:
        for _ in stream:
            placed += 1
            if bound is not None and placed >= bound:
                break
    finally:
        stream.close()
    return placed
