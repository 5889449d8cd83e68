"""A workload on its way to a replay: job shapes from a source, realized as jobs, fitted.

    source -> JobShape -> select -> realize (loadgen/synthesis.py) -> ReplayJob -> fit -> replay

A `JobShape` is what a source knows about a job: when it arrives and how long its tasks run,
and for some sources (Alibaba) what each task requests and how its stages depend on each
other. `realize` adds what the source lacks: user queue, weight, resources, constraints. A
`ReplayJob` is complete; a job file holds ReplayJobs, so it skips the first steps.

A job's `name` is its template where the source has one: the runs of one recurring job share
it, and history-based runtime predictors (3Sigma, Point-Est) group jobs by it. Synthetic
families (`megha synth --families`) have one; Alibaba's job names are kept but unique per job;
the Sparrow/Eagle traces have none (None).

Scaling (`Scaling`), in the order applied:

1. `select`: `sample` keeps each job with this probability (seeded), `max_jobs` keeps the first
   N, `max_width` caps a job's tasks at N (its first N tasks are kept), `max_tasks` keeps jobs
   in order until their tasks add up to N, the job that crosses N cut to the tasks that make
   exactly N (so a workload can be sized in tasks, as papers state theirs). Selection comes
   before realization so that a 4-million-task source is never realized whole.
2. `fit`: `duration_scale` multiplies every task duration (and the job's estimate);
   `time_scale` multiplies inter-arrival times, or `target_load` chooses the time scale that
   makes the offered load that fraction of the cluster's cpu capacity.

Offered load = sum over tasks of cpu x duration / (arrival span x cluster cpu): 1.0 means the
jobs arriving during the replay ask for exactly what the cluster has.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from common.errors import InvalidInput
from loadgen.trace import TraceJob


@dataclass(frozen=True, slots=True)
class JobShape:
    key: str  # stable within its source (trace line, Alibaba job name): part of the job id
    order: int  # ties of arrival keep this order (the line it starts on)
    arrival: float  # seconds, on the source's clock
    durations: tuple[float, ...]  # one per task: the truth
    estimate: float | None = None  # the scheduler's estimate of a task's duration
    resources: tuple[tuple[int, int], ...] | None = None  # per task (cpu_m, mem_mib), if known
    stages: tuple[str, ...] = ()  # per task, the stage it belongs to (Alibaba task name)
    dag: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # stage -> parents
    name: str | None = None  # the job's template (recurring runs share it), if the source has one

    @property
    def width(self) -> int:
        return len(self.durations)

    def capped(self, width: int) -> JobShape:
        if len(self.durations) <= width:
            return self
        return replace(self, durations=self.durations[:width],
                       resources=self.resources[:width] if self.resources else None,
                       stages=self.stages[:width])


@dataclass(frozen=True, slots=True)
class ReplayTask:
    cpu_m: int
    mem_mib: int
    duration: float
    constraints: tuple[int, ...] = ()
    stage: str = ""  # the DAG stage the task belongs to, if its source has one
    nodes: tuple[str, ...] | None = None  # its placement set (sorted node ids); None: anywhere


@dataclass(frozen=True, slots=True)
class ReplayJob:
    job_id: str
    user: str
    arrival: float  # seconds after the replay starts
    tasks: tuple[ReplayTask, ...]
    weight: float = 1.0
    estimate: float | None = None  # the scheduler's estimate of a task's duration
    dag: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # kept, not yet submitted
    name: str | None = None  # the job's template: runs of one recurring job share it

    @property
    def width(self) -> int:
        return len(self.tasks)

    def capped(self, width: int) -> ReplayJob:
        return self if len(self.tasks) <= width else replace(self, tasks=self.tasks[:width])

    def submission(self) -> dict:
        """The body of `POST /v1/jobs` (common/wire.py JobSubmission)."""
        body: dict = {"job_id": self.job_id, "user": self.user, "weight": self.weight,
                      "tasks": [_task_body(t) for t in self.tasks]}
        if self.estimate is not None:
            body["estimated_task_duration"] = self.estimate
        if self.name is not None:
            body["name"] = self.name
        return body


def _task_body(task: ReplayTask) -> dict:
    body = {"cpu_m": task.cpu_m, "mem_mib": task.mem_mib, "duration": task.duration,
            "constraints": list(task.constraints)}
    if task.nodes is not None:
        body["nodes"] = list(task.nodes)
    return body


@dataclass(frozen=True, slots=True)
class Scaling:
    max_jobs: int | None = None
    sample: float | None = None
    max_width: int | None = None
    max_tasks: int | None = None
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
        if self.max_tasks is not None and self.max_tasks < 1:
            raise InvalidInput("--max-tasks", f"must be at least 1 task, got {self.max_tasks}")
        for name in ("duration_scale", "time_scale", "target_load"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidInput(name, f"must be a positive number, got {value}")
        if self.time_scale is not None and self.target_load is not None:
            raise InvalidInput("target_load", "give either time_scale or target_load, not both")


def from_trace(jobs: Sequence[TraceJob]) -> list[JobShape]:
    """Trace jobs as shapes, keyed by their line (stable: a retried replay is idempotent)."""
    return [JobShape(key=str(job.line), order=job.line, arrival=job.arrival,
                     durations=job.durations, estimate=job.estimate) for job in jobs]


def offered_load(jobs: Sequence[ReplayJob], cluster_cpu_m: int,
                 task_cpu_m: int | None = None) -> float | None:
    """Offered cpu load as a fraction of the cluster's; None when all jobs arrive at once.
    `task_cpu_m`: what every task takes whatever it asks (the simulator's slot mode gives
    each task a whole slot)."""
    if len(jobs) < 2 or cluster_cpu_m <= 0:
        return None
    span = jobs[-1].arrival - jobs[0].arrival
    if span <= 0:
        return None
    if task_cpu_m is None:
        work = sum(t.cpu_m * t.duration for job in jobs for t in job.tasks)
    else:
        work = task_cpu_m * sum(t.duration for job in jobs for t in job.tasks)
    return work / (span * cluster_cpu_m)


Job = TypeVar("Job", JobShape, ReplayJob)


def select(jobs: Sequence[Job], plan: Scaling, *, seed: int) -> list[Job]:
    """Step 1 of the module docstring; arrivals rebased to the first kept job."""
    kept = list(jobs)
    if plan.sample is not None:
        rng = random.Random(seed)
        kept = [job for job in kept if rng.random() < plan.sample]
    if plan.max_jobs is not None:
        kept = kept[: plan.max_jobs]
    if not kept:
        raise InvalidInput("sample", "no job is left after sampling")
    origin = kept[0].arrival
    if plan.max_width is not None:
        kept = [job.capped(plan.max_width) for job in kept]
    if plan.max_tasks is not None:
        kept = first_tasks(kept, plan.max_tasks)
    return [replace(job, arrival=job.arrival - origin) for job in kept]


def first_tasks(jobs: Sequence[Job], limit: int) -> list[Job]:
    """The jobs in order until their tasks add up to `limit`; the job that crosses it keeps
    only its first tasks, those that make exactly `limit` (a paper's "N tasks" is a total,
    not a number of whole jobs). Fewer tasks than `limit` in all: every job."""
    kept: list[Job] = []
    total = 0
    for job in jobs:
        if total >= limit:
            break
        cut = job.capped(limit - total)
        kept.append(cut)
        total += cut.width
    return kept


def fit(jobs: Sequence[ReplayJob], plan: Scaling, *, cluster_cpu_m: int,
        task_cpu_m: int | None = None) -> list[ReplayJob]:
    """Step 2 of the module docstring; `task_cpu_m` as in `offered_load`."""
    fitted = list(jobs)
    if plan.duration_scale != 1.0:
        factor = plan.duration_scale
        fitted = [replace(job, estimate=job.estimate * factor if job.estimate is not None
                          else None,
                          tasks=tuple(replace(t, duration=t.duration * factor)
                                      for t in job.tasks))
                  for job in fitted]
    time_scale = plan.time_scale
    if plan.target_load is not None:
        load = offered_load(fitted, cluster_cpu_m, task_cpu_m)
        if load is None:
            raise InvalidInput("target_load", "needs jobs arriving over a span of time")
        time_scale = load / plan.target_load
    if time_scale is not None and time_scale != 1.0:
        fitted = [replace(job, arrival=job.arrival * time_scale) for job in fitted]
    return fitted


def scale(jobs: Sequence[ReplayJob], plan: Scaling, *, seed: int,
          cluster_cpu_m: int) -> list[ReplayJob]:
    """Both steps on complete jobs (a job file)."""
    return fit(select(jobs, plan, seed=seed), plan, cluster_cpu_m=cluster_cpu_m)
