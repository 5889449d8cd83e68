"""Schedulers that pack jobs in an order: FIFO, Smith's rule, and the LP relaxations' orders.

- `fifo`: by release time; greedy non-preemptive packing.
- `wspt`: Smith's rule, the largest weight per unit of volume first (volume: duration x demand
  as shares of a machine, summed over the job's tasks); greedy non-preemptive packing.
- `lp-np-greedy`: a heuristic on the paper's LP without migration (the paper's algorithm is
  `lp-np`, mapping.py): order jobs by their LP completion times; pack greedily in that order,
  and where the LP ran a task mostly (half or more) on its local machines, keep it waiting for
  one of them until the end of the interval by which the LP had half of it done, then let it
  go remote. It keeps the LP's order and its choice of local or remote, without the paper's
  machine-interval matching and slow motion.
- `lp-migrate`: the preemptive algorithm with migration: the interval LP with migration gives
  the order; at every change the tasks are packed afresh in that order onto any machine of
  their placement sets (or remote), a running task keeping its machine when it still fits
  there, so tasks move only when the order says so.
- `lp-single`: single-machine placement sets, preemptive: the pairwise ordering LP gives the
  order and each machine list-schedules its own tasks by it.

Within a job, longer tasks go first (the job ends with its last task). Online (`online=True`),
the LP ones re-solve for the jobs present at growing intervals (first `resolve_first`, then
each `resolve_growth` times longer), as the paper's online versions; a job that arrives between
two solves waits behind the solved ones, by Smith's rule among its kind, until the next.
"""

from __future__ import annotations

import math

import numpy as np
from sortedcontainers import SortedList

import simulator.models.packing.lp as lp
from simulator.models.packing.model import Instance
from simulator.models.packing.schedulers import (
    DEFAULT_OPTIONS,
    PACKING_POLICIES,
    SETTINGS,
    Decision,
    PackingOptions,
    PerMachine,
    TaskTable,
    greedy_pack,
    repack_machine,
)
from simulator.models.packing.state import EPS, PackingState, TaskKey


def smith_ratio(instance: Instance, job: int) -> float:
    """Volume per unit of weight: lower goes first."""
    record = instance.jobs[job]
    largest = tuple(np.array(instance.capacities).max(axis=0))
    return record.local_volume(largest) / record.weight


class Resolver:
    """When an LP order is solved again, and the solves' figures."""

    def __init__(self, online: bool, options: PackingOptions) -> None:
        self.online = online
        self.options = options
        self.next: float | None = None
        self.count = 0
        self.solves: list[float] = []  # seconds per solve
        self.sizes: list[int] = []  # jobs per solve
        self.reduced: str | None = None
        self.timeouts = 0

    def due(self, state: PackingState) -> bool:
        if not state.present:
            return False
        if self.count == 0:
            return True
        return self.online and self.next is not None and state.now + EPS >= self.next

    def solved(self, state: PackingState, solution: lp.LPSolution | None) -> None:
        """A solve ended (None: it ran out of time); when the next is due."""
        first = self.options.resolve_first or _ten_interarrivals(state.instance)
        self.next = state.now + first * self.options.resolve_growth ** self.count
        self.count += 1
        if solution is None:
            self.timeouts += 1
            return
        self.solves.append(solution.seconds)
        self.sizes.append(len(solution.completion))
        self.reduced = self.reduced or solution.reduced

    def remaining(self, state: PackingState) -> dict[TaskKey, float]:
        shares = dict(state.left)
        for key, running in state.running.items():
            shares[key] = running.share_left(state.now)
        return shares

    def figures(self) -> dict:
        return {"lp_solves": self.count, "lp_seconds": round(sum(self.solves), 3),
                "lp_max_seconds": round(max(self.solves, default=0.0), 3),
                "lp_max_jobs": max(self.sizes, default=0), "lp_timeouts": self.timeouts} | (
            {"lp_reduced": self.reduced} if self.reduced else {})


def _ten_interarrivals(instance: Instance) -> float:
    releases = sorted(job.release for job in instance.jobs)
    span = releases[-1] - releases[0]
    if span <= 0:
        return math.inf  # offline: every job is there at once
    return 10 * span / max(1, len(releases) - 1)


class OrderedGreedy:
    """Non-preemptive greedy packing in an order of jobs (`job_key`, lower first)."""

    preemptive = False
    migration = False
    settings = SETTINGS

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.online = online
        self.options = options
        self.waiting: SortedList = SortedList()
        self.entry: dict[TaskKey, tuple] = {}
        self.keys: dict[int, tuple] = {}

    def job_key(self, state: PackingState, job: int) -> tuple:
        raise NotImplementedError

    def reorder(self, state: PackingState) -> bool:
        """Refresh the job keys if a new order is due; True when they changed."""
        return False

    def _insert(self, state: PackingState, key: TaskKey) -> None:
        entry = (self.keys[key[0]], -state.task(key).duration, key)
        self.entry[key] = entry
        self.waiting.add(entry)

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        for job in arrived:
            self.keys[job] = self.job_key(state, job)
        if self.reorder(state):
            self.waiting = SortedList()
            self.entry.clear()
            for key in state.left:
                self._insert(state, key)
        else:
            for job in arrived:
                for task in state.instance.jobs[job].tasks:
                    self._insert(state, (job, task.index))
        widened = self.rescan(state)
        machines = list(range(state.instance.machines)) if arrived or widened else sorted(freed)
        starts = greedy_pack(state, (entry[2] for entry in self.waiting), machines,
                             self.local_only(state))
        for key, _ in starts:
            self.waiting.remove(self.entry.pop(key))
        return Decision(starts=starts)

    def rescan(self, state: PackingState) -> bool:
        """Whether every machine must be looked at although none freed (a task's choices
        widened)."""
        return False

    def local_only(self, state: PackingState) -> frozenset[TaskKey] | set[TaskKey]:
        """Waiting tasks that may not take a remote machine now."""
        return frozenset()

    def wake_at(self) -> float | None:
        return None

    def figures(self) -> dict:
        return {}


@PACKING_POLICIES.register("fifo")
class Fifo(OrderedGreedy):
    def job_key(self, state: PackingState, job: int) -> tuple:
        return (state.instance.jobs[job].release, job)


@PACKING_POLICIES.register("wspt")
class Wspt(OrderedGreedy):
    def job_key(self, state: PackingState, job: int) -> tuple:
        return (smith_ratio(state.instance, job), job)


class LPOrder:
    """The job keys an LP gives: solved jobs by LP completion, the others after them."""

    def __init__(self, online: bool, options: PackingOptions, migration: bool) -> None:
        self.resolver = Resolver(online, options)
        self.migration = migration
        self.completion: dict[int, float] = {}
        self.solution: lp.LPSolution | None = None

    def key(self, state: PackingState, job: int) -> tuple:
        if job in self.completion:
            return (0, self.completion[job], job)
        return (1, smith_ratio(state.instance, job), job)

    def refresh(self, state: PackingState) -> bool:
        if not self.resolver.due(state):
            return False
        try:
            solution = self.solve(state)
        except lp.LPTimeout:
            self.resolver.solved(state, None)  # keep the order we have
            return False
        self.completion = dict(solution.completion)
        self.solution = solution
        self.resolver.solved(state, solution)
        return True

    def solve(self, state: PackingState) -> lp.LPSolution:
        return lp.interval_lp(state.instance, migration=self.migration,
                              jobs=sorted(state.present),
                              remaining=self.resolver.remaining(state), now=state.now,
                              epsilon=self.resolver.options.epsilon,
                              time_limit=self.resolver.options.lp_time_limit)


@PACKING_POLICIES.register("lp-np-greedy")
class LPNonPreemptiveGreedy(OrderedGreedy):
    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        super().__init__(online, options)
        self.lp = LPOrder(online, options, migration=False)
        # tasks the LP ran mostly on their local machines: until when they wait for one
        self.local_until: dict[TaskKey, float] = {}

    def job_key(self, state: PackingState, job: int) -> tuple:
        return self.lp.key(state, job)

    def reorder(self, state: PackingState) -> bool:
        if not self.lp.refresh(state):
            return False
        self.keys = {job: self.lp.key(state, job) for job in state.present}
        solution = self.lp.solution
        self.local_until = {
            key: solution.half_done(key) for key in solution.done
            if key in state.left and sum(share for m, share in solution.mass(key).items()
                                         if m in state.task(key).local) >= 0.5}
        return True

    def rescan(self, state: PackingState) -> bool:
        """A task whose LP time for a local machine passed may now go remote: look at every
        machine."""
        expired = [key for key, until in self.local_until.items()
                   if until <= state.now + EPS or key not in state.left]
        for key in expired:
            del self.local_until[key]
        return any(key in state.left for key in expired)

    def local_only(self, state: PackingState) -> set[TaskKey]:
        return set(self.local_until)

    def wake_at(self) -> float | None:
        times = [self.lp.resolver.next] if self.online and self.lp.resolver.next else []
        if self.local_until:
            times.append(min(self.local_until.values()))
        return min(times, default=None)

    def figures(self) -> dict:
        return self.lp.resolver.figures()


@PACKING_POLICIES.register("lp-migrate")
class LPMigrate:
    preemptive = True
    migration = True
    settings = ("placement",)

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.online = online
        self.options = options
        self.lp = LPOrder(online, options, migration=True)
        self.table: TaskTable | None = None
        self.unfinished: SortedList = SortedList()
        self.migrations = 0

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        if self.table is None:
            self.table = TaskTable(state.instance)
        if self.lp.refresh(state) or arrived:
            self.unfinished = SortedList(
                (self.lp.key(state, key[0]), -state.task(key).duration, key)
                for key in (*state.left, *state.running))
        table = self.table
        free = np.array(state.instance.capacities, dtype=float)
        floor = table.demand.min(axis=0)
        kept: dict[TaskKey, int] = {}
        done = []
        for entry in self.unfinished:
            key = entry[2]
            if key not in state.left and key not in state.running:
                done.append(entry)
                continue
            if not np.any(np.all(free + EPS >= floor, axis=1)):
                break
            k = table.index[key]
            demand = table.demand[k]
            running = state.running.get(key)
            if running is not None and np.all(free[running.machine] + EPS >= demand):
                machine = running.machine
            else:
                fits = np.all(free + EPS >= demand, axis=1)
                local = np.flatnonzero(fits & table.local[k])
                if local.size:
                    machine = int(local[0])
                elif not np.isnan(table.remote[k]) and fits.any():
                    machine = int(np.flatnonzero(fits)[0])
                else:
                    continue
            kept[key] = machine
            free[machine] -= demand
        for entry in done:
            self.unfinished.remove(entry)
        decision = Decision()
        for key, running in state.running.items():
            if kept.get(key) != running.machine:
                decision.stops.append(key)
                if key in kept:
                    self.migrations += 1
        decision.starts = [(key, m) for key, m in kept.items()
                           if key not in state.running or state.running[key].machine != m]
        return decision

    def wake_at(self) -> float | None:
        return self.lp.resolver.next if self.online else None

    def figures(self) -> dict:
        return self.lp.resolver.figures() | {"migrations": self.migrations}


class OrderingLP(LPOrder):
    def solve(self, state: PackingState) -> lp.LPSolution:
        return lp.ordering_lp(state.instance, jobs=sorted(state.present),
                              remaining=self.resolver.remaining(state), now=state.now,
                              time_limit=self.resolver.options.lp_time_limit)


@PACKING_POLICIES.register("lp-single")
class LPSingle(PerMachine):
    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        super().__init__(online, options)
        self.lp = OrderingLP(online, options, migration=False)
        self.redo_all = False

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        self.redo_all = self.lp.refresh(state)
        return super().decide(state, arrived, freed)

    def also_redo(self, state: PackingState) -> set[int]:
        return set(self.tasks_of) if self.redo_all else set()

    def repack(self, state: PackingState, machine: int, keys: list[TaskKey]) -> Decision:
        order = sorted(keys, key=lambda key: (self.lp.key(state, key[0]),
                                              -state.task(key).duration, key))
        return repack_machine(state, machine, order)

    def wake_at(self) -> float | None:
        return self.lp.resolver.next if self.online else None

    def figures(self) -> dict:
        return self.lp.resolver.figures()
