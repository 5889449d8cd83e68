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

Which machines a checkpoint hands out (`assignment`):

- `kept` (the paper's model, the default): a job keeps the machines it runs on. With as many
  copies as before it keeps all of them; with fewer it keeps its best copies' (the state the
  checkpoint clones is there); copies it gains, and jobs that start, take machines that are
  free (freed by a departure, a preemption or a job giving up copies). A machine's rate is a
  process that stays slow through an unavailable period, so a job on a slow machine stays slow
  until redundancy (or a preemption) moves it.
- `reshuffled`: every machine is handed out anew, at random, at every checkpoint. A job then
  rarely stays on a slow machine for long, which favours the policies without copies: their
  jobs escape slow machines without redundancy.

When the copies outnumber the machines (multitasking), every machine holds ceil(E/m) or
floor(E/m) of the E copies, the kept ones on the machines that held the most, and each copy
gets an equal share of its machine's rate. A job's copies are always on distinct machines.

Invariants checked as it runs (`check`): a job completes once; a machine's shares sum to 1 at
most; a job's copies are on distinct machines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from common.errors import InvalidInput
from common.speed import SpeedModel
from simulator.models.machines import MACHINE_ALLOCATIONS, AllocationOptions

ASSIGNMENTS = ("kept", "reshuffled")


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
                 check: bool = True, assignment: str = "kept") -> None:
        if machines < 1:
            raise InvalidInput("--machines", f"must be at least 1, got {machines}")
        if assignment not in ASSIGNMENTS:
            raise InvalidInput("--assignment", f"must be one of {', '.join(ASSIGNMENTS)}, got "
                                               f"{assignment!r}")
        self.policy = MACHINE_ALLOCATIONS.make(policy, AllocationOptions(beta))
        self.machines = machines
        self.workload = workload
        self.seed = seed
        self.arrivals, self.sizes = workload.sample(seed)
        self.max_slots = int(workload.horizon * drain_factor) + 1
        self.speed = speed
        self._rate_chunks: list[np.ndarray] = []  # drawn a horizon at a time, as needed
        self.check_invariants = check
        self.kept = assignment == "kept"
        self.rng = np.random.default_rng(seed + 2)  # which free machines a job is handed

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
        layout = entries.layout()  # where the copies ran, for the next allocation
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
                if len(entries.job):  # an arrival's checkpoint: from the best copies
                    wasted += entries.checkpoint(base)
                    layout = entries.layout()
                checkpoints[active] += 1
                entries = self._allocate(active, base, layout)
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
            layout = entries.without(keep)  # the others stay where they are until placed
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

    def _allocate(self, active: np.ndarray, base: np.ndarray,
                  layout: tuple[np.ndarray, np.ndarray]) -> Entries:
        remaining = self.sizes[active] - base
        copies, _ = self.policy.allocate(remaining, self.arrivals[active], self.machines)
        if self.check_invariants and ((copies < 0).any() or copies.max(initial=0)
                                      > self.machines):
            raise AssertionError(f"{self.policy.name} gave copies {copies} on "
                                 f"{self.machines} machines")
        kept = layout if self.kept else Entries.empty().layout()
        position, machine, share = place(copies, kept, self.machines, self.rng)
        entries = Entries.of(position, machine, share)
        if self.check_invariants:
            entries.check(self.machines)
        return entries


def _rank(groups: np.ndarray) -> np.ndarray:
    """Each element's rank in its run of equal values (`groups` sorted into runs)."""
    starts, lengths = _runs(groups)
    return np.arange(len(groups)) - np.repeat(starts, lengths)


def _runs(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal values of `groups` begins, and its length."""
    changes = np.empty(len(groups), dtype=bool)
    changes[:1] = True
    np.not_equal(groups[1:], groups[:-1], out=changes[1:])
    starts = np.flatnonzero(changes)
    lengths = np.empty_like(starts)
    lengths[:-1] = starts[1:] - starts[:-1]
    lengths[-1:] = len(groups) - starts[-1:]
    return starts, lengths


def place(copies: np.ndarray, kept: tuple[np.ndarray, np.ndarray], machines: int,
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the copies of each job (`copies` per active position) run: (position, machine,
    share) per copy. `kept`: (position, machine) of the copies that stay where they are if
    the allocation lets them, grouped by job, the best first (empty: hand everything out at
    random)."""
    total = int(copies.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0)
    per = -(-total // machines)  # copies on the fullest machines
    # a job keeps at most its new number of copies, its best ones
    position, machine = kept
    if (np.bincount(position, minlength=len(copies)) > copies).any():
        wanted = _rank(position) < copies[position]
        position, machine = position[wanted], machine[wanted]
    # the machines that held the most keep the most: `fullest` of them hold `per`
    held = np.bincount(machine, minlength=machines)
    fullest = total - machines * (per - 1)
    cap = np.full(machines, per - 1)
    cap[np.lexsort((rng.random(machines), -held))[:fullest]] = per
    placed_position: list[np.ndarray] = []
    placed_machine: list[np.ndarray] = []
    used = np.zeros(machines, dtype=np.int64)
    # a job with several shares (laps+r's latest: the policies give that to one job at most)
    # needs as many machines: placed first, preferring the machines with room to spare
    if per > 1:
        for job in np.flatnonzero(copies > 1):
            on = machine[position == job]
            spare = cap - used - held  # room left if every kept copy stayed
            elsewhere = np.ones(machines, dtype=bool)
            elsewhere[on] = False
            others = np.flatnonzero(elsewhere)  # never twice on a machine
            most = np.lexsort((rng.random(len(others)), -spare[others]))
            gained = others[most[:copies[job] - len(on)]]
            mine = np.concatenate([on, gained])
            used[mine] += 1
            placed_position.append(np.full(len(mine), job))
            placed_machine.append(mine)
            rest = position != job
            position, machine = position[rest], machine[rest]
            held = np.bincount(machine, minlength=machines)
    # the other kept copies stay while their machine has room, which ones at random
    if (held > cap - used).any():
        order = rng.permutation(len(machine))
        order = order[np.argsort(machine[order], kind="stable")]
        position, machine = position[order], machine[order]
        stays = _rank(machine) < (cap - used)[machine]
        position, machine = position[stays], machine[stays]
        held = np.bincount(machine, minlength=machines)
    used += held
    placed_position.append(position)
    placed_machine.append(machine)
    # the copies still wanted take the free room, at random; a job that gets several is one
    # with dedicated machines (per 1), so they are distinct
    placed = np.bincount(np.concatenate(placed_position), minlength=len(copies))
    needing = np.repeat(np.arange(len(copies)), copies - placed)
    room = rng.permutation(np.repeat(np.arange(machines), cap - used))
    placed_position.append(needing)
    placed_machine.append(room[:len(needing)])
    position, machine = np.concatenate(placed_position), np.concatenate(placed_machine)
    return position, machine, 1.0 / cap[machine]


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
        checkpointed work) and start the copies over, each job's best first; the work of the
        others, wasted."""
        if not len(self.job):
            return 0.0
        best = self.best() if best is None else best
        base[self.running] += best
        wasted = float(self.progress.sum() - best.sum())
        if self.most_copies > 1:
            order = np.lexsort((-self.progress, self.job))
            self.machine, self.share = self.machine[order], self.share[order]
        self.progress[:] = 0.0
        return wasted

    def layout(self) -> tuple[np.ndarray, np.ndarray]:
        """(position, machine) of every copy, grouped by job, the best first."""
        return self.running[self.job], self.machine

    def without(self, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The layout of the copies of the jobs `keep` (over the active positions) leaves,
        at their new positions, in the same order."""
        position, machine = self.layout()
        stays = keep[position]
        moved = np.cumsum(keep) - 1
        return moved[position[stays]], machine[stays]

    def check(self, machines: int) -> None:
        load = np.bincount(self.machine, weights=self.share, minlength=machines)
        if (load > 1 + 1e-9).any():
            raise AssertionError(f"machines {np.flatnonzero(load > 1 + 1e-9)} shared beyond 1")
        pairs = np.sort(self.running[self.job] * machines + self.machine)
        if (pairs[1:] == pairs[:-1]).any():
            raise AssertionError("a job has two copies on one machine")

    @classmethod
    def empty(cls) -> Entries:
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, none, none, np.empty(0), np.empty(0))

    @classmethod
    def of(cls, position: np.ndarray, machine: np.ndarray, share: np.ndarray) -> Entries:
        """The copies at (position, machine, share), grouped by job in position order (a
        job's copies keep their order)."""
        order = np.argsort(position, kind="stable")
        position, machine, share = position[order], machine[order], share[order]
        starts, per_job = _runs(position)
        running = position[starts]
        job = np.repeat(np.arange(len(running)), per_job)
        most = int(per_job.max()) if len(per_job) else 0
        return cls(running, starts, job, machine, share, np.zeros(len(job)), most)
