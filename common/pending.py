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

Measured on a saturated run (10,000 nodes, YH1_sub, `--jobs 600 --target-load 1.2`): the
previous index walked every task of every job not parked, and parking was undone for all of
a user's jobs whenever one node freed up; the pass took more than half of the run
(benchmarks/bench_sim.py, py-spy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heapreplace

from sortedcontainers import SortedList

from common.blocked import BlockedDemands, Demand
from common.errors import InvariantViolated
from common.gm_records import JobRecord, TaskRecord
from common.job_queue import JobQueue
from common.lifecycle import TaskState
from common.policies.job import JobPolicy
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
        self.jobs_by_demand: dict[Demand, SortedList] = {}
        self.ready: set[Demand] = set()  # demands with waiting tasks here, not blocked

    def queue_of(self, job: JobRecord) -> JobQueue:
        return getattr(job, self.field)

    def push(self, task: TaskRecord, front: bool = False) -> None:
        job = task.job
        if self.queue_of(job).push(task, front):
            self._file(job, (job.spec.user, task.shape), self.key_of(job))

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

    def wake(self, demands: list[Demand]) -> None:
        for demand in demands:
            if demand in self.jobs_by_demand:
                self.ready.add(demand)

    # -- the pass ------------------------------------------------------------------------------

    def place(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool]) -> None:
        """Try the waiting tasks of ready demands, job by job in order and in queue order
        within a job. `try_place` returns False when the task found no node, and the GM has
        then blocked its demand (`Backlog.block`), which takes it out of `ready`."""
        ready, by_demand = self.ready, self.jobs_by_demand
        if not ready:
            return
        # one cursor per ready demand over its jobs, merged in order: (entry, n, demand, i)
        cursors = [(by_demand[demand][0], n, demand, 0) for n, demand in enumerate(ready)]
        heapify(cursors)
        visited: set[str] = set()
        closed: list[tuple[Demand, tuple]] = []  # groups emptied: unfiled after the merge
        while cursors:
            entry, n, demand, i = cursors[0]
            if demand not in ready:  # blocked by a task of an earlier job in this pass
                heappop(cursors)
                continue
            job_id = entry[1]
            if job_id not in visited:
                visited.add(job_id)
                self._place_job(jobs[job_id], entry, try_place, closed)
            listed = by_demand[demand]
            if i + 1 < len(listed):
                heapreplace(cursors, (listed[i + 1], n, demand, i + 1))
            else:
                heappop(cursors)
        for demand, entry in closed:
            self._unfile(demand, entry)

    def _place_job(self, job: JobRecord, entry: tuple, try_place: Callable[[TaskRecord], bool],
                   closed: list[tuple[Demand, tuple]]) -> None:
        queue, ready, user = self.queue_of(job), self.ready, job.spec.user
        heads = [(group[0].seq, shape) for shape, group in queue.groups.items()
                 if (user, shape) in ready]
        if len(heads) == 1:  # the common case: one shape ready in this job
            shape = heads[0][1]
            group = queue.groups[shape]
            while try_place(group[0]):
                if queue.pop_first(shape):
                    closed.append(((user, shape), entry))
                    return
            return
        heapify(heads)
        while heads:
            shape = heads[0][1]
            group = queue.groups[shape]
            if not try_place(group[0]):
                heappop(heads)  # blocked now: the rest of this group stays
            elif queue.pop_first(shape):
                closed.append(((user, shape), entry))
                heappop(heads)
            else:
                heapreplace(heads, (group[0].seq, shape))

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


class Backlog:
    """The GM's waiting tasks: pending and held, and the memo of demands that fit nowhere."""

    def __init__(self, policy: JobPolicy) -> None:
        self.policy = policy
        self.blocked = BlockedDemands()
        self.pending = WaitingIndex("pending", self.blocked,
                                    lambda job: (job.key, job.spec.job_id))
        self.held = WaitingIndex("held", self.blocked,
                                 lambda job: (job.progress.seq, job.spec.job_id))

    def __bool__(self) -> bool:
        return bool(self.pending.jobs_by_demand or self.held.jobs_by_demand)

    def ready(self, work_conserving: bool) -> bool:
        """Whether a pass may place something."""
        return bool(self.pending.ready or (work_conserving and self.held.ready))

    # -- tasks in and out ---------------------------------------------------------------------

    def add(self, task: TaskRecord) -> None:
        """A new task of a job (held or pending, as the job policy chose)."""
        (self.held if task.state is TaskState.HELD else self.pending).push(task)

    def requeue(self, task: TaskRecord) -> None:
        """A task back from an attempt: first of its job's pending tasks."""
        self.pending.push(task, front=True)

    def release_held(self, job: JobRecord) -> list[TaskRecord]:
        """The job's held tasks, now to be placed: they leave the held queue (the caller
        moves each to pending and `add`s it)."""
        return self.held.drop(job)

    def remove(self, task: TaskRecord) -> None:
        """A waiting task stops waiting without being placed (it finished, or was adopted)."""
        (self.held if task.state is TaskState.HELD else self.pending).remove(task)

    def drop(self, job: JobRecord) -> None:
        """The job ended: nothing of it waits any more."""
        self.pending.drop(job)
        self.held.drop(job)

    def refile(self, job: JobRecord) -> None:
        """A task of the job ended: the job policy's key for it may have changed."""
        def update() -> None:
            job.key = self.policy.order_key(job.progress)
        self.pending.rekey(job, update)

    # -- blocking and waking ------------------------------------------------------------------

    def block(self, demand: Demand, reason: Reason) -> None:
        self.blocked.block(demand, reason)
        self.pending.ready.discard(demand)
        self.held.ready.discard(demand)

    def wake(self, demands: list[Demand]) -> None:
        if demands:
            self.pending.wake(demands)
            self.held.wake(demands)

    def wake_users(self, users: Iterable[str]) -> None:
        """These users' queues may take from another now: look again at their demands."""
        self.wake(self.blocked.wake_users(users))

    def wake_by_capacity(self, view: FederationView) -> None:
        """Wake the demands the nodes that gained room since the last pass can take."""
        self.wake(self.blocked.wake_by_capacity(
            view.take_gained(), view.topology, view.state,
            None if view.all_reachable else view.reachable))

    def reason_of(self, task: TaskRecord) -> Reason:
        """Why a task is where it is; for a waiting one whose demand is blocked, that."""
        if task.state is TaskState.PENDING:
            blocked = self.blocked.reason((task.job.spec.user, task.shape))
            if blocked is not None:
                return blocked
        return task.reason

    # -- the pass ------------------------------------------------------------------------------

    def place(self, jobs: dict[str, JobRecord], try_place: Callable[[TaskRecord], bool],
              try_place_held: Callable[[TaskRecord], bool] | None) -> None:
        """Pending tasks in policy order; then, for work conservation, held tasks may use
        what the pending ones could not."""
        self.pending.place(jobs, try_place)
        if try_place_held is not None:
            self.held.place(jobs, try_place_held)

    def validate(self, gm: str, job: JobRecord) -> None:
        self.pending.validate(gm, job, TaskState.PENDING)
        self.held.validate(gm, job, TaskState.HELD)

    def validate_index(self, gm: str) -> None:
        self.pending.validate_index(gm)
        self.held.validate_index(gm)
