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
- **Recurring job families** (`Families`, `poisson_jobs(families=...)`), for history-based
  runtime predictors (3Sigma, Point-Est; the SLearn study): `count` job templates, named
  `fam-0000`, `fam-0001`, ..., each with a width drawn once from the width distribution and a
  mean task duration drawn once from the duration distribution. Each job is, with
  probability `recurring_share`, a run of a family chosen uniformly (not Zipf: every family
  recurs about equally often), else a first-time job named `once-<key>` with its own width
  and mean. A run's mean is the family's current mean times log-normal noise of mean 1 and
  CoV `job_cov`, drawn afresh for each run (not a random walk); each task's duration is the
  job's mean times noise of CoV `task_cov`. Drift: round(`drift_share` x `count`) families,
  chosen at random, change their mean once, by a factor log-uniform in [1/`drift_factor`,
  `drift_factor`], at a moment uniform over the arrival span (first to last arrival); runs
  arriving at or after it use the new mean. It models that over half of recurring jobs are
  updated within a month (SLearn cites this). The runs of a family share their user queue
  (`realize` draws a named job's user by its name). Arrivals are the same as without
  families. With `count` 0 (the default) nothing changes: the same draws as before.

Determinism: every job draws each aspect (user, weight, resources, constraints; with
families: which family, runtime noise, a first-time job's size) from its own generator seeded
by (seed, aspect, job key), and a family draws its template from one seeded by its name. The
same seed gives the same workload, and a job keeps its draws whatever else is sampled or
changed: sampling 10% of a trace does not give its jobs other users, and switching
constraints on does not change their resources.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from common.constraint_model import task_constraints
from common.errors import InvalidInput
from common.federation import Federation
from loadgen.distributions import Distribution, log_uniform, noise
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
        # a named job's user is drawn by its name: the runs of a recurring job share a queue
        # (Alibaba's names are the job's key, so its draws are as they were without names)
        user = _rng(plan.seed, "user", shape.name or shape.key).choices(names, draw_weights)[0]
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
                              weight=weight, estimate=shape.estimate, dag=shape.dag,
                              name=shape.name))
    progress("realize", len(shapes), len(shapes))
    return jobs


@dataclass(frozen=True, slots=True)
class Families:
    """Recurring job families (the module docstring); `count` 0 is none."""
    count: int = 0
    recurring_share: float = 0.8  # share of jobs that are runs of a family
    task_cov: float = 0.3  # CoV of a task's duration around its job's mean
    job_cov: float = 0.2  # CoV of a run's mean around its family's current mean
    drift_share: float = 0.5  # share of families whose mean changes once
    drift_factor: float = 4.0  # a change multiplies the mean by [1/this, this], log-uniform

    def __post_init__(self) -> None:
        if self.count < 0:
            raise InvalidInput("--families", f"must be >= 0, got {self.count}")
        for name in ("recurring_share", "drift_share"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise InvalidInput(_option(name), f"must be in [0, 1], got {value:g}")
        for name in ("task_cov", "job_cov"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidInput(_option(name), f"must be a finite number >= 0, got {value:g}")
        if not (math.isfinite(self.drift_factor) and self.drift_factor >= 1):
            raise InvalidInput("--drift-factor", f"must be a finite number >= 1 (1: no change), "
                                                 f"got {self.drift_factor:g}")


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True, slots=True)
class Family:
    """A job template: what its runs share, and when (if ever) its mean changes."""
    name: str
    width: int
    mean: float  # mean task duration, s, before its change
    changes_at: float | None = None  # seconds from the first arrival; None: it never changes
    factor: float = 1.0  # its mean from `changes_at` on is `mean` x this

    def mean_at(self, arrival: float) -> float:
        if self.changes_at is not None and arrival >= self.changes_at:
            return self.mean * self.factor
        return self.mean


def job_families(families: Families, span: float, *, width: Distribution = DEFAULT_WIDTH,
                 duration: Distribution = DEFAULT_DURATION, seed: int = 0) -> list[Family]:
    """The templates of `families` for a workload whose arrivals span `span` seconds. Each
    family draws its width, mean, factor and moment from its own generator (whether it drifts
    or not), so changing the drift share changes which families drift, nothing else."""
    digits = max(4, len(str(families.count - 1)))
    drifting = set(random.Random(f"{seed}/drifting").sample(
        range(families.count), round(families.drift_share * families.count)))
    made = []
    for index in range(families.count):
        name = f"fam-{index:0{digits}d}"
        rng = _rng(seed, "family", name)
        family_width, mean = width.sample_int(rng), duration.sample(rng)
        factor, moment = log_uniform(rng, families.drift_factor), rng.random() * span
        made.append(Family(name, family_width, mean, moment if index in drifting else None,
                           factor if index in drifting else 1.0))
    return made


def poisson_jobs(count: int, rate: float, *, width: Distribution = DEFAULT_WIDTH,
                 duration: Distribution = DEFAULT_DURATION, seed: int = 0,
                 families: Families | None = None) -> list[JobShape]:
    """`count` jobs arriving as a Poisson process of `rate` jobs per second from time 0; with
    `families` (count >= 1), recurring runs of job families and first-time jobs."""
    if count < 1:
        raise InvalidInput("--count", f"must be at least 1, got {count}")
    if not rate > 0:
        raise InvalidInput("--poisson", f"must be a positive number of jobs per second, got {rate}")
    arrivals = random.Random(f"{seed}/arrivals")
    if families is not None and families.count > 0:
        clock, times = 0.0, []
        for _ in range(count):  # the same arrivals as without families
            times.append(clock)
            clock += arrivals.expovariate(rate)
        return _family_jobs(times, families, width, duration, seed)
    sizes = random.Random(f"{seed}/sizes")
    shapes, clock = [], 0.0
    for index in range(1, count + 1):
        durations = tuple(duration.sample(sizes) for _ in range(width.sample_int(sizes)))
        shapes.append(JobShape(key=str(index), order=index, arrival=clock, durations=durations,
                               estimate=sum(durations) / len(durations)))
        clock += arrivals.expovariate(rate)
    return shapes


def _family_jobs(times: Sequence[float], families: Families, width: Distribution,
                 duration: Distribution, seed: int) -> list[JobShape]:
    templates = job_families(families, times[-1] - times[0], width=width, duration=duration,
                             seed=seed)
    run_noise, task_noise = noise(families.job_cov), noise(families.task_cov)
    shapes = []
    for index, arrival in enumerate(times, start=1):
        key = str(index)
        choice = _rng(seed, "recurs", key)
        # both drawn for every job: a higher share turns first-time jobs into runs and
        # leaves every other job as it was
        recurs = choice.random() < families.recurring_share
        family = templates[choice.randrange(len(templates))]
        if recurs:
            name, job_width = family.name, family.width
            mean = family.mean_at(arrival - times[0])
            runtime = _rng(seed, "runtime", key)
            mean *= run_noise.sample(runtime)
        else:
            once = _rng(seed, "once", key)
            name, job_width, mean = f"once-{key}", width.sample_int(once), duration.sample(once)
            runtime = _rng(seed, "runtime", key)
        durations = tuple(mean * task_noise.sample(runtime) for _ in range(job_width))
        shapes.append(JobShape(key=key, order=index, arrival=arrival, durations=durations,
                               estimate=sum(durations) / len(durations), name=name))
    return shapes


# -- what a workload holds, for the user and for the tests -----------------------------------


def describe(jobs: Sequence[ReplayJob]) -> dict:
    """Counts and means of a realized workload (printed by `megha synth` and `megha replay`)."""
    tasks = [task for job in jobs for task in job.tasks]
    n = max(1, len(tasks))
    runs = Counter(job.name for job in jobs if job.name is not None)
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
        "named_jobs": sum(count for count in runs.values()),
        "recurring_names": sum(count > 1 for count in runs.values()),  # shared by 2+ jobs
        "recurring_runs": sum(count for count in runs.values() if count > 1),
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
