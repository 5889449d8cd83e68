"""The packing schedulers' interface, registry and the packing steps they share.

A scheduler is asked to decide whenever something changed: jobs arrived, tasks finished (their
machines have room again), or a time it asked to be woken at came (`wake_at`: the online LP
algorithms re-solve at growing intervals). It answers with the running tasks to stop (only if
`preemptive`; a stopped task keeps its progress and, if `migration`, may resume elsewhere) and
the tasks to start where. The simulator applies stops before starts and refuses anything that
breaks capacity or placement (state.PackingViolation).

`settings` names the instances a scheduler is for: `single` (every task has one machine, the
trace's own, and runs nowhere else: the preemptive per-machine algorithms) and `placement`
(each task has a few local machines and may run remotely, slower). The registered names:

- ordered, non-preemptive greedy packing (`ordered.py`): `fifo`, `wspt`, `lp-np-greedy`;
- the paper's non-preemptive algorithm, machine-interval mapping (`mapping.py`): `lp-np`;
- preemptive from an LP order (`ordered.py`): `lp-migrate` (placement sets, migration),
  `lp-single` (single-machine sets, the ordering LP);
- baselines (`baselines.py`): `psrs`, `tetris-p`, `tetris-np`, `jsq-mw`.

`PACKING_POLICIES.make(name, online=..., options=...)`: every scheduler takes both (defaults:
offline, `PackingOptions()`); `online` makes the LP ones re-solve as jobs arrive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from common.errors import InvalidInput
from common.policies.registry import Registry
from simulator.models.packing.model import Instance
from simulator.models.packing.state import EPS, PackingState, TaskKey

SETTINGS = ("single", "placement")


@dataclass(frozen=True, slots=True)
class PackingOptions:
    epsilon: float = 0.5  # the LPs' interval growth, 1 + epsilon
    resolve_first: float | None = None  # online: the first re-solve interval (None: 10 x the
    # mean inter-arrival time, the paper's choice)
    resolve_growth: float = 1.2  # online: each re-solve interval this much longer
    lp_time_limit: float | None = 20.0  # seconds per solve; a solve that runs out keeps
    # the previous order (counted as lp_timeouts)
    psrs_wait: float = 1.0  # PSRS: a wide task waits for room at most this x its duration
    tetris_remote_penalty: bool = True  # Tetris: divide a remote fit's score by the factor
    lp_np_lambda: float | None = None  # lp-np's slow motion: stretch by 1/this (None: drawn
    # with density 2λ on (0, 1] at each solve, the paper's)
    lp_np_shift_back: bool = True  # lp-np: a later task may start early if it delays none
    seed: int = 0  # the random draws of the schedulers that draw (lp-np's λ)

    def __post_init__(self) -> None:
        if self.lp_np_lambda is not None and not 0 < self.lp_np_lambda <= 1:
            raise InvalidInput("lp_np_lambda", f"must be in (0, 1], got {self.lp_np_lambda!r}")


DEFAULT_OPTIONS = PackingOptions()


@dataclass(slots=True)
class Decision:
    stops: list[TaskKey] = field(default_factory=list)
    starts: list[tuple[TaskKey, int]] = field(default_factory=list)


class PackingPolicy(Protocol):
    """Which tasks run where, decided when something changes."""

    name: str
    options: PackingOptions
    preemptive: bool
    migration: bool
    settings: tuple[str, ...]

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        """`arrived`: jobs released now; `freed`: machines where a task ended or stopped."""

    def wake_at(self) -> float | None:
        """When to be asked again even if nothing happens (None: no need)."""

    def figures(self) -> dict:
        """What it measured of itself: LP solves and their seconds."""


# `megha experiment packing` chooses among them; the GM's side of the family is its `wspt`
# job policy and per-task placement sets
PACKING_POLICIES: Registry[type[PackingPolicy]] = Registry("packing experiment",
                                                           argument="algorithm",
                                                           options=PackingOptions)


class TaskTable:
    """An instance's tasks as arrays, for the schedulers that score many tasks at once."""

    def __init__(self, instance: Instance) -> None:
        tasks = instance.tasks()
        self.keys: list[TaskKey] = [(task.job, task.index) for task in tasks]
        self.index = {key: k for k, key in enumerate(self.keys)}
        self.demand = np.array([task.demand for task in tasks], dtype=float)
        self.duration = np.array([task.duration for task in tasks], dtype=float)
        self.job = np.array([task.job for task in tasks], dtype=int)
        self.weight = np.array([instance.jobs[task.job].weight for task in tasks])
        self.remote = np.array([task.remote_factor or np.nan for task in tasks], dtype=float)
        self.local = np.zeros((len(tasks), instance.machines), dtype=bool)
        for k, task in enumerate(tasks):
            self.local[k, sorted(task.local)] = True
        capacity = np.array(instance.capacities, dtype=float).max(axis=0)
        # a task's size for ratios: its demand as shares of the largest machine, summed
        self.size = (self.demand / capacity).sum(axis=1)


def first_fit(state: PackingState, key: TaskKey, free: np.ndarray, machines: list[int],
              remote_ok: bool = True) -> int:
    """The first of `machines` with room for `key` in `free` (its placement set first, then
    remote ones if it may run remotely and `remote_ok`), or -1."""
    task = state.task(key)
    demand = task.demand
    remote: list[int] = []
    for m in machines:
        if m not in task.local:
            remote.append(m)
        elif np.all(free[m] + EPS >= demand):
            return m
    if task.remote_factor is None or not remote_ok:
        return -1
    for m in remote:
        if np.all(free[m] + EPS >= demand):
            return m
    return -1


def greedy_pack(state: PackingState, order, machines: list[int],
                local_only=frozenset()) -> list[tuple[TaskKey, int]]:
    """Non-preemptive greedy packing: each waiting task of `order` in turn goes to the first
    of `machines` with room (local before remote; only local for the tasks of `local_only`),
    skipping tasks that fit nowhere; stops early once no machine has room for the smallest
    waiting demand."""
    if not machines:
        return []
    free = state.free.copy()
    floor = np.min([state.task(key).demand for key in state.left], axis=0) if state.left else None
    open_machines = [m for m in machines if floor is not None and np.all(free[m] + EPS >= floor)]
    starts = []
    for key in order:
        if not open_machines:
            break
        m = first_fit(state, key, free, open_machines, key not in local_only)
        if m < 0:
            continue
        starts.append((key, m))
        free[m] -= state.task(key).demand
        if not np.all(free[m] + EPS >= floor):
            open_machines.remove(m)
    return starts


def repack_machine(state: PackingState, machine: int, order: list[TaskKey]) -> Decision:
    """Preemptive list scheduling on one machine: the tasks of `order` (all its unfinished
    ones, best first) take its capacity greedily from an empty machine; the running ones left
    out are stopped, the chosen waiting ones started."""
    free = np.array(state.instance.capacities[machine], dtype=float)
    chosen: set[TaskKey] = set()
    for key in order:
        demand = state.task(key).demand
        if np.all(free + EPS >= demand):
            free -= demand
            chosen.add(key)
    decision = Decision()
    for key in order:
        running = state.running.get(key)
        if running is not None and key not in chosen:
            decision.stops.append(key)
        elif running is None and key in chosen:
            decision.starts.append((key, machine))
    return decision


class PerMachine:
    """What the single-machine-set schedulers share: each machine's unfinished tasks, and
    re-deciding only the machines something happened on."""

    preemptive = True
    migration = False
    settings: tuple[str, ...] = ("single",)

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.online = online
        self.options = options
        self.tasks_of: dict[int, set[TaskKey]] = {}

    def track(self, state: PackingState, arrived: list[int]) -> set[int]:
        """Record the arrived jobs' tasks by machine; forget finished ones; the machines
        with new tasks."""
        touched = set()
        for job in arrived:
            for task in state.instance.jobs[job].tasks:
                machine = min(task.local)
                self.tasks_of.setdefault(machine, set()).add((job, task.index))
                touched.add(machine)
        return touched

    def unfinished(self, state: PackingState, machine: int) -> list[TaskKey]:
        keys = self.tasks_of.get(machine, set())
        done = {key for key in keys if key not in state.left and key not in state.running}
        keys -= done
        return sorted(keys)

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        decision = Decision()
        for machine in sorted(self.track(state, arrived) | freed | self.also_redo(state)):
            part = self.repack(state, machine, self.unfinished(state, machine))
            decision.stops.extend(part.stops)
            decision.starts.extend(part.starts)
        return decision

    def also_redo(self, state: PackingState) -> set[int]:
        """Machines to re-decide although nothing happened on them (a new order)."""
        return set()

    def repack(self, state: PackingState, machine: int, keys: list[TaskKey]) -> Decision:
        raise NotImplementedError

    def wake_at(self) -> float | None:
        return None

    def figures(self) -> dict:
        return {}
