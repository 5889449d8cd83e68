"""A GM's index of what waits to be placed.

Jobs with pending tasks are kept sorted by their job policy's order key (the scheduling pass
walks them in that order); jobs with held tasks (waiting for their pilots, `policies/job.py`)
are kept in arrival order for work conservation. A job's key can change whenever one of its
tasks ends, so the job is refiled then (`refile`), never re-sorted as a whole.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from sortedcontainers import SortedList

from common.blocked import BlockedDemands
from common.errors import InvariantViolated
from common.gm_records import JobRecord, TaskRecord
from common.lifecycle import TaskState
from common.policies.job import JobPolicy


class PendingIndex:
    def __init__(self, policy: JobPolicy) -> None:
        self.policy = policy
        self.order: SortedList = SortedList()  # (key, job id) of jobs with pending tasks
        self.held_jobs: dict[str, JobRecord] = {}  # jobs with held tasks, in arrival order

    def __bool__(self) -> bool:
        return bool(self.order or self.held_jobs)

    def refile(self, job: JobRecord) -> None:
        """File the job under its current key iff it has pending tasks."""
        self.order.discard((job.key, job.spec.job_id))
        job.key = self.policy.order_key(job.progress)
        if job.pending:
            self.order.add((job.key, job.spec.job_id))

    def set_pending(self, job: JobRecord, pending: deque[TaskRecord]) -> None:
        job.pending = pending
        if not pending:
            self.order.discard((job.key, job.spec.job_id))

    def hold(self, job: JobRecord) -> None:
        if job.held:
            self.held_jobs[job.spec.job_id] = job

    def unhold(self, job: JobRecord) -> None:
        self.held_jobs.pop(job.spec.job_id, None)

    def drop(self, job: JobRecord) -> None:
        """The job ended: nothing of it waits any more."""
        self.order.discard((job.key, job.spec.job_id))
        self.held_jobs.pop(job.spec.job_id, None)

    def place_pending(self, jobs: dict[str, JobRecord], blocked: BlockedDemands,
                      try_place: Callable[[TaskRecord], bool]) -> None:
        """One pass over the jobs with pending tasks, in order: `try_place` each task; a job
        whose tasks all stay (their demands are blocked now) is parked until one is woken."""
        parked = blocked.parked
        for _, job_id in list(self.order):
            if job_id in parked:
                continue  # all its waiting tasks are blocked, and none of them was woken
            job = jobs[job_id]
            still = deque(task for task in job.pending if not try_place(task))
            self.set_pending(job, still)
            if still:
                user = job.spec.user
                blocked.park(job_id, {(user, task.shape) for task in still})

    def place_held(self, try_place: Callable[[TaskRecord], bool]) -> None:
        """Work conservation: held tasks may use what the eligible ones could not."""
        for job in list(self.held_jobs.values()):
            job.held = deque(task for task in job.held
                             if task.state is not TaskState.HELD or not try_place(task))
            if not job.held:
                del self.held_jobs[job.spec.job_id]

    @staticmethod
    def remove_waiting(task: TaskRecord) -> None:
        job = task.job
        if task in job.pending:
            job.pending.remove(task)
        if task in job.held:
            job.held.remove(task)

    def validate(self, gm: str, job: JobRecord) -> None:
        if bool(job.pending) != ((job.key, job.spec.job_id) in self.order):
            raise InvariantViolated(f"{gm}: job {job.spec.job_id} queue membership is wrong")
