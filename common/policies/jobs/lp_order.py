"""The packing paper's LP-ordered jobs at a GM (`lp`), and its PSRS baseline (`psrs`).

**`lp`**: the GM solves a linear relaxation of its jobs' schedule and places jobs in the order
of their LP completion times, lowest first (`common/policies/jobs/pooled.py`: the
federation as one pool, each job as its stated volume and longest task). The LP measures a
completion only to within one of its geometric intervals, so jobs it completes in one interval
are ordered among themselves by Smith's ratio (weight over remaining volume). The
placement search then packs each job's tasks greedily, inside their placement sets, as for
every job policy. Online, as the paper, the LP is solved again at the ends of intervals of
geometrically growing length: the first `resolve_first` seconds after the GM's first job, each
next interval `resolve_growth` times longer, but never longer than `resolve_max` (a GM runs
for as long as it is up, so the paper's unbounded growth would end re-solving altogether). A
job that arrives between two solves comes after every solved job, by Smith's ratio among its
kind, until the next solve orders it; a solve is skipped while no job arrived or ended.

The LP keeps a GM's pass short: it holds at most `max_jobs` jobs (those with the highest
weight per volume; the rest follow in Smith's order) and stops after `time_limit` seconds,
keeping the previous order. Each solve is logged by the GM (`jobs_reordered`: jobs, variables,
seconds). A job without stated durations has no volume: it comes last, by weight.

**`psrs`**: the paper's PSRS baseline orders jobs by the modified Smith ratio, weight over the
job's remaining volume (the room it takes, summed over its tasks as their duration times their
larger share of the pool), highest first. PSRS's other half, letting a wide task wait for room
rather than being passed by narrower ones, is the packing experiment's (`packing/baselines.py`);
a GM places whatever fits.

Workers' local queues get the job's remaining work over its weight under both (as `wspt`).
`lp`'s settings are `JobOptions.lp` (`[policies.lp]`); `psrs` has none.
"""

from __future__ import annotations

from common.policies.job import JOB_DEFAULTS, JOB_POLICIES, JobOptions, JobProgress
from common.policies.jobs.weighted import WeightedShortestFirstPolicy

Capacity = tuple[float, float]  # the pool's millicores and MiB


def remaining_share(job: JobProgress) -> float:
    """The share of the job's stated work not yet done (1 before any task finished)."""
    if job.true_work <= 0:
        return 1.0
    return max(job.true_work - job.attained, 0.0) / job.true_work


def remaining_volume(job: JobProgress, capacity: Capacity) -> tuple[float, float] | None:
    """Seconds of the whole pool the job's remaining work takes, per resource; None when its
    tasks state no durations."""
    if job.true_work <= 0:
        return None
    share = remaining_share(job)
    return (share * job.cpu_work / capacity[0], share * job.mem_work / capacity[1])


class _ByVolume(WeightedShortestFirstPolicy):
    """A job policy that needs the pool's capacity: the GM passes it before every pass
    (`reorder`), and a change of it re-keys every job."""

    last: dict | None = None

    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        self.capacity: Capacity = (1.0, 1.0)

    def _capacity_changed(self, capacity: Capacity) -> bool:
        if capacity == self.capacity:
            return False
        self.capacity = capacity
        return True

    def smith_key(self, job: JobProgress) -> tuple:
        volume = remaining_volume(job, self.capacity)
        if volume is None:
            return (2, -job.weight, job.seq)
        return (1, max(volume) / job.weight, job.seq)


@JOB_POLICIES.register("psrs")
class PsrsPolicy(_ByVolume):
    def reorder(self, now: float, capacity: Capacity) -> bool:
        return self._capacity_changed(capacity)

    def job_ended(self, job: JobProgress) -> None:
        pass

    def order_key(self, job: JobProgress) -> tuple:
        return self.smith_key(job)


@JOB_POLICIES.register("lp")
class LPOrderPolicy(_ByVolume):
    def __init__(self, options: JobOptions = JOB_DEFAULTS) -> None:
        super().__init__(options)
        lp = options.lp
        self.resolve_first = lp.resolve_first
        self.resolve_growth = lp.resolve_growth
        self.resolve_max = lp.resolve_max
        self.max_jobs = lp.max_jobs
        self.time_limit = lp.time_limit
        self.epsilon = lp.epsilon
        self.live: dict[int, JobProgress] = {}  # seq -> the GM's unfinished jobs
        self.completion: dict[int, int] = {}  # seq -> the LP interval it completes in
        self.changed = False  # a job arrived or ended since the last solve
        self.next_solve: float | None = None  # GM clock; None until the first job
        self.interval = lp.resolve_first
        # what the GM logs of each solve, and the running totals (figures)
        self.solves = 0
        self.timeouts = 0

    # -- the job policy ------------------------------------------------------------------------

    def admit(self, job: JobProgress, rng) -> None:
        super().admit(job, rng)
        self.live[job.seq] = job
        self.changed = True
        if self.next_solve is None:
            self.next_solve = job.admitted_at + self.resolve_first

    def job_ended(self, job: JobProgress) -> None:
        self.live.pop(job.seq, None)
        self.completion.pop(job.seq, None)
        self.changed = True

    def order_key(self, job: JobProgress) -> tuple:
        completion = self.completion.get(job.seq)
        if completion is None:
            return self.smith_key(job)
        # by the LP's interval, and within one by Smith's ratio: the LP tells apart only jobs
        # it finishes in different intervals
        return (0, completion) + self.smith_key(job)[1:]

    def reorder(self, now: float, capacity: Capacity) -> bool:
        """Solve again if an interval ended and the jobs changed; True when keys changed."""
        rekey = self._capacity_changed(capacity)
        if self.next_solve is None or now < self.next_solve:
            return rekey
        self.interval = min(self.interval * self.resolve_growth, self.resolve_max)
        self.next_solve = now + self.interval
        if not self.changed:
            return rekey
        self.changed = False
        return self._solve(now) or rekey

    # -- the LP --------------------------------------------------------------------------------

    def _solve(self, now: float) -> bool:
        # numpy and scipy load only when a GM runs this policy
        from common.policies.jobs.pooled import LPTimeout, PooledJob, pooled_lp

        known = []
        for job in self.live.values():
            volume = remaining_volume(job, self.capacity)
            if volume is not None and max(volume) > 0:
                known.append((job, volume))
        known.sort(key=lambda item: (max(item[1]) / item[0].weight, item[0].seq))
        chosen = known[:self.max_jobs]
        pooled = [PooledJob(job.seq, job.weight, max(job.arrival - now, 0.0), volume,
                            job.longest_stated) for job, volume in chosen]
        self.solves += 1
        try:
            solution = pooled_lp(pooled, epsilon=self.epsilon, time_limit=self.time_limit)
        except LPTimeout:
            self.timeouts += 1
            self.last = {"jobs": len(pooled), "timed_out": True, "limit_s": self.time_limit}
            return False
        self.completion = solution.interval
        self.last = {"jobs": len(pooled), "left_out": len(known) - len(chosen),
                     "at_own_bound": solution.at_own_bound,
                     "variables": solution.variables,
                     "next_in_s": round(self.interval, 3)}
        return True

    def figures(self) -> dict:
        return {"lp_solves": self.solves, "lp_timeouts": self.timeouts}

