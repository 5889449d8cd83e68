"""Synthesis: jobs a source does not fully describe, completed by seeded draws.

Where each number comes from:

- **Placement constraints** (`constraints=True`): the Megha authors' constraint-aware model,
  common/constraint_model.py: a task type
  uniformly from 4, a statistical cluster by the type's weights, then each of 21 constraints
  with the cluster's frequency. That gives about 1.86 constraints per task and 14% of tasks
  unconstrained; `unconstrained_share` sets that share instead (the Megha paper quotes Sharma
  et al. that about half of Google's tasks are constrained: 0.5). Machines get theirs from the
  federation file's profiles A, B, C (common/federation.py), not from here.
- **Resources** (`cpu_m`, `mem_mib`): distributions the user chooses; sources that carry
  requests (Alibaba) keep their own. Defaults (500 m, 512 MiB) are the testbed's, not data.
- **User queues** (`users`): each job's queue drawn with the given weights (default: equally).
- **Job weights** (`weight`): a distribution, default the constant 1 (unweighted JCT).
- **Arrivals and sizes** (`poisson_jobs`): Poisson arrivals at `rate` jobs/s (exponential
  gaps), widths and task durations from distributions; the defaults follow the SRPT+R
  experiment (one-task jobs, Pareto sizes with mean 40; its shape did not survive in our
  copy of the paper, so 2.5 here is ours). A job's estimate is the mean of its durations, as
  in the Sparrow/Eagle traces.

Determinism: every job draws each aspect (user, weight, resources, constraints) from its own
generator seeded by (seed, aspect, job key). The same seed gives the same workload, and a job
keeps its draws whatever else is sampled or changed: sampling 10% of a trace does not give its
jobs other users, and switching constraints on does not change their resources.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from common.constraint_model import task_constraints
from common.errors import InvalidInput
from common.federation import Federation
from loadgen.distributions import Distribution
from loadgen.progress import Progress, quiet
from loadgen.workload import JobShape, ReplayJob, ReplayTask

ONE = Distribution("const", (1.0,))
DEFAULT_CPU_M = Distribution("const", (500.0,))
DEFAULT_MEM_MIB = Distribution("const", (512.0,))
DEFAULT_WIDTH = ONE
DEFAULT_DURATION = Distribution("pareto", (2.5, 40.0))
PROGRESS_EVERY = 200  # jobs between progress calls


@dataclass(frozen=True, slots=True)
class Realization:
    users: tuple[tuple[str, float], ...]  # (queue, weight of the draw)
    seed: int = 0
    cpu_m: Distribution = DEFAULT_CPU_M
    mem_mib: Distribution = DEFAULT_MEM_MIB
    weight: Distribution = ONE
    constraints: bool = False
    unconstrained_share: float | None = None

    def __post_init__(self) -> None:
        if not self.users:
            raise InvalidInput("users", "at least one user queue is needed")
        if any(w < 0 for _, w in self.users) or sum(w for _, w in self.users) <= 0:
            raise InvalidInput("users", "draw weights must be >= 0 with a positive total")
        share = self.unconstrained_share
        if share is not None and not 0 <= share <= 1:
            raise InvalidInput("unconstrained_share", f"must be in [0, 1], got {share}")


def _rng(seed: int, aspect: str, key: str) -> random.Random:
    return random.Random(f"{seed}/{aspect}/{key}")  # str seeds hash with SHA-512: stable


def realize(shapes: Sequence[JobShape], plan: Realization, prefix: str,
            progress: Progress = quiet) -> list[ReplayJob]:
    """The shapes as complete jobs, ids `{prefix}-{key}` (the bare key without a prefix).
    `progress("realize", done, total)` is called every `PROGRESS_EVERY` jobs and at the end:
    the whole Alibaba hour is 4.3 million tasks, most of a minute."""
    names = [name for name, _ in plan.users]
    draw_weights = [weight for _, weight in plan.users]
    jobs = []
    for done, shape in enumerate(shapes):
        if done % PROGRESS_EVERY == 0:
            progress("realize", done, len(shapes))
        user = _rng(plan.seed, "user", shape.key).choices(names, draw_weights)[0]
        weight = plan.weight.sample(_rng(plan.seed, "weight", shape.key))
        if weight <= 0:
            raise InvalidInput("weight", f"drew a job weight of {weight:g}; weights must be > 0")
        resources = shape.resources
        if resources is None:
            rng = _rng(plan.seed, "resources", shape.key)
            resources = tuple((plan.cpu_m.sample_int(rng), plan.mem_mib.sample_int(rng))
                              for _ in shape.durations)
        constraints: list[tuple[int, ...]] = [()] * len(shape.durations)
        if plan.constraints:
            rng = _rng(plan.seed, "constraints", shape.key)
            constraints = [tuple(sorted(task_constraints(rng, plan.unconstrained_share)))
                           for _ in shape.durations]
        stages = shape.stages or ("",) * len(shape.durations)
        tasks = tuple(ReplayTask(cpu, mem, duration, cons, stage) for (cpu, mem), duration, cons,
                      stage in zip(resources, shape.durations, constraints, stages, strict=True))
        job_id = f"{prefix}-{shape.key}" if prefix else shape.key
        jobs.append(ReplayJob(job_id=job_id, user=user, arrival=shape.arrival, tasks=tasks,
                              weight=weight, estimate=shape.estimate, dag=shape.dag))
    progress("realize", len(shapes), len(shapes))
    return jobs


def poisson_jobs(count: int, rate: float, *, width: Distribution = DEFAULT_WIDTH,
                 duration: Distribution = DEFAULT_DURATION, seed: int = 0) -> list[JobShape]:
    """`count` jobs arriving as a Poisson process of `rate` jobs per second from time 0."""
    if count < 1:
        raise InvalidInput("--count", f"must be at least 1, got {count}")
    if not rate > 0:
        raise InvalidInput("--poisson", f"must be a positive number of jobs per second, got {rate}")
    arrivals = random.Random(f"{seed}/arrivals")
    sizes = random.Random(f"{seed}/sizes")
    shapes, clock = [], 0.0
    for index in range(1, count + 1):
        durations = tuple(duration.sample(sizes) for _ in range(width.sample_int(sizes)))
        shapes.append(JobShape(key=str(index), order=index, arrival=clock, durations=durations,
                               estimate=sum(durations) / len(durations)))
        clock += arrivals.expovariate(rate)
    return shapes


# -- what a workload holds, for the user and for the tests -----------------------------------


def describe(jobs: Sequence[ReplayJob]) -> dict:
    """Counts and means of a realized workload (printed by `megha synth` and `megha replay`)."""
    tasks = [task for job in jobs for task in job.tasks]
    n = max(1, len(tasks))
    return {
        "jobs": len(jobs),
        "tasks": len(tasks),
        "span_s": jobs[-1].arrival - jobs[0].arrival if jobs else 0.0,
        "mean_cpu_m": sum(t.cpu_m for t in tasks) / n,
        "mean_mem_mib": sum(t.mem_mib for t in tasks) / n,
        "mean_duration_s": sum(t.duration for t in tasks) / n,
        "constrained_share": sum(bool(t.constraints) for t in tasks) / n,
        "constraints_per_task": sum(len(t.constraints) for t in tasks) / n,
        "jobs_per_user": dict(sorted(Counter(job.user for job in jobs).items())),
        "mean_weight": sum(job.weight for job in jobs) / max(1, len(jobs)),
    }


def infeasible(jobs: Sequence[ReplayJob], federation: Federation) -> list[str]:
    """Ids of the jobs with a task no node of the federation could ever run (constraints or
    size): the GMs reject such a job at submission, with the reason."""
    topologies = federation.topologies()
    known: dict[tuple, bool] = {}

    def runs_somewhere(task: ReplayTask) -> bool:
        shape = (frozenset(task.constraints), task.cpu_m, task.mem_mib)
        if shape not in known:
            known[shape] = all(c < federation.num_constraints for c in task.constraints) and any(
                topology.can_ever_run(*shape) for topology in topologies)
        return known[shape]

    return [job.job_id for job in jobs if not all(runs_somewhere(t) for t in job.tasks)]
