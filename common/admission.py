"""Whether a GM takes a job: the checks of a submission, against the federation as the GM knows
it (configured LMs, and those it has heard from since).

A job is refused with `InvalidInput` naming what is wrong, before anything of it is recorded:
its user queue is served by another GM, a task id belongs to another job, a task's placement
set names a node the federation lacks, or a task can never run anywhere (no node satisfies its
constraints and is in its placement set, or none of those is big enough).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING

from common.cluster import ClusterTopology
from common.errors import InvalidInput
from common.models import JobSpec, validate_job
from common.view import FederationView

if TYPE_CHECKING:
    from common.gm_records import TaskRecord
    from common.job_queue import Shape


class Admission:
    def __init__(self, gm: str, own_queues: set[str], num_constraints: int,
                 view: FederationView, topologies: Iterable[ClusterTopology]) -> None:
        self.gm = gm
        self.own_queues = own_queues
        self.num_constraints = num_constraints
        self.view = view
        self._topologies = {topology.lm: topology for topology in topologies}  # configured
        self._federation: ClusterTopology | None = None  # every known LM, merged
        self._federation_key = -1  # the view's `layouts` when `_federation` was merged

    def check(self, job: JobSpec, tasks: Mapping[str, TaskRecord]) -> None:
        """Raise `InvalidInput` for a job this GM must refuse; changes nothing.
        `tasks`: the GM's unfinished tasks by id (one of another job's ids is refused).

        Of the job's tasks the first with something wrong is named, and in one task its id
        before its shape. Each shape is checked once, at the first task of it, as a job's
        tasks mostly share one; and whether any task id is known at all is asked in C."""
        validate_job(job, self.num_constraints)
        if job.user not in self.own_queues:
            served = ", ".join(sorted(self.own_queues)) or "none"
            raise InvalidInput("user", f"queue {job.user!r} is not served by {self.gm} "
                                       f"(it serves: {served})")
        taken = None  # (index, task, its job) of the first task whose id another job has
        if not tasks.keys().isdisjoint(map(_TASK_ID, job.tasks)):
            taken = next(((index, task, other) for index, task in enumerate(job.tasks)
                          if (other := _job_of(tasks, task.task_id)) not in (None, job.job_id)),
                         None)
        federation = self.federation()
        if federation is not None:
            for shape in dict.fromkeys(map(_SHAPE, job.tasks)):  # in order of first use
                problem = _shape_problem(shape, federation)
                if problem is None:
                    continue
                index = next(index for index, task in enumerate(job.tasks) if task.shape == shape)
                if taken is None or index < taken[0]:
                    field, reason = problem
                    raise InvalidInput(f"tasks[{index}]{field}", reason)
                break  # a task before it has another job's id
        if taken is not None:
            index, task, other = taken
            raise InvalidInput(f"tasks[{index}].task_id",
                               f"{task.task_id!r} already belongs to job {other!r}")

    def federation(self) -> ClusterTopology | None:
        """Every LM this GM knows of (configured or heard from), merged: one feasibility check
        per task shape instead of one per LM. Rebuilt only when the view's layout moves (the
        configured topologies are fixed), so admitting a job costs no walk over the LMs."""
        if self._federation_key != self.view.layouts:
            self._federation_key = self.view.layouts
            if self._topologies.keys() <= self.view.slots.keys():
                # every LM configured has been heard from: this merge is the view's layout
                self._federation = self.view.topology
                return self._federation
            known = dict(self._topologies)
            known.update((lm, slot.topology) for lm, slot in self.view.slots.items())
            self._federation = (ClusterTopology.merge([known[lm] for lm in sorted(known)])
                                if known else None)
        return self._federation


_TASK_ID = attrgetter("task_id")
_SHAPE = attrgetter("shape")


def _job_of(tasks: Mapping[str, TaskRecord], task_id: str) -> str | None:
    task = tasks.get(task_id)
    return None if task is None else task.job.spec.job_id


def _shape_problem(shape: Shape, federation: ClusterTopology) -> tuple[str, str] | None:
    """Why tasks of this shape cannot be taken, as (the field, below the task's, and the
    reason), or None if they can."""
    constraints, cpu_m, mem_mib, nodes = shape
    if nodes is not None and (unknown := federation.unknown_nodes(nodes)):
        return ".nodes", f"unknown node ids {unknown}"
    if not federation.can_ever_run(*shape):
        return "", infeasible_reason(constraints, cpu_m, mem_mib, nodes, federation)
    return None


def infeasible_reason(constraints: frozenset[int], cpu_m: int, mem_mib: int,
                      nodes: frozenset[str] | None, federation: ClusterTopology) -> str:
    """Why no node of `federation` can ever run a task of this shape (`TaskSpec.shape`)."""
    if nodes is not None:
        matching = federation.task_mask(constraints, nodes).count()
        if matching == 0:
            return (f"no node of its placement set ({len(nodes)} nodes) satisfies "
                    f"constraints {sorted(constraints)}")
        return (f"asks cpu_m={cpu_m}, mem_mib={mem_mib}, more than "
                f"any of the {matching} nodes of its placement set satisfying its "
                f"constraints has")
    matching = federation.mask_for(constraints).count()
    if matching == 0:
        rarest = min(constraints, key=lambda c: federation.constraint_vectors[c].count())
        return (f"no node in the federation satisfies constraints "
                f"{sorted(constraints)} (rarest: {rarest})")
    return (f"asks cpu_m={cpu_m}, mem_mib={mem_mib}, more than any "
            f"of the {matching} nodes satisfying its constraints has")
