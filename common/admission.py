"""Whether a GM takes a job: the checks of a submission, against the federation as the GM knows
it (configured LMs, and those it has heard from since).

A job is refused with `InvalidInput` naming what is wrong, before anything of it is recorded:
its user queue is served by another GM, a task id belongs to another job, a task's placement
set names a node the federation lacks, or a task can never run anywhere (no node satisfies its
constraints and is in its placement set, or none of those is big enough).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from common.cluster import ClusterTopology
from common.errors import InvalidInput
from common.models import JobSpec, TaskSpec, validate_job
from common.view import FederationView


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

    def check(self, job: JobSpec, job_of_task: Callable[[str], str | None]) -> None:
        """Raise `InvalidInput` for a job this GM must refuse; changes nothing.
        `job_of_task(task_id)` names the job an unfinished task id already belongs to."""
        validate_job(job, self.num_constraints)
        if job.user not in self.own_queues:
            served = ", ".join(sorted(self.own_queues)) or "none"
            raise InvalidInput("user", f"queue {job.user!r} is not served by {self.gm} "
                                       f"(it serves: {served})")
        federation = self.federation()
        checked: set[tuple] = set()
        for index, task in enumerate(job.tasks):
            other = job_of_task(task.task_id)
            if other is not None and other != job.job_id:
                raise InvalidInput(f"tasks[{index}].task_id",
                                   f"{task.task_id!r} already belongs to job {other!r}")
            shape = task.shape
            if federation is None or shape in checked:
                continue
            if task.nodes is not None and (unknown := federation.unknown_nodes(task.nodes)):
                raise InvalidInput(f"tasks[{index}].nodes", f"unknown node ids {unknown}")
            if not federation.can_ever_run(*shape):
                raise InvalidInput(f"tasks[{index}]", infeasible_reason(task, federation))
            checked.add(shape)

    def federation(self) -> ClusterTopology | None:
        """Every LM this GM knows of (configured or heard from), merged: one feasibility check
        per task shape instead of one per LM. Rebuilt only when the view's layout moves (the
        configured topologies are fixed), so admitting a job costs no walk over the LMs."""
        if self._federation_key != self.view.layouts:
            self._federation_key = self.view.layouts
            known = dict(self._topologies)
            known.update((lm, slot.topology) for lm, slot in self.view.slots.items())
            self._federation = (ClusterTopology.merge([known[lm] for lm in sorted(known)])
                                if known else None)
        return self._federation


def infeasible_reason(task: TaskSpec, federation: ClusterTopology) -> str:
    if task.nodes is not None:
        matching = federation.task_mask(task.constraints, task.nodes).count()
        if matching == 0:
            return (f"no node of its placement set ({len(task.nodes)} nodes) satisfies "
                    f"constraints {sorted(task.constraints)}")
        return (f"asks cpu_m={task.demand.cpu_m}, mem_mib={task.demand.mem_mib}, more than "
                f"any of the {matching} nodes of its placement set satisfying its "
                f"constraints has")
    matching = federation.mask_for(task.constraints).count()
    if matching == 0:
        rarest = min(task.constraints, key=lambda c: federation.constraint_vectors[c].count())
        return (f"no node in the federation satisfies constraints "
                f"{sorted(task.constraints)} (rarest: {rarest})")
    return (f"asks cpu_m={task.demand.cpu_m}, mem_mib={task.demand.mem_mib}, more than any "
            f"of the {matching} nodes satisfying its constraints has")
