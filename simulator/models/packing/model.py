"""A packing instance: machines with capacities, and parallel-task jobs to pack onto them.

A machine has a capacity per resource (cpu, memory: any number of dimensions, the same for
every machine and task). A task needs a demand per resource for as long as it runs, may run only
on its *placement set* (the machines holding its data) at its local duration, and elsewhere
either at `remote_factor` times that duration or not at all (`remote_factor=None`). A job has a
weight and a release time and completes when its last task does; the objective is the weighted
sum of completion times (reported as the weighted mean of completion minus release).

Instances are immutable and validated once (`Instance.validate`): every scheduler, the LPs and
the simulator's checks read the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Task:
    job: int  # index of its job in the instance
    index: int  # its index within the job
    demand: tuple[float, ...]  # per resource, while it runs
    duration: float  # on a machine of its placement set
    local: frozenset[int]  # its placement set: machine indices
    remote_factor: float | None = None  # elsewhere: duration x this; None: not allowed

    def duration_on(self, machine: int) -> float | None:
        """How long it runs on `machine`, or None if it may not run there."""
        if machine in self.local:
            return self.duration
        if self.remote_factor is None:
            return None
        return self.duration * self.remote_factor

    def volume(self, machine: int, resource: int) -> float:
        duration = self.duration_on(machine)
        return math.inf if duration is None else duration * self.demand[resource]


@dataclass(frozen=True, slots=True)
class Job:
    id: int  # its index in the instance
    name: str
    weight: float
    release: float
    tasks: tuple[Task, ...]

    @property
    def local_work(self) -> float:
        """The sum of its tasks' local durations (task-seconds)."""
        return sum(task.duration for task in self.tasks)

    def local_volume(self, capacity: tuple[float, ...]) -> float:
        """Its tasks' local duration x demand, each resource as a share of `capacity`, summed
        over resources (a size that compares jobs whatever their bottleneck)."""
        return sum(task.duration * sum(d / c for d, c in zip(task.demand, capacity, strict=True))
                   for task in self.tasks)


@dataclass(frozen=True, slots=True)
class Instance:
    capacities: tuple[tuple[float, ...], ...]  # per machine, per resource
    jobs: tuple[Job, ...]
    description: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def machines(self) -> int:
        return len(self.capacities)

    @property
    def resources(self) -> int:
        return len(self.capacities[0])

    def tasks(self) -> list[Task]:
        return [task for job in self.jobs for task in job.tasks]

    def allowed(self, task: Task) -> list[int]:
        """The machines `task` may run on, its placement set first."""
        if task.remote_factor is None:
            return sorted(task.local)
        return sorted(task.local) + [m for m in range(self.machines) if m not in task.local]

    def weighted_mean(self, completions: dict[int, float]) -> float:
        """Σ w (C - r) / Σ w over the jobs in `completions` (job id -> completion time)."""
        total = sum(self.jobs[j].weight for j in completions)
        return sum(self.jobs[j].weight * (c - self.jobs[j].release)
                   for j, c in completions.items()) / total

    def validate(self) -> Instance:
        """Raise `InvalidInput` naming the first bad field; return self."""
        if not self.capacities:
            raise InvalidInput("machines", "an instance needs at least one machine")
        dims = len(self.capacities[0])
        for m, capacity in enumerate(self.capacities):
            if len(capacity) != dims or not all(math.isfinite(c) and c > 0 for c in capacity):
                raise InvalidInput(f"machines[{m}]", f"capacity must be {dims} positive "
                                                     f"numbers, got {capacity!r}")
        if not self.jobs:
            raise InvalidInput("jobs", "an instance needs at least one job")
        for j, job in enumerate(self.jobs):
            where = f"jobs[{j}]"
            if job.id != j:
                raise InvalidInput(f"{where}.id", f"must be its index {j}, got {job.id}")
            if not (math.isfinite(job.weight) and job.weight > 0):
                raise InvalidInput(f"{where}.weight", f"must be positive, got {job.weight!r}")
            if not (math.isfinite(job.release) and job.release >= 0):
                raise InvalidInput(f"{where}.release", f"must be >= 0, got {job.release!r}")
            if not job.tasks:
                raise InvalidInput(f"{where}.tasks", "a job needs at least one task")
            for i, task in enumerate(job.tasks):
                self._validate_task(task, f"{where}.tasks[{i}]", j, i)
        return self

    def _validate_task(self, task: Task, where: str, job: int, index: int) -> None:
        if (task.job, task.index) != (job, index):
            raise InvalidInput(where, f"says it is task {task.index} of job {task.job}")
        if not (math.isfinite(task.duration) and task.duration > 0):
            raise InvalidInput(f"{where}.duration", f"must be positive, got {task.duration!r}")
        if len(task.demand) != self.resources or not all(d >= 0 for d in task.demand):
            raise InvalidInput(f"{where}.demand", f"must be {self.resources} numbers >= 0, "
                                                  f"got {task.demand!r}")
        if not task.local:
            raise InvalidInput(f"{where}.local", "the placement set is empty")
        unknown = sorted(m for m in task.local if not 0 <= m < self.machines)
        if unknown:
            raise InvalidInput(f"{where}.local", f"no such machines: {unknown} "
                                                 f"(there are {self.machines})")
        if task.remote_factor is not None and not (math.isfinite(task.remote_factor)
                                                   and task.remote_factor >= 1):
            raise InvalidInput(f"{where}.remote_factor",
                               f"must be >= 1 or None, got {task.remote_factor!r}")
        if not any(all(d <= c for d, c in zip(task.demand, self.capacities[m], strict=True))
                   for m in self.allowed(task)):
            raise InvalidInput(f"{where}.demand", f"{task.demand!r} fits no machine it may "
                                                  f"run on")
