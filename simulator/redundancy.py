"""The SRPT+R paper's cluster: `m` machines whose rates vary (common/speed.py), one-task jobs
arriving as a Poisson process with Pareto sizes, and a centralized scheduler that gives each
job machines by one of the allocation policies (simulator/models/machines.py).

Time is slotted, as in the paper's simulations: decisions at the start of a slot, rates constant
within it, a job arriving during a slot considered from the next one, a job done at the end of
the slot its work completes in. Each copy of a job accumulates the work its machine (or its
share of it) delivers; the job's progress is its checkpointed work plus its best copy's. A
checkpoint happens at a slot's end when a job arrived or departed in it: every running job's
best copy's progress becomes its checkpointed work, copies restart from there, and the
allocation is made again. The rest of the copies' work is wasted (counted).

Invariants checked as it runs (`RedundancySim.check`): a job completes once; dedicated copies
and shared jobs never need more machines than there are; shares on a machine sum to 1 at most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from common.errors import InvalidInput
from common.speed import SpeedModel
from simulator.models.machines import MACHINE_ALLOCATIONS, AllocationOptions


@dataclass(frozen=True, slots=True)
class Workload:
    rate: float  # jobs per time unit (lambda)
    horizon: int = 5000  # arrivals happen in [0, horizon)
    pareto_shape: float = 2.5
    pareto_mean: float = 40.0  # 100 machines of mean rate 1: lambda 2.5 is the limit

    def sample(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(arrival times, sizes), sorted by arrival."""
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise InvalidInput("--rates", f"an arrival rate must be > 0, got {self.rate}")
        if not self.pareto_shape > 1:
            raise InvalidInput("--pareto-shape", f"must exceed 1, got {self.pareto_shape}")
        rng = np.random.default_rng(seed)
        count = rng.poisson(self.rate * self.horizon)
        arrivals = np.sort(rng.uniform(0, self.horizon, count))
        scale = self.pareto_mean * (self.pareto_shape - 1) / self.pareto_shape
        sizes = scale * (1 + rng.pareto(self.pareto_shape, count))  # classical Pareto
        return arrivals, sizes


@dataclass
class RunResult:
    policy: str
    rate: float
    seed: int
    flowtimes: np.ndarray  # per job, in arrival order
    checkpoints: np.ndarray  # per job: checkpoints it went through (arrival and end included)
    useful_work: float
    wasted_work: float  # done by copies that were not their job's best
    slots: int
    unfinished: int  # jobs still active when the run had to stop (overload)
    copies_max: int = 0
    extra: dict = field(default_factory=dict)


class RedundancySim:
    def __init__(self, policy: str, machines: int, workload: Workload, speed: SpeedModel,
                 seed: int, beta: float = 0.5, drain_factor: float = 20.0,
                 check: bool = True) -> None:
        if machines < 1:
            raise InvalidInput("--machines", f"must be at least 1, got {machines}")
        self.policy = MACHINE_ALLOCATIONS.make(policy, AllocationOptions(beta))
        self.machines = machines
        self.workload = workload
        self.seed = seed
        self.arrivals, self.sizes = workload.sample(seed)
        self.max_slots = int(workload.horizon * drain_factor) + 1
        self.speed = speed
        self._rate_chunks: list[np.ndarray] = []  # drawn a horizon at a time, as needed
        self.check_invariants = check
        self.rng = np.random.default_rng(seed + 2)  # which machines a reallocation hands out

    def run(self) -> RunResult:
        arrivals, sizes = self.arrivals, self.sizes
        total = len(sizes)
        flow = np.full(total, np.nan)
        checkpoints = np.zeros(total, dtype=np.int64)
        # the active jobs, as arrays over their positions: job id, checkpointed work
        active = np.empty(0, dtype=np.int64)
        base = np.empty(0)
        next_arrival, wasted, copies_max, t = 0, 0.0, 0, 0
        entries = Entries.empty()
        changed = False
        while (next_arrival < total or len(active)) and t < self.max_slots:
            # jobs that arrived during the last slot join now: a checkpoint for every job
            joined = int(np.searchsorted(arrivals, t))  # arrivals are sorted
            if joined > next_arrival:
                active = np.concatenate([active, np.arange(next_arrival, joined)])
                base = np.concatenate([base, np.zeros(joined - next_arrival)])
                next_arrival = joined
                changed = True
            if changed:
                wasted += entries.checkpoint(base)  # an arrival's: from the best copies
                checkpoints[active] += 1
                entries = self._allocate(active, base)
                copies_max = max(copies_max, entries.most_copies)
                changed = False
            # one slot of work
            entries.progress += self._rates(t)[entries.machine] * entries.share
            t += 1
            if not len(entries.job):
                continue
            best = entries.best()
            done_mask = base[entries.running] + best >= sizes[active[entries.running]] - 1e-9
            if not done_mask.any():
                continue
            # departures: a checkpoint for every running job
            changed = True
            wasted += entries.checkpoint(base, best)
            finished = entries.running[done_mask]
            jobs = active[finished]
            if self.check_invariants and not np.isnan(flow[jobs]).all():
                raise AssertionError(f"jobs {jobs[~np.isnan(flow[jobs])]} completed twice")
            flow[jobs] = t - arrivals[jobs]
            checkpoints[jobs] += 1
            keep = np.ones(len(active), dtype=bool)
            keep[finished] = False
            active, base = active[keep], base[keep]
            entries = Entries.empty()
        done = ~np.isnan(flow)
        useful = float(sizes[done].sum())
        return RunResult(self.policy.name, self.workload.rate, self.seed, flow[done],
                         checkpoints[done], useful, wasted, t, int((~done).sum()), copies_max)

    def _rates(self, t: int) -> np.ndarray:
        """The machines' rates in slot `t`. Drawn in chunks of a horizon each, chunk i from
        its own seed, so a run pays only for the slots it reaches (a drain is short unless
        the cluster is overloaded)."""
        size = self.workload.horizon
        chunk, offset = divmod(t, size)
        while len(self._rate_chunks) <= chunk:
            self._rate_chunks.append(self.speed.sample(
                self.machines, size, [self.seed, 1, len(self._rate_chunks)]))
        return self._rate_chunks[chunk][offset]

    def _allocate(self, active: np.ndarray, base: np.ndarray) -> Entries:
        remaining = self.sizes[active] - base
        copies, shared = self.policy.allocate(remaining, self.arrivals[active], self.machines)
        return Entries.build(copies, shared, self.machines, self.rng, self.check_invariants)


@dataclass
class Entries:
    """The copies running until the next checkpoint, grouped by job: `running` holds the
    positions (in the active arrays) of jobs with copies, `starts` where each one's copies
    begin in the per-copy arrays."""

    running: np.ndarray
    starts: np.ndarray
    job: np.ndarray  # per copy: index into `running`
    machine: np.ndarray
    share: np.ndarray
    progress: np.ndarray
    most_copies: int = 0

    def best(self) -> np.ndarray:
        """Each running job's progress since the last checkpoint: its best copy's."""
        return np.maximum.reduceat(self.progress, self.starts)

    def checkpoint(self, base: np.ndarray, best: np.ndarray | None = None) -> float:
        """Give each running job its best copy's progress (in `base`, the active jobs'
        checkpointed work) and start the copies over; the work of the others, wasted."""
        if not len(self.job):
            return 0.0
        best = self.best() if best is None else best
        base[self.running] += best
        wasted = float(self.progress.sum() - best.sum())
        self.progress[:] = 0.0
        return wasted

    @classmethod
    def empty(cls) -> Entries:
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, none, none, np.empty(0), np.empty(0))

    @classmethod
    def build(cls, copies: np.ndarray, shared: np.ndarray, machines: int,
              rng: np.random.Generator, check: bool) -> Entries:
        dedicated = int(copies.sum())
        shared_jobs = np.flatnonzero(shared)
        free = machines - dedicated
        if check:
            if dedicated > machines or (copies < 0).any():
                raise AssertionError(f"{dedicated} dedicated copies on {machines} machines")
            if len(shared_jobs) and free < 1:
                raise AssertionError("jobs share machines but none is left to share")
            if (copies[shared] > 0).any():
                raise AssertionError("a shared job also has dedicated copies")
        order = rng.permutation(machines)  # rates are i.i.d.: hand machines out at random
        running = np.flatnonzero((copies > 0) | shared)
        per_job = np.where(shared[running], 1, copies[running])
        starts = np.concatenate([[0], np.cumsum(per_job)[:-1]]).astype(np.int64)
        job = np.repeat(np.arange(len(running)), per_job)
        machine = np.empty(len(job), dtype=np.int64)
        share = np.ones(len(job))
        is_shared = shared[running][job]
        machine[~is_shared] = order[:dedicated]
        if len(shared_jobs):
            left = order[dedicated:]
            slots = np.arange(int(is_shared.sum())) % len(left)
            machine[is_shared] = left[slots]
            load = np.bincount(slots, minlength=len(left))
            share[is_shared] = 1.0 / load[slots]
        most = int(per_job.max()) if len(per_job) else 0
        return cls(running, starts, job, machine, share, np.zeros(len(job)), most)
