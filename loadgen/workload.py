"""A replayable workload: jobs with their submission time, user queue and per-task resources,
and the arithmetic that fits a trace to a small testbed.

Trace jobs carry only durations; `from_trace` gives every task the same resource request and
spreads jobs over the user queues with a seeded draw, so a workload is the same for the same
seed. Scaling, in the order applied:

1. `sample`: keep each job with this probability (seeded), or `max_jobs`: keep the first N;
2. `max_width`: cap a job's tasks at N (its first N durations are kept);
3. `duration_scale`: multiply every task duration (and the job's estimate);
4. `time_scale`: multiply inter-arrival times; or `target_load`: choose the time scale that
   makes the offered load that fraction of the cluster's cpu capacity.

Offered load = sum over tasks of cpu x duration / (arrival span x cluster cpu): 1.0 means the
jobs arriving during the replay ask for exactly what the cluster has.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from common.errors import InvalidInput
from loadgen.trace import TraceJob


@dataclass(frozen=True, slots=True)
class ReplayTask:
    cpu_m: int
    mem_mib: int
    duration: float
    constraints: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplayJob:
    job_id: str
    user: str
    arrival: float  # seconds after the replay starts
    tasks: tuple[ReplayTask, ...]
    weight: float = 1.0
    estimate: float | None = None  # the scheduler's estimate of a task's duration

    def submission(self) -> dict:
        """The body of `POST /v1/jobs` (common/wire.py JobSubmission)."""
        body: dict = {"job_id": self.job_id, "user": self.user, "weight": self.weight,
                      "tasks": [{"cpu_m": t.cpu_m, "mem_mib": t.mem_mib, "duration": t.duration,
                                 "constraints": list(t.constraints)} for t in self.tasks]}
        if self.estimate is not None:
            body["estimated_task_duration"] = self.estimate
        return body


@dataclass(frozen=True, slots=True)
class Scaling:
    max_jobs: int | None = None
    sample: float | None = None
    max_width: int | None = None
    duration_scale: float = 1.0
    time_scale: float | None = None
    target_load: float | None = None

    def __post_init__(self) -> None:
        if self.max_jobs is not None and self.max_jobs < 1:
            raise InvalidInput("max_jobs", f"must be at least 1, got {self.max_jobs}")
        if self.sample is not None and not 0 < self.sample <= 1:
            raise InvalidInput("sample", f"must be in (0, 1], got {self.sample}")
        if self.max_width is not None and self.max_width < 1:
            raise InvalidInput("max_width", f"must be at least 1, got {self.max_width}")
        for name in ("duration_scale", "time_scale", "target_load"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidInput(name, f"must be a positive number, got {value}")
        if self.time_scale is not None and self.target_load is not None:
            raise InvalidInput("target_load", "give either time_scale or target_load, not both")


def from_trace(jobs: Sequence[TraceJob], users: Sequence[str], *, cpu_m: int, mem_mib: int,
               seed: int, prefix: str) -> list[ReplayJob]:
    """Trace jobs as replayable jobs: one resource request for every task, users drawn
    uniformly with `seed`, ids `{prefix}-{line}` (stable: a retried replay is idempotent)."""
    if not users:
        raise InvalidInput("users", "at least one user queue is needed")
    rng = random.Random(seed)
    origin = jobs[0].arrival if jobs else 0.0
    return [
        ReplayJob(job_id=f"{prefix}-{job.line}", user=rng.choice(list(users)),
                  arrival=job.arrival - origin, estimate=job.estimate,
                  tasks=tuple(ReplayTask(cpu_m, mem_mib, d) for d in job.durations))
        for job in jobs
    ]


def offered_load(jobs: Sequence[ReplayJob], cluster_cpu_m: int) -> float | None:
    """Offered cpu load as a fraction of the cluster's; None when all jobs arrive at once."""
    if len(jobs) < 2 or cluster_cpu_m <= 0:
        return None
    span = jobs[-1].arrival - jobs[0].arrival
    if span <= 0:
        return None
    work = sum(t.cpu_m * t.duration for job in jobs for t in job.tasks)
    return work / (span * cluster_cpu_m)


def scale(jobs: Sequence[ReplayJob], plan: Scaling, *, seed: int,
          cluster_cpu_m: int) -> list[ReplayJob]:
    """The jobs fitted to a testbed by `plan` (see the module docstring for the order)."""
    kept = list(jobs)
    if plan.sample is not None:
        rng = random.Random(seed)
        kept = [job for job in kept if rng.random() < plan.sample]
    if plan.max_jobs is not None:
        kept = kept[: plan.max_jobs]
    if not kept:
        raise InvalidInput("sample", "no job is left after sampling")
    origin = kept[0].arrival
    fitted = []
    for job in kept:
        tasks = job.tasks[: plan.max_width] if plan.max_width is not None else job.tasks
        if plan.duration_scale != 1.0:
            tasks = tuple(replace(t, duration=t.duration * plan.duration_scale) for t in tasks)
        estimate = job.estimate * plan.duration_scale if job.estimate is not None else None
        fitted.append(replace(job, tasks=tuple(tasks), arrival=job.arrival - origin,
                              estimate=estimate))
    time_scale = plan.time_scale
    if plan.target_load is not None:
        load = offered_load(fitted, cluster_cpu_m)
        if load is None:
            raise InvalidInput("target_load", "needs jobs arriving over a span of time")
        time_scale = load / plan.target_load
    if time_scale is not None and time_scale != 1.0:
        fitted = [replace(job, arrival=job.arrival * time_scale) for job in fitted]
    return fitted
