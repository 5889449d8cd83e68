"""What a packing scheduler sees and changes: free capacity per machine, the jobs present, each
task's remaining share and where it runs.

The simulator owns the clock and applies a scheduler's decisions through `start` and `stop`,
which refuse what the model forbids (`PackingViolation`): a machine over capacity, a task on a
machine outside its placement set with no remote runs allowed, a task moved to another machine
by a scheduler that does not migrate. So no schedule the simulator reports broke a constraint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.models.packing.model import Instance, Task

TaskKey = tuple[int, int]  # (job, index)
EPS = 1e-9


class PackingViolation(AssertionError):
    """A decision broke the model's constraints: a scheduler bug, never a user error."""


@dataclass(slots=True)
class Running:
    machine: int
    since: float  # when it (re)started there
    share_at_start: float  # its remaining share then
    duration: float  # a full run of the task on this machine

    def end(self) -> float:
        return self.since + self.share_at_start * self.duration

    def share_left(self, now: float) -> float:
        return max(0.0, self.share_at_start - (now - self.since) / self.duration)


@dataclass(slots=True)
class PackingState:
    instance: Instance
    now: float = 0.0
    free: np.ndarray = field(init=False)  # machines x resources
    present: set[int] = field(default_factory=set)  # released, unfinished jobs
    left: dict[TaskKey, float] = field(default_factory=dict)  # waiting tasks' remaining share
    running: dict[TaskKey, Running] = field(default_factory=dict)
    pinned: dict[TaskKey, int] = field(default_factory=dict)  # where a started task ran first
    unfinished: dict[int, int] = field(default_factory=dict)  # job -> tasks not done

    def __post_init__(self) -> None:
        self.free = np.array(self.instance.capacities, dtype=float)

    def task(self, key: TaskKey) -> Task:
        return self.instance.jobs[key[0]].tasks[key[1]]

    def fits(self, key: TaskKey, machine: int) -> bool:
        demand = self.task(key).demand
        free = self.free[machine]
        return all(d <= f + EPS for d, f in zip(demand, free, strict=True))

    def share(self, key: TaskKey) -> float:
        """What is left of a task, running or not."""
        running = self.running.get(key)
        return running.share_left(self.now) if running is not None else self.left[key]

    # -- what the simulator applies --------------------------------------------------------

    def release(self, job: int) -> None:
        self.present.add(job)
        tasks = self.instance.jobs[job].tasks
        self.unfinished[job] = len(tasks)
        for task in tasks:
            self.left[(job, task.index)] = 1.0

    def start(self, key: TaskKey, machine: int, *, migration: bool) -> Running:
        if key not in self.left:
            raise PackingViolation(f"task {key} is not waiting")
        task = self.task(key)
        duration = task.duration_on(machine)
        if duration is None:
            raise PackingViolation(f"task {key} may not run on machine {machine} "
                                   f"(placement set {sorted(task.local)})")
        if not migration and self.pinned.get(key, machine) != machine:
            raise PackingViolation(f"task {key} started on machine {self.pinned[key]} and "
                                   f"may not move to {machine}")
        if not self.fits(key, machine):
            raise PackingViolation(f"task {key} does not fit machine {machine}: needs "
                                   f"{task.demand}, free {self.free[machine].tolist()}")
        self.free[machine] -= task.demand
        running = Running(machine, self.now, self.left.pop(key), duration)
        self.running[key] = running
        self.pinned.setdefault(key, machine)
        return running

    def stop(self, key: TaskKey) -> None:
        """Preempt a running task, keeping its progress."""
        running = self.running.pop(key)
        self.free[running.machine] += self.task(key).demand
        self.left[key] = running.share_left(self.now)

    def finish(self, key: TaskKey) -> bool:
        """A running task completed; True when that completes its job."""
        running = self.running.pop(key)
        self.free[running.machine] += self.task(key).demand
        np.minimum(self.free[running.machine], self.instance.capacities[running.machine],
                   out=self.free[running.machine])
        job = key[0]
        self.unfinished[job] -= 1
        if self.unfinished[job] == 0:
            self.present.discard(job)
            return True
        return False
