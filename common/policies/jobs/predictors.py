"""The job policies that place jobs on the priority-queue ladder (`ladder.py`), each with its
own way of learning a job's size. They share the ladder, FIFO within a level and weighted
sharing across levels, so that they differ only in how they estimate (as in the SLearn
paper's comparison). A job's *work* is its total task runtime, in task-seconds. Each is made
with the family's `JobOptions` and reads its parts: the ladder `options.queues`, the history
policies `options.history`, slearn (and 3sigma-tl's thin limit) `options.slearn`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from common.policies.job import JOB_DEFAULTS, JOB_POLICIES, JobOptions, JobProgress
from common.policies.jobs.history import RuntimeHistory, expected, features, point
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
        job.pilots = frozenset()
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


@JOB_POLICIES.register("las")
class LeastAttainedServicePolicy(LadderPolicy):
    """Every job starts at the top and moves down as its finished tasks' summed runtime
    (its attained service) crosses each level's bound; no estimate."""

    def task_finished(self, job: JobProgress, index: int, runtime: float) -> bool:
        job.level = self.ladder.level_of(job.attained)
        return False

    def worker_priority(self, job: JobProgress) -> float:
        return job.attained


class HistoryPolicy(LadderPolicy):
    """Predicts a job's mean task runtime from similar finished jobs (`history.py`); a job
    like none seen yet has no estimate and starts at the top."""

    summary: Callable[[list[float]], float]
    thin_threshold: int | None = None  # 3sigma-tl: thin jobs go to the top, unestimated

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        self.history = RuntimeHistory(options.history.history_window,
                                      options.history.min_history)

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
    summary = expected


@JOB_POLICIES.register("3sigma-tl")
class ThreeSigmaThinPolicy(ThreeSigmaPolicy):
    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        self.thin_threshold = options.slearn.thin_threshold  # slearn's only option it reads


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
