"""`lp-np`: the paper's non-preemptive algorithm (its section 4.2), step by step.

1. **LP.** Solve the interval LP without migration (the paper's LP2): per task, machine and
   interval, the share of the task finished there in that interval.
2. **Slow motion.** Draw λ in (0, 1] with density 2λ (or take `lp_np_lambda`) and stretch the
   solution by 1/λ: each task's shares on a machine come 1/λ times as fast, capped by its
   total share there (the paper's equation 15), so a task leans to earlier intervals.
3. **Machine-interval mapping.** Per machine, its tasks by decreasing volume fill copies of
   each interval, each copy up to a weight of 1, with their stretched shares (the paper's
   Figure 1). The edges are a fractional matching that covers every task, so an integral one
   on the same edges exists (its Lemma 4.6). The paper takes any; we take the one with the
   earliest intervals (a minimum-weight full matching, weight = interval + 1).
4. **Greedy packing per machine, interval by interval.** A machine starts the tasks mapped to
   its earliest unfinished interval as they fit (in LP order, longer first within a job); a
   task of a later interval starts only once every task of the earlier ones has started.
   Durations are known, so at each decision this is a timetable (`_greedy`). The paper also
   "shifts back" tasks as far as capacity allows: a later task starts now instead when the
   machine has room for it over its whole run beside every run of the timetable, so it
   delays none (`_Timetable`, `lp_np_shift_back`); a shift to a later instant is taken at
   that instant's decision.

Online, as the paper's online version: the LP is solved again at growing intervals for the jobs
present, running tasks run on, and every waiting task is mapped afresh. A job that arrives
between two solves is mapped at the next; meanwhile its tasks are a last interval after the
mapped ones on each machine they may use (local machines first), by Smith's rule.

The LP is solved with every column a real machine (a mapped task needs one): up to
`EXACT_COLUMNS` exactly, above that each task keeps its local machines and a few remote ones
drawn at random, as the paper did (its LP2 for the algorithm sampled remote machines too).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Mapping
from itertools import groupby

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import min_weight_full_bipartite_matching
from sortedcontainers import SortedList

import simulator.models.packing.lp as lp
from simulator.models.packing.ordered import LPOrder, smith_ratio
from simulator.models.packing.schedulers import (
    DEFAULT_OPTIONS,
    PACKING_POLICIES,
    SETTINGS,
    Decision,
    PackingOptions,
)
from simulator.models.packing.state import EPS, PackingState, TaskKey

EXACT_COLUMNS = 4_000  # 370 tasks x 10 machines solve in about 3 s here
TINY = 1e-7  # an LP share below this is solver noise, not an edge


def slow_motion(done: np.ndarray, lam: float) -> np.ndarray:
    """Per-interval shares after stretching by 1/λ, from the cumulative shares `done` (a task
    on one machine): z'_l = z_l / λ until the total share there is used up (equation 15)."""
    return np.diff(np.minimum(done / lam, done[-1]), prepend=0.0)


def map_tasks(shares: Mapping[TaskKey, Mapping[int, np.ndarray]],
              volume: Mapping[tuple[TaskKey, int], float]) -> dict[TaskKey, tuple[int, int]]:
    """Each task's (machine, interval), the paper's substep 3.1. `shares[task][machine]`: its
    per-interval shares there (after slow motion, summing to 1 over machines and intervals);
    `volume[(task, machine)]`: its duration there x its demand."""
    keys = sorted(shares)
    row = {key: r for r, key in enumerate(keys)}
    copies: list[tuple[int, int]] = []  # (machine, interval) of each copy node
    rows: list[int] = []
    columns: list[int] = []
    for machine in sorted({m for per in shares.values() for m in per}):
        on = [key for key in keys if shares[key].get(machine, np.zeros(1)).sum() > TINY]
        on.sort(key=lambda key: (-volume[(key, machine)], key))
        filling: dict[int, tuple[int, float]] = {}  # interval -> (its open copy, weight)
        for key in on:
            for level in np.flatnonzero(shares[key][machine] > TINY):
                left = float(shares[key][machine][level])
                while left > TINY:
                    copy, weight = filling.get(level, (-1, 1.0))
                    if weight >= 1.0 - TINY:  # full: open the next copy of this interval
                        copy, weight = len(copies), 0.0
                        copies.append((machine, int(level)))
                    take = min(left, 1.0 - weight)
                    rows.append(row[key])
                    columns.append(copy)
                    filling[level] = (copy, weight + take)
                    left -= take
    weights = [copies[c][1] + 1.0 for c in columns]  # the earliest intervals win ties
    graph = sparse.csr_matrix((weights, (rows, columns)), shape=(len(keys), len(copies)))
    try:
        matched_rows, matched_copies = min_weight_full_bipartite_matching(graph)
    except ValueError as failed:  # Lemma 4.6 says it cannot: shares that do not sum to 1
        raise RuntimeError(f"no machine-interval matching covers all {len(keys)} tasks") \
            from failed
    return {keys[r]: copies[c] for r, c in zip(matched_rows, matched_copies, strict=True)}


class NoMigrationLP(LPOrder):
    """LP2 over real machines only, so every share it gives names a machine."""

    def __init__(self, online: bool, options: PackingOptions) -> None:
        super().__init__(online, options, migration=False)

    def solve(self, state: PackingState) -> lp.LPSolution:
        return lp.interval_lp(state.instance, migration=False, jobs=sorted(state.present),
                              remaining=self.resolver.remaining(state), now=state.now,
                              epsilon=self.resolver.options.epsilon,
                              exact_columns=EXACT_COLUMNS, sample_remote=True,
                              time_limit=self.resolver.options.lp_time_limit)


@PACKING_POLICIES.register("lp-np")
class MachineIntervalPacking:
    preemptive = False
    migration = False
    settings = SETTINGS

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.online = online
        self.options = options
        self.lp = NoMigrationLP(online, options)
        self.rng = random.Random(options.seed)
        # machine -> its mapped, unstarted tasks: (interval, order, task), in packing order
        self.plan: dict[int, list[tuple[int, tuple, TaskKey]]] = {}
        self.unmapped: SortedList = SortedList()  # (Smith's key, task) of jobs since the solve
        self.lambdas: list[float] = []
        self.mapped_remote = 0  # mappings off the task's placement set, over all solves
        self.shifted_back = 0
        self.started_unmapped = 0  # tasks started before any solve mapped them (online)

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        replanned = self.lp.refresh(state)
        if replanned:
            self.replan(state)
        else:
            for job in arrived:
                ratio = smith_ratio(state.instance, job)
                self.unmapped.update(((ratio, -task.duration), (job, task.index))
                                     for task in state.instance.jobs[job].tasks)
        everywhere = replanned or arrived
        machines = range(state.instance.machines) if everywhere else sorted(freed)
        free = state.free.copy()
        ends: dict[int, list[tuple[float, np.ndarray]]] = {m: [] for m in machines}
        for key, running in state.running.items():
            if running.machine in ends:
                ends[running.machine].append((running.end(), np.asarray(state.task(key).demand)))
        decision = Decision()
        for machine in machines:
            local = [key for _, key in self.unmapped if machine in state.task(key).local
                     and _fits(state, key, machine)]
            decision.starts.extend(self.pack(state, machine, free, ends[machine], local))
        # tasks of jobs since the solve go remote only once their local machines had their turn
        remote = [key for _, key in self.unmapped if state.task(key).remote_factor is not None]
        for machine in machines if remote else ():
            taken = dict(decision.starts)
            here = [key for key in remote if machine not in state.task(key).local
                    and key not in taken and _fits(state, key, machine)]
            if here:
                decision.starts.extend(self.pack(state, machine, free, ends[machine], here))
        return decision

    def replan(self, state: PackingState) -> None:
        """Slow motion and the mapping on the new solution, for every waiting task."""
        solution = self.lp.solution
        lam = self.options.lp_np_lambda or math.sqrt(1.0 - self.rng.random())  # density 2λ
        self.lambdas.append(lam)
        capacity = np.array(state.instance.capacities, dtype=float)
        shares, volume = {}, {}
        for key in state.left:
            shares[key] = {m: slow_motion(done, lam) for m, done in solution.done[key].items()}
            task = state.task(key)
            for m in shares[key]:  # one resource in the paper; else the bottleneck's share
                volume[(key, m)] = task.duration_on(m) * float(np.max(task.demand / capacity[m]))
        self.plan = {}
        for key, (machine, level) in map_tasks(shares, volume).items():
            order = (solution.completion[key[0]], -state.task(key).duration, key)
            self.plan.setdefault(machine, []).append((level, order, key))
            self.mapped_remote += machine not in state.task(key).local
        for entries in self.plan.values():
            entries.sort()
        self.unmapped = SortedList()

    def pack(self, state: PackingState, machine: int, free: np.ndarray,
             ends: list[tuple[float, np.ndarray]],
             extra: list[TaskKey]) -> list[tuple[TaskKey, int]]:
        """What the machine starts now: the greedy schedule of its mapped tasks, interval by
        interval, shifted back; then `extra` (tasks of jobs since the solve, a last interval)
        where they disturb nothing planned. `free` and `ends` (its running tasks' ends and
        demands) are kept up to date."""
        pending = self.plan.get(machine, [])
        levels = [[entry[2] for entry in group]
                  for _, group in groupby(pending, key=lambda entry: entry[0])]
        greedy = _greedy(state, machine, free[machine], ends, levels)
        table = _Timetable(state, machine, ends, greedy)
        if self.options.lp_np_shift_back:
            for key in sorted(greedy, key=lambda key: (greedy[key], key)):
                if greedy[key] > state.now + EPS and table.room_now(key):
                    table.move_now(key)
                    self.shifted_back += 1
        now = [key for key in greedy if table.starts_now(key)]
        for key in now:
            self._start(state, machine, key, free, ends)
        if self.options.lp_np_shift_back or len(now) == len(greedy):
            for key in extra:
                if np.all(free[machine] + EPS >= state.task(key).demand) and table.room_now(key):
                    table.add_now(key)
                    self._start(state, machine, key, free, ends)
                    now.append(key)
                    self.started_unmapped += 1
        taken = set(now)
        self.plan[machine] = [entry for entry in pending if entry[2] not in taken]
        for entry in [entry for entry in self.unmapped if entry[1] in taken]:
            self.unmapped.remove(entry)
        return [(key, machine) for key in now]

    @staticmethod
    def _start(state: PackingState, machine: int, key: TaskKey, free: np.ndarray,
               ends: list[tuple[float, np.ndarray]]) -> None:
        demand = np.asarray(state.task(key).demand)
        free[machine] -= demand
        ends.append((state.now + state.task(key).duration_on(machine), demand))

    def wake_at(self) -> float | None:
        return self.lp.resolver.next if self.online else None

    def figures(self) -> dict:
        return self.lp.resolver.figures() | {
            "slow_motion_lambda": round(float(np.mean(self.lambdas)), 3) if self.lambdas
            else None, "mapped_remote": self.mapped_remote, "shifted_back": self.shifted_back,
            "started_unmapped": self.started_unmapped}


def _fits(state: PackingState, key: TaskKey, machine: int) -> bool:
    """Whether the task fits the machine when it is empty."""
    return all(d <= c for d, c in zip(state.task(key).demand,
                                      state.instance.capacities[machine], strict=True))


def _greedy(state: PackingState, machine: int, free: np.ndarray,
            ends: list[tuple[float, np.ndarray]], levels: list[list[TaskKey]]) -> dict:
    """The paper's greedy packing of one machine from now on, as a timetable (task -> start):
    the tasks of each level (interval) start in order as soon as they fit; a level's only
    once every task of the earlier ones has started. Durations are known, so the timetable
    is exact until the next solve."""
    now, room = state.now, [float(r) for r in free]
    running = [(end, k, tuple(demand)) for k, (end, demand) in enumerate(ends)]
    heapq.heapify(running)
    start: dict[TaskKey, float] = {}
    for level in levels:
        waiting = [(key, state.task(key).demand) for key in level]
        while waiting:
            left = []
            for key, demand in waiting:
                if all(r + EPS >= d for r, d in zip(room, demand, strict=True)):
                    start[key] = now
                    room = [r - d for r, d in zip(room, demand, strict=True)]
                    heapq.heappush(running, (now + state.task(key).duration_on(machine),
                                             len(start) + len(ends), demand))
                else:
                    left.append((key, demand))
            waiting = left
            if waiting:  # nothing more fits until the next task ends
                now, _, demand = heapq.heappop(running)
                room = [r + d for r, d in zip(room, demand, strict=True)]
    return start


class _Timetable:
    """One machine's runs from now on, running and planned: the paper's shift back moves a
    task to now only where the machine has room for it over its whole run beside every other
    run where the timetable puts it, so it delays none of them. (Shifts to a later instant
    happen at that instant's decision, on its own timetable.)"""

    def __init__(self, state: PackingState, machine: int, ends: list[tuple[float, np.ndarray]],
                 planned: dict[TaskKey, float]) -> None:
        self.state, self.machine = state, machine
        self.capacity = np.asarray(state.instance.capacities[machine], dtype=float)
        self.row = {key: k for k, key in enumerate(planned)}
        self.start = np.array([*planned.values(), *[state.now] * len(ends)], dtype=float)
        self.end = np.array([start + state.task(key).duration_on(machine)
                             for key, start in planned.items()] + [end for end, _ in ends],
                            dtype=float)
        self.demand = np.array([state.task(key).demand for key in planned]
                               + [demand for _, demand in ends],
                               dtype=float).reshape(len(self.start), len(self.capacity))

    def starts_now(self, key: TaskKey) -> bool:
        return bool(self.start[self.row[key]] <= self.state.now + EPS)

    def room_now(self, key: TaskKey) -> bool:
        """Whether `key` fits from now over its whole run beside every other run."""
        now = self.state.now
        finish = now + self.state.task(key).duration_on(self.machine)
        others = np.ones(len(self.start), dtype=bool)
        if key in self.row:
            others[self.row[key]] = False
        start, end = self.start[others], self.end[others]
        points = np.concatenate(([now], start[(start > now) & (start < finish - EPS)]))
        active = (start[None, :] <= points[:, None] + EPS) & (end[None, :] > points[:, None] + EPS)
        need = np.asarray(self.state.task(key).demand, dtype=float)
        return bool(np.all(active @ self.demand[others] + need <= self.capacity + EPS))

    def move_now(self, key: TaskKey) -> None:
        k = self.row[key]
        self.start[k] = self.state.now
        self.end[k] = self.state.now + self.state.task(key).duration_on(self.machine)

    def add_now(self, key: TaskKey) -> None:
        self.row[key] = len(self.start)
        self.start = np.append(self.start, self.state.now)
        self.end = np.append(self.end, self.state.now
                             + self.state.task(key).duration_on(self.machine))
        self.demand = np.vstack([self.demand, self.state.task(key).demand])
