"""The core's own records: nodes, tasks and jobs, and the checks that reject bad ones.

These are the core's dataclasses; the pydantic models that cross the wire live in
`common/wire.py` and are converted at the edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.errors import InvalidInput
from common.resources import Resources

DEFAULT_NUM_CONSTRAINTS = 21


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node_id: str
    lm: str
    worker: str  # the worker agent that hosts this node
    capacity: Resources
    constraints: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class TaskSpec:
    task_id: str
    job_id: str
    demand: Resources
    constraints: frozenset[int] = frozenset()
    duration: float | None = None  # true runtime of a replayed task; None runs until stopped
    # its placement set: the ids of the nodes it may run on (where its data is local); None
    # lets it run anywhere its constraints and demand allow
    nodes: frozenset[str] | None = None

    @property
    def shape(self) -> tuple[frozenset[int], int, int, frozenset[str] | None]:
        """Tasks of one shape match the same nodes: placement caches and skips by it
        (constraints, cpu, memory, placement set)."""
        return (self.constraints, self.demand.cpu_m, self.demand.mem_mib, self.nodes)


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: str
    user: str  # the user queue; it decides the serving GM and the fair share
    tasks: tuple[TaskSpec, ...]
    arrival: float
    weight: float = 1.0
    estimated_task_duration: float | None = None  # a trace's own estimate (field 3), if any
    name: str | None = None  # a recurring job's template: runs of one job share it (history)
    extra: dict = field(default_factory=dict, compare=False, hash=False)


def validate_job(job: JobSpec, num_constraints: int = DEFAULT_NUM_CONSTRAINTS) -> None:
    """Raise `InvalidInput` naming the first bad field; accept nothing partially."""
    if not job.job_id:
        raise InvalidInput("job_id", "must be a non-empty string")
    if not job.user:
        raise InvalidInput("user", "must name a user queue")
    if not (isinstance(job.weight, int | float) and math.isfinite(job.weight) and job.weight > 0):
        raise InvalidInput("weight", f"must be a positive finite number, got {job.weight!r}")
    if not job.tasks:
        raise InvalidInput("tasks", "a job needs at least one task")
    # Per task, only what may differ from task to task is checked, and a field's name is
    # spelled out only for an error: a job's tasks are many (thousands) and mostly share their
    # constraint set, which is checked once per job.
    job_id = job.job_id
    seen: set[str] = set()
    constraint_sets: set[frozenset[int]] = set()  # those found valid
    for index, task in enumerate(job.tasks):
        task_id = task.task_id
        if not task_id:
            raise InvalidInput(f"tasks[{index}].task_id", "must be a non-empty string")
        if task_id in seen:
            raise InvalidInput(f"tasks[{index}].task_id", f"duplicate task id {task_id!r}")
        seen.add(task_id)
        if task.job_id != job_id:
            raise InvalidInput(f"tasks[{index}].job_id", f"{task.job_id!r} is not {job_id!r}")
        demand = task.demand
        if not (type(demand.cpu_m) is int and type(demand.mem_mib) is int
                and demand.cpu_m > 0 and demand.mem_mib > 0):
            demand.validate_demand(f"tasks[{index}].demand")  # raises, naming the field
        constraints = task.constraints
        try:
            known = constraints in constraint_sets
        except TypeError:  # a set or list: not hashable
            known = False
        if not known:
            if type(constraints) is not frozenset:
                raise InvalidInput(f"tasks[{index}].constraints", "must be a frozenset of "
                                   f"constraint ids, got a {type(constraints).__name__}")
            for constraint in constraints:
                if not (isinstance(constraint, int) and 0 <= constraint < num_constraints):
                    raise InvalidInput(
                        f"tasks[{index}].constraints",
                        f"unknown constraint id {constraint!r} (ids are 0..{num_constraints - 1})",
                    )
            constraint_sets.add(constraints)
        duration = task.duration
        if duration is not None and not (math.isfinite(duration) and duration >= 0):
            raise InvalidInput(f"tasks[{index}].duration", f"must be >= 0, got {duration!r}")
        if task.nodes is not None:
            validate_placement_set(task.nodes, f"tasks[{index}].nodes")


def validate_placement_set(nodes: frozenset[str], where: str) -> None:
    """A placement set names at least one node, each by a non-empty string id. Whether the
    ids are nodes of the federation only a GM can tell (`common/admission.py`)."""
    if not isinstance(nodes, frozenset):
        raise InvalidInput(where, f"must be a set of node ids, got {type(nodes).__name__}")
    if not nodes:
        raise InvalidInput(where, "a placement set needs at least one node (leave it out to "
                                  "let the task run anywhere)")
    for node_id in nodes:
        if not (isinstance(node_id, str) and node_id):
            raise InvalidInput(where, f"node ids must be non-empty strings, got {node_id!r}")


def validate_node(node: NodeSpec, num_constraints: int = DEFAULT_NUM_CONSTRAINTS) -> None:
    if not node.node_id:
        raise InvalidInput("node_id", "must be a non-empty string")
    node.capacity.validate_demand(f"nodes[{node.node_id}].capacity")
    for constraint in node.constraints:
        if not (isinstance(constraint, int) and 0 <= constraint < num_constraints):
            raise InvalidInput(
                f"nodes[{node.node_id}].constraints",
                f"unknown constraint id {constraint!r} (ids are 0..{num_constraints - 1})",
            )
