"""Job policies: how a GM orders the jobs it owns, registered by name.

A job policy decides which of a job's tasks may run now (all, or only pilots while the rest
are held), which *level* (priority queue) the job sits in, and the priority a worker's SRPT
queue gives its tasks. The GM keeps one queue per level, serves a level's jobs in arrival
order, and shares its resources across levels by weight (`jobs/ladder.py`); a policy without
a ladder (`fifo`, `wspt`) has one queue ordered by `order_key`.

The policies (`jobs/predictors.py`) differ only in how they learn a job's size:

- `fifo`: Megha's order, by arrival; no levels.
- `slearn`: runs a few pilot tasks of each wide job first, and places the job by their mean
  runtime times its width; thin jobs go straight to the top (`jobs/sampling.py`: the ratio).
- `las`: least attained service: every job starts at the top and moves down as its attained
  service (its finished tasks' runtimes and its running tasks' time so far) crosses each
  level's bound.
- `3sigma`, `3sigma-mean`, `point-est`: from the history of similar jobs (`jobs/history.py`),
  which may start trained; `3sigma-tl` also sends thin jobs to the top as slearn does.
- `oracle`: knows each job's true size.

One policy orders by job weight (`jobs/weighted.py`):

- `wspt`: Smith's rule, weighted shortest processing time first: the highest weight over
  remaining work first, the work known from the tasks' stated durations as the oracle knows
  it; no levels, and the key follows the remaining work as tasks finish.

One policy is the published Megha simulator's order, not the paper's (`jobs/fewest.py`):

- `fewest-tasks`: the job with the fewest unfinished tasks first, ties by arrival; no levels,
  and the key follows the count as tasks finish.

`JOB_POLICIES.make(name, options)` passes a policy the family's options, a `JobOptions`: one
part per table of the federation file (`[policies.queues]`, `[policies.slearn]`,
`[policies.history]`, `[policies.lp]`), of which each policy reads those it uses (`fifo` none).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from common.errors import InvalidInput
from common.policies.registry import Registry

if TYPE_CHECKING:
    from common.models import JobSpec
    from common.policies.jobs.history import FinishedJob
    from common.policies.jobs.ladder import QueueLadder


NO_PILOTS: frozenset[int] = frozenset()  # one for every job without pilots (a GM keeps 100,000s)


@dataclass(slots=True)
class JobProgress:
    """What a job policy may read and write of a job. The GM owns the rest."""

    num_tasks: int
    seq: int  # arrival order at this GM
    arrival: float
    trace_estimate: float | None  # a trace's own per-task estimate, if it has one
    user: str = ""
    weight: float = 1.0  # its weight in the weighted JCT (`JobSpec.weight`)
    name: str | None = None  # a recurring job's template, if the workload names it
    true_work: float = 0.0  # its tasks' stated durations summed: read by oracle, wspt
    # its tasks' stated durations times their demands, summed: millicore-seconds and
    # MiB-seconds (read by psrs and lp, which weigh a job by the room it takes)
    cpu_work: float = 0.0
    mem_work: float = 0.0
    longest_stated: float = 0.0  # its longest task's stated duration (lp: a job's shortest span)
    admitted_at: float = 0.0  # the GM's clock when the job arrived
    done: int = 0
    attained: float = 0.0  # the summed runtime of its finished tasks, task-seconds
    longest: float = 0.0  # its longest finished task's runtime
    pilots: frozenset[int] = NO_PILOTS  # task indices run first; the rest are held
    pilot_runtimes: list[float] = field(default_factory=list)
    estimated_task_duration: float | None = None
    estimate: float | None = None  # estimated total work, task-seconds
    sampling_ratio: float | None = None  # slearn: the share of its tasks run as pilots
    level: int = 0  # its priority queue (0 the highest); the policy keeps it
    # its tasks running now: index -> when that attempt started, by the GM's clock (the GM
    # keeps it, `ran`; las counts their time so far in the job's attained service). Emptied,
    # it is a new dict: a dict never gives back the table its widest moment grew, and the GM
    # keeps ended jobs
    running: dict[int, float] = field(default_factory=dict)

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

    @classmethod
    def of(cls, job: JobSpec, seq: int, now: float) -> JobProgress:
        """A job's progress as it arrives: the `seq`th at its GM, at `now` on its clock."""
        true_work = cpu_work = mem_work = longest = 0.0
        for task in job.tasks:
            duration, demand = task.duration or 0.0, task.demand
            true_work += duration
            cpu_work += duration * demand.cpu_m
            mem_work += duration * demand.mem_mib
            if duration > longest:  # (not `max`: a call per task)
                longest = duration
        return cls(len(job.tasks), seq, job.arrival, job.estimated_task_duration, user=job.user,
                   name=job.name, true_work=true_work, admitted_at=now, weight=job.weight,
                   cpu_work=cpu_work, mem_work=mem_work, longest_stated=longest)

    def ran(self, index: int, since: float | None) -> None:
        """Task `index` started running at `since`, or stopped running (None: it finished,
        was preempted or lost)."""
        if since is None:
            running = self.running
            running.pop(index, None)
            if not running:
                self.running = {}
        else:
            self.running[index] = since

    def finish(self, runtime: float) -> None:
        """One of its tasks finished after `runtime` seconds."""
        self.done += 1
        self.attained += runtime
        if runtime > self.longest:
            self.longest = runtime


@dataclass(frozen=True, slots=True)
class LadderOptions:
    """[policies.queues]: the priority-queue ladder of every size-aware policy (its checks are
    `jobs/ladder.py`'s `QueueLadder`, which a policy builds from these)."""

    levels: int = 10
    first_limit: float = 1000.0  # task-seconds: the bound of the top queue
    growth: float = 10.0  # each bound is this times the one before
    weight_decay: float = 10.0  # each level's weight is the one before divided by this


def _at_least_one(name: str, value: object) -> None:
    if not (isinstance(value, int) and value >= 1):
        raise InvalidInput(name, f"must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """[policies.slearn]: slearn's pilots (`jobs/sampling.py`); 3sigma-tl reads its thin
    limit."""

    sampling_ratio: float | str = "adaptive"  # a fraction in (0, 1], or learnt
    thin_threshold: int = 3  # jobs with fewer tasks are thin: no pilots
    score_window: int = 100  # adaptive: jobs per ratio its score is the mean over

    def __post_init__(self) -> None:
        ratio = self.sampling_ratio
        if ratio != "adaptive" and not (isinstance(ratio, int | float) and 0 < ratio <= 1):
            raise InvalidInput("sampling_ratio", f'must be in (0, 1] or "adaptive", got '
                                                 f"{ratio!r}")
        _at_least_one("score_window", self.score_window)
        _at_least_one("thin_threshold", self.thin_threshold)


@dataclass(frozen=True, slots=True)
class RuntimeHistoryOptions:
    """[policies.history]: the finished jobs 3sigma, 3sigma-tl and point-est predict from
    (`jobs/history.py`)."""

    history_window: int = 20  # finished jobs kept per feature value
    min_history: int = 2  # needed before predicting
    # jobs known before the first arrival, in the order they finished (the SLearn paper trains
    # 3Sigma on the first half of each trace); each checks itself when made
    training: tuple[FinishedJob, ...] = ()

    def __post_init__(self) -> None:
        _at_least_one("history_window", self.history_window)
        if not (isinstance(self.min_history, int) and 1 <= self.min_history
                <= self.history_window):
            raise InvalidInput("min_history", f"must be an integer from 1 to history_window "
                                              f"({self.history_window}), got "
                                              f"{self.min_history!r}")


@dataclass(frozen=True, slots=True)
class LPOrderOptions:
    """[policies.lp]: how often `lp` solves its LP, and how big and long a solve may be
    (`jobs/lp_order.py`)."""

    resolve_first: float = 1.0  # seconds from the GM's first job to the first solve
    resolve_growth: float = 1.5  # each interval this times the one before
    resolve_max: float = 10.0  # ... up to this
    max_jobs: int = 200  # jobs in one LP
    time_limit: float = 0.5  # seconds a solve may take
    epsilon: float = 0.5  # the LP's time points grow by 1 + epsilon


@dataclass(frozen=True, slots=True)
class JobOptions:
    """The job policies' options, one part per table of the federation file."""

    queues: LadderOptions = LadderOptions()
    slearn: SamplingOptions = SamplingOptions()
    history: RuntimeHistoryOptions = RuntimeHistoryOptions()
    lp: LPOrderOptions = LPOrderOptions()


JOB_DEFAULTS = JobOptions()  # what a policy made without options gets: the file's defaults


class JobPolicy(Protocol):
    """Which of a job's tasks may run now, and in which queue and order jobs are placed."""

    name: str
    options: JobOptions
    ladder: QueueLadder | None  # its priority queues; None: one queue by `order_key`

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        """Called once at arrival: choose pilots (tasks not in `pilots` are held if any),
        and the job's level."""

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        """Called after `job.finish(runtime)`; may change the job's level. True when the
        job's held tasks become eligible."""

    def job_finished(self, job: JobProgress, now: float) -> None:
        """The job's last task finished at `now` (the policy may learn from it)."""

    def order_key(self, job: JobProgress) -> tuple:
        """Without a ladder, lower keys are placed first."""

    def worker_priority(self, job: JobProgress) -> float:
        """The SRPT key a worker's local queue sees for this job's tasks."""


# the size-learning policies, wspt, psrs and lp: registered by the modules of `jobs/`, which
# the registry imports when first asked for a policy
JOB_POLICIES: Registry[type[JobPolicy]] = Registry(
    "policies.job", options=JobOptions, argument="job_policy", plugins="common.policies.jobs")


@JOB_POLICIES.register("fifo")
class FifoPolicy:
    ladder = None

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        self.options = options  # fifo reads none of them

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        job.pilots = NO_PILOTS

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        return False

    def job_finished(self, job: JobProgress, now: float) -> None:
        pass

    def order_key(self, job: JobProgress) -> tuple:
        return (job.seq,)

    def worker_priority(self, job: JobProgress) -> float:
        work = job.estimated_remaining_work
        return job.arrival if work is None else work

    def estimate_fields(self, job: JobProgress) -> dict:
        return {}

    def ended_fields(self, job: JobProgress) -> dict:
        return {}

