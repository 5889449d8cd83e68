"""Job-ordering policies for the GM's pending queue, registered by name.

A policy decides three things about a job: which of its tasks may run now (all, or only the
pilots while the rest are held), the key the GM orders jobs by (lower first), and the
priority a worker's SRPT queue orders its tasks by (the job's estimated remaining work).

- `fifo`: Megha's order, by arrival.
- `slearn`: learning job size by task sampling (SLearn). Thin jobs (fewer than
  `thin_threshold` tasks) go to the top, unsampled. A wider job first runs pilot tasks (a
  `sampling_ratio` of its tasks, at least one, chosen at random) while the rest are held;
  the mean measured pilot runtime times the task count is the job's estimated size, and the
  job is then ordered by its estimated remaining work. Order keys are `(rank, work, seq)`:
  rank 0 for thin jobs, 1 for jobs still sampling (the paper's sampling queue, second
  highest: pilots are few, so running them early costs little and gets estimates sooner),
  2 for estimated jobs, by remaining work.

`JOB_POLICIES.make(name, **options)` passes a policy its options: the keys of the file's table
named after it (`[policies.slearn]`); a policy without a table (fifo) takes none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from common.errors import InvalidInput
from common.policies.registry import Registry


@dataclass(slots=True)
class JobProgress:
    """What a job policy may read and write of a job. The GM owns the rest."""

    num_tasks: int
    seq: int  # arrival order at this GM
    arrival: float
    trace_estimate: float | None  # a trace's own per-task estimate, if it has one
    done: int = 0
    pilots: frozenset[int] = frozenset()  # task indices run first; the rest are held
    pilot_runtimes: list[float] = field(default_factory=list)
    estimated_task_duration: float | None = None

    @property
    def remaining(self) -> int:
        return self.num_tasks - self.done

    @property
    def sampling(self) -> bool:
        return bool(self.pilots) and self.estimated_task_duration is None

    @property
    def estimated_remaining_work(self) -> float | None:
        per_task = self.estimated_task_duration or self.trace_estimate
        return None if per_task is None else per_task * self.remaining


class JobPolicy(Protocol):
    """Decides which of a job's tasks may run now and in what order jobs are placed."""

    name: str

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        """Called once at arrival: choose pilots (tasks not in `pilots` are held if any)."""

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        """Record a finished task; True when the job's held tasks become eligible."""

    def order_key(self, job: JobProgress) -> tuple:
        """Lower keys are placed first."""

    def worker_priority(self, job: JobProgress) -> float:
        """The SRPT key a worker's local queue sees for this job's tasks."""


JOB_POLICIES: Registry[type[JobPolicy]] = Registry("policies.job", argument="job_policy")


@JOB_POLICIES.register("fifo")
class FifoPolicy:
    def admit(self, job: JobProgress, rng: random.Random) -> None:
        job.pilots = frozenset()

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        return False

    def order_key(self, job: JobProgress) -> tuple:
        return (0, 0.0, job.seq)

    def worker_priority(self, job: JobProgress) -> float:
        work = job.estimated_remaining_work
        return job.arrival if work is None else work


@JOB_POLICIES.register("slearn")
class SLearnPolicy:
    def __init__(self, sampling_ratio: float = 0.03, thin_threshold: int = 3) -> None:
        if not 0 < sampling_ratio <= 1:
            raise InvalidInput("sampling_ratio", f"must be in (0, 1], got {sampling_ratio}")
        if thin_threshold < 1:
            raise InvalidInput("thin_threshold", f"must be >= 1, got {thin_threshold}")
        self.sampling_ratio = sampling_ratio
        self.thin_threshold = thin_threshold

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        if job.num_tasks < self.thin_threshold:
            job.pilots = frozenset()
            return
        count = max(1, round(self.sampling_ratio * job.num_tasks))
        job.pilots = frozenset(rng.sample(range(job.num_tasks), count))

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        if index not in job.pilots or job.estimated_task_duration is not None:
            return False
        job.pilot_runtimes.append(runtime)
        if len(job.pilot_runtimes) < len(job.pilots):
            return False
        job.estimated_task_duration = sum(job.pilot_runtimes) / len(job.pilot_runtimes)
        return True

    def order_key(self, job: JobProgress) -> tuple:
        if not job.pilots:
            return (0, 0.0, job.seq)
        if job.estimated_task_duration is None:
            return (1, 0.0, job.seq)
        return (2, job.estimated_task_duration * job.remaining, job.seq)

    def worker_priority(self, job: JobProgress) -> float:
        if job.sampling:
            return 0.0  # pilots are also flagged; their jobs' size is unknown yet
        work = job.estimated_remaining_work
        return 0.0 if work is None else work

