"""The job policies that place jobs on the priority-queue ladder (`ladder.py`), each with its
own way of learning a job's size. They share the ladder, FIFO within a level and weighted
sharing across levels, so that they differ only in how they estimate (as in the SLearn
paper's comparison). A job's *work* is its total task runtime, in task-seconds. Each is made
with the family's `JobOptions` and reads its parts: the ladder `options.queues`, the history
policies `options.history` (with the jobs they are trained on), slearn (and 3sigma-tl's thin
limit) `options.slearn`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from common.policies.job import JOB_DEFAULTS, JOB_POLICIES, NO_PILOTS, JobOptions, JobProgress
from common.policies.jobs.history import (
    RuntimeHistory,
    features,
    history_mean,
    point,
    utility_estimate,
)
from common.policies.jobs.ladder import THIN_LIMIT, QueueLadder
from common.policies.jobs.sampling import AdaptiveSampling


class LadderPolicy:
    """Priority queues; a subclass estimates. A job with no estimate yet stays at the top."""

    ladder: QueueLadder = QueueLadder()  # each instance its own, from its options

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        self.options = options
        queues = options.queues
        self.ladder = QueueLadder(queues.levels, queues.first_limit, queues.growth,
                                  queues.weight_decay)

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        job.pilots = NO_PILOTS  # shared: a new empty frozenset per job is 216 bytes
        job.level = 0

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        return False

    def job_finished(self, job: JobProgress, now: float) -> None:
        pass

    def order_key(self, job: JobProgress) -> tuple:
        return (job.level, job.seq)

    def worker_priority(self, job: JobProgress) -> float:
        # its own estimate only: a trace's per-task estimate would be a second predictor
        per_task = job.estimated_task_duration
        return job.arrival if per_task is None else per_task * job.remaining

    def estimate_fields(self, job: JobProgress) -> dict:
        return {"predictor": self.name, "estimate": job.estimate, "level": job.level,
                "sampling_ratio": job.sampling_ratio, "pilots": len(job.pilots)}

    def ended_fields(self, job: JobProgress) -> dict:
        """The estimate beside the truth: the work its tasks measured, and its queue."""
        thin = getattr(self, "thin_threshold", None) or THIN_LIMIT
        return {"predictor": self.name, "estimate": job.estimate, "work": job.attained,
                "level": job.level, "true_level": self.ladder.level_of(job.attained),
                "thin": job.num_tasks < thin, "sampling_ratio": job.sampling_ratio}

    def _estimated(self, job: JobProgress, work: float) -> None:
        """The job's size is now estimated at `work`: it moves to that level."""
        job.estimate = work
        job.estimated_task_duration = work / job.num_tasks
        job.level = self.ladder.level_of(work)


@JOB_POLICIES.register("oracle")
class OraclePolicy(LadderPolicy):
    """Knows every job's true size (its tasks' stated durations): the bound to compare with."""

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        super().admit(job, rng)
        self._estimated(job, job.true_work)


# las looks again at least this often (seconds of the GM's clock): a task that starts after
# a look makes its job attain service faster than that look foresaw, and a job with r tasks
# running can then be up to r times this many task-seconds late to go down
LAS_LOOK_EVERY = 1.0


@JOB_POLICIES.register("las")
class LeastAttainedServicePolicy(LadderPolicy):
    """Least attained service: every job starts at the top and moves down as its attained
    service crosses each level's bound; no estimate. A job's attained service is the runtime
    its tasks have had so far: its finished tasks' runtimes and the time each running task
    has run (from the starts the GM records in `JobProgress.running`), so a wide job of long
    tasks goes down while they run, not when the first of them ends.

    Service grows with the clock, so las re-levels as the lp policy re-keys: the GM asks it
    before every pass (`reorder`), and it looks at its jobs when the next one may cross a
    bound at the rate it attains service now, and at least every `LAS_LOOK_EVERY`. A job
    never moves up: service attained is not lost when a task is preempted."""

    last = None  # nothing to log of a look (`Reordering`)

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        self._jobs: dict[int, JobProgress] = {}  # unfinished, by arrival order
        self._now = 0.0  # the GM's clock at its last pass
        self._next_look = 0.0

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        super().admit(job, rng)
        self._jobs[job.seq] = job

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        self._place(job, self._now)
        return False

    def reorder(self, now: float, capacity: tuple[float, float]) -> bool:
        """True when a job changed level (the GM then refiles its jobs)."""
        self._now = now
        if now < self._next_look:
            return False
        moved, next_look, limits = False, now + LAS_LOOK_EVERY, self.ladder.limits
        for job in self._jobs.values():
            moved |= self._place(job, now)
            if job.running and job.level < len(limits):
                rate = len(job.running)  # task-seconds attained per second
                next_look = min(next_look, now + (limits[job.level] - attained(job, now)) / rate)
        self._next_look = next_look
        return moved

    def job_ended(self, job: JobProgress) -> None:
        self._jobs.pop(job.seq, None)

    def worker_priority(self, job: JobProgress) -> float:
        return attained(job, self._now)

    def _place(self, job: JobProgress, now: float) -> bool:
        """Move the job down to the level of its service at `now`; True if it moved."""
        level = self.ladder.level_of(attained(job, now))
        if level <= job.level:
            return False
        job.level = level
        return True


def attained(job: JobProgress, now: float) -> float:
    """A job's attained service at `now`, task-seconds: its finished tasks' runtimes and what
    its running tasks have run so far."""
    return job.attained + sum(now - since for since in job.running.values())


class HistoryPolicy(LadderPolicy):
    """Predicts a job's mean task runtime from similar finished jobs (`history.py`); a job
    like none seen yet has no estimate and starts at the top."""

    summary: Callable[[list[float]], float]
    thin_threshold: int | None = None  # 3sigma-tl: thin jobs go to the top, unestimated

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        history = options.history
        self.history = RuntimeHistory(history.history_window, history.min_history,
                                      history.training)

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        super().admit(job, rng)
        if self.thin_threshold is not None and job.num_tasks < self.thin_threshold:
            return
        samples = self.history.samples(features(job.name, job.user, job.num_tasks))
        if samples is not None:
            self._estimated(job, type(self).summary(samples) * job.num_tasks)

    def job_finished(self, job: JobProgress, now: float) -> None:
        self.history.record(features(job.name, job.user, job.num_tasks),
                            job.attained / job.num_tasks)


@JOB_POLICIES.register("3sigma")
class ThreeSigmaPolicy(HistoryPolicy):
    """The estimate of the highest expected utility over the history (`utility_estimate`)."""

    summary = utility_estimate


@JOB_POLICIES.register("3sigma-tl")
class ThreeSigmaThinPolicy(ThreeSigmaPolicy):
    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        self.thin_threshold = options.slearn.thin_threshold  # slearn's only option it reads


@JOB_POLICIES.register("3sigma-mean")
class ThreeSigmaMeanPolicy(HistoryPolicy):
    """3Sigma's features and history, estimating by the history's mean (the expected size)."""

    summary = history_mean


@JOB_POLICIES.register("point-est")
class PointEstimatePolicy(HistoryPolicy):
    summary = point


@JOB_POLICIES.register("slearn")
class SLearnPolicy(LadderPolicy):
    """Learning a job's size by sampling: thin jobs (fewer than `thin_threshold` tasks) go to
    the top queue unsampled; a wider job first runs pilot tasks (a share of its tasks, at
    least one, chosen at random) in the sampling queue while the rest are held; the mean
    pilot runtime times its width then places it. `sampling_ratio` is a fraction, or
    "adaptive" to learn it (`sampling.py`, over windows of `score_window` jobs)."""

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        sampling = options.slearn  # checked when made (`SamplingOptions`)
        self.sampler: AdaptiveSampling | None = (
            AdaptiveSampling(sampling.score_window) if sampling.sampling_ratio == "adaptive"
            else None)
        self.sampling_ratio = sampling.sampling_ratio
        self.thin_threshold = sampling.thin_threshold

    def admit(self, job: JobProgress, rng: random.Random) -> None:
        super().admit(job, rng)
        if job.num_tasks < self.thin_threshold:
            return
        ratio = self.sampler.next_ratio() if self.sampler else float(self.sampling_ratio)
        count = min(job.num_tasks, max(1, round(ratio * job.num_tasks)))
        job.pilots = frozenset(rng.sample(range(job.num_tasks), count))
        job.sampling_ratio = ratio
        job.level = self.ladder.sampling_level

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        if index not in job.pilots or job.estimate is not None:
            return False
        job.pilot_runtimes.append(runtime)
        if len(job.pilot_runtimes) < len(job.pilots):
            return False
        mean = sum(job.pilot_runtimes) / len(job.pilot_runtimes)
        self._estimated(job, mean * job.num_tasks)
        return True

    def job_finished(self, job: JobProgress, now: float) -> None:
        if self.sampler is not None and job.sampling_ratio is not None:
            jct = now - job.admitted_at
            self.sampler.record(job.sampling_ratio, jct / job.longest if job.longest > 0
                                else 1.0)

    def worker_priority(self, job: JobProgress) -> float:
        if job.sampling:
            return 0.0  # pilots run first: their jobs' size is unknown yet
        work = job.estimated_remaining_work
        return 0.0 if work is None else work
