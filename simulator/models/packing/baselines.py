"""The packing paper's baselines, as it describes them for weighted jobs and placement sets.

- `psrs` (preemptive Smith-ratio scheduling, for single-machine sets): each machine orders its
  tasks by the modified Smith ratio, weight / (size x remaining duration), largest first, and
  starts them in that order as room allows; a task is never preempted for a narrow one
  (demand <= half the machine). A *wide* task that does not fit waits for room if the running
  tasks free it within `psrs_wait` x its own remaining duration (nothing behind it starts
  meanwhile); otherwise it preempts running tasks of lower ratio, lowest first, until it fits.
- `tetris-p`, `tetris-np` (Tetris with weights and a remote penalty): a task's score on a
  machine is its demand's alignment with the machine's free resources (dot product, as shares
  of capacity) — divided by the remote factor off its placement set, the variant the paper
  found slightly better than Tetris's 10% — plus ε x its job's weight over its remaining volume;
  ε makes the two terms' means equal among the candidates. Each machine with room takes the
  best-scoring task that fits, again and again. `tetris-p` (single-machine sets) redoes a
  machine's whole packing, preempting, whenever something changes on it; `tetris-np` never
  stops a running task.
- `jsq-mw` (join the shortest queue, MaxWeight, with greedy packing; non-preemptive): a task
  joins the shortest of its local machines' queues, or the one remote queue every machine
  serves when that is shorter counting its service rate (remote queue length x remote factor /
  machines). A machine with room serves its local queue if its length is at least the remote
  queue's divided by the remote factor (MaxWeight with local rate 1, remote 1/factor), else the
  remote queue, taking the first task of that queue that fits, then the other queue. Weights
  are not used: JSQ-MW was designed for unweighted delay.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from simulator.models.packing.schedulers import (
    DEFAULT_OPTIONS,
    PACKING_POLICIES,
    Decision,
    PackingOptions,
    PerMachine,
    TaskTable,
)
from simulator.models.packing.state import EPS, PackingState, TaskKey


def _fits(free: np.ndarray, demand) -> bool:
    return bool(np.all(free + EPS >= demand))


@PACKING_POLICIES.register("psrs")
class Psrs(PerMachine):
    def ratio(self, state: PackingState, key: TaskKey, capacity: np.ndarray) -> float:
        task = state.task(key)
        size = max(d / c for d, c in zip(task.demand, capacity, strict=True)) or EPS
        return state.instance.jobs[key[0]].weight / (size * task.duration * state.share(key))

    def repack(self, state: PackingState, machine: int, keys: list[TaskKey]) -> Decision:
        capacity = np.array(state.instance.capacities[machine], dtype=float)
        ratio = {key: self.ratio(state, key, capacity) for key in keys}
        order = sorted(keys, key=lambda key: (-ratio[key], key))
        free = state.free[machine].copy()
        running = [key for key in keys if key in state.running]
        decision = Decision()
        for key in order:
            if key in state.running:
                continue
            task = state.task(key)
            if _fits(free, task.demand):
                decision.starts.append((key, machine))
                free -= task.demand
                continue
            if max(d / c for d, c in zip(task.demand, capacity, strict=True)) <= 0.5:
                continue  # a narrow task waits its turn
            wait = self._wait_for_room(state, running, free, task.demand)
            if wait <= self.options.psrs_wait * task.duration * state.share(key):
                break  # the wide task waits; nothing behind it starts
            for victim in sorted(running, key=lambda other: ratio[other]):
                if ratio[victim] >= ratio[key] or _fits(free, task.demand):
                    break
                running.remove(victim)
                decision.stops.append(victim)
                free += state.task(victim).demand
            if not _fits(free, task.demand):
                break
            decision.starts.append((key, machine))
            free -= task.demand
        return decision

    @staticmethod
    def _wait_for_room(state: PackingState, running: list[TaskKey], free: np.ndarray,
                       demand) -> float:
        room = free.copy()
        for key in sorted(running, key=lambda key: state.running[key].end()):
            room += state.task(key).demand
            if _fits(room, demand):
                return state.running[key].end() - state.now
        return math.inf


class TetrisScore:
    """Alignment plus ε x weight / remaining job volume."""

    def __init__(self, state: PackingState, table: TaskTable) -> None:
        self.table = table
        volume: dict[int, float] = {}
        for key, share in state.left.items():
            k = table.index[key]
            volume[key[0]] = volume.get(key[0], 0.0) + share * table.duration[k] * table.size[k]
        for key, running in state.running.items():
            k = table.index[key]
            volume[key[0]] = (volume.get(key[0], 0.0)
                              + running.share_left(state.now) * table.duration[k] * table.size[k])
        self.job_term = {job: state.instance.jobs[job].weight / max(v, EPS)
                         for job, v in volume.items()}

    def scores(self, ks: np.ndarray, free: np.ndarray, capacity: np.ndarray,
               machine: int, penalty: bool) -> np.ndarray:
        table = self.table
        demand = table.demand[ks] / capacity
        align = demand @ (free / capacity)
        if penalty:
            remote = ~table.local[ks, machine]
            align = np.where(remote, align / np.nan_to_num(table.remote[ks], nan=1.0), align)
        job = np.array([self.job_term[j] for j in table.job[ks]])
        scale = align.mean() / job.mean() if job.mean() > 0 else 0.0
        return align + scale * job


@PACKING_POLICIES.register("tetris-p")
class TetrisPreemptive(PerMachine):
    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        super().__init__(online, options)
        self.table: TaskTable | None = None
        self.score: TetrisScore | None = None

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        self.table = self.table or TaskTable(state.instance)
        self.score = TetrisScore(state, self.table)
        return super().decide(state, arrived, freed)

    def repack(self, state: PackingState, machine: int, keys: list[TaskKey]) -> Decision:
        capacity = np.array(state.instance.capacities[machine], dtype=float)
        free = capacity.copy()
        left = np.array([self.table.index[key] for key in keys], dtype=int)
        chosen: set[TaskKey] = set()
        while left.size:
            fits = np.all(self.table.demand[left] <= free + EPS, axis=1)
            if not fits.any():
                break
            candidates = left[fits]
            best = candidates[int(np.argmax(self.score.scores(candidates, free, capacity,
                                                              machine, False)))]
            chosen.add(self.table.keys[best])
            free -= self.table.demand[best]
            left = left[left != best]
        decision = Decision()
        for key in keys:
            if key in state.running and key not in chosen:
                decision.stops.append(key)
            elif key not in state.running and key in chosen:
                decision.starts.append((key, machine))
        return decision


@PACKING_POLICIES.register("tetris-np")
class TetrisNonPreemptive:
    preemptive = False
    migration = False
    settings = ("single", "placement")

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.options = options
        self.table: TaskTable | None = None

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        self.table = self.table or TaskTable(state.instance)
        table = self.table
        if not state.left:
            return Decision()
        score = TetrisScore(state, table)
        waiting = np.array([table.index[key] for key in state.left], dtype=int)
        free_all = state.free.copy()
        machines = range(state.instance.machines) if arrived else sorted(freed)
        decision = Decision()
        for machine in machines:
            capacity = np.array(state.instance.capacities[machine], dtype=float)
            allowed = table.local[waiting, machine] | ~np.isnan(table.remote[waiting])
            while waiting.size:
                fits = allowed & np.all(table.demand[waiting] <= free_all[machine] + EPS,
                                        axis=1)
                if not fits.any():
                    break
                candidates = waiting[fits]
                best = candidates[int(np.argmax(score.scores(
                    candidates, free_all[machine], capacity, machine,
                    self.options.tetris_remote_penalty)))]
                decision.starts.append((table.keys[best], machine))
                free_all[machine] -= table.demand[best]
                keep = waiting != best
                waiting, allowed = waiting[keep], allowed[keep]
        return decision

    def wake_at(self) -> float | None:
        return None

    def figures(self) -> dict:
        return {}


@PACKING_POLICIES.register("jsq-mw")
class JsqMaxWeight:
    preemptive = False
    migration = False
    settings = ("single", "placement")

    def __init__(self, online: bool = False, options: PackingOptions = DEFAULT_OPTIONS) -> None:
        self.options = options  # none of them reads it: JSQ-MaxWeight has no parameter
        self.local: dict[int, deque[TaskKey]] = {}
        self.remote: deque[TaskKey] = deque()
        self.factor = 1.0

    def _route(self, state: PackingState, key: TaskKey) -> None:
        task = state.task(key)
        best = min(sorted(task.local), key=lambda m: len(self.local.get(m, ())))
        local_length = len(self.local.get(best, ()))
        if task.remote_factor is not None:
            self.factor = task.remote_factor
            remote_length = len(self.remote) * task.remote_factor / state.instance.machines
            if remote_length < local_length:
                self.remote.append(key)
                return
        self.local.setdefault(best, deque()).append(key)

    @staticmethod
    def _take(state: PackingState, queue: deque[TaskKey], free: np.ndarray) -> TaskKey | None:
        for key in queue:
            if _fits(free, state.task(key).demand):
                queue.remove(key)
                return key
        return None

    def decide(self, state: PackingState, arrived: list[int], freed: set[int]) -> Decision:
        for job in arrived:
            for task in state.instance.jobs[job].tasks:
                self._route(state, (job, task.index))
        machines = range(state.instance.machines) if arrived else sorted(freed)
        free = state.free.copy()
        decision = Decision()
        for machine in machines:
            local = self.local.get(machine, deque())
            while True:
                serve_local = len(local) >= len(self.remote) / self.factor
                first, second = (local, self.remote) if serve_local else (self.remote, local)
                key = self._take(state, first, free[machine])
                if key is None:
                    key = self._take(state, second, free[machine])
                if key is None:
                    break
                decision.starts.append((key, machine))
                free[machine] -= state.task(key).demand
        return decision

    def wake_at(self) -> float | None:
        return None

    def figures(self) -> dict:
        return {}
