"""Records that travel between roles: launch items, per-item verdicts and task events.

They are the core's dataclasses; `common/wire.py` turns them into pydantic wire models.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from common.models import TaskSpec
from common.reasons import LAUNCH_OK, Reason


class RequestKind(StrEnum):
    LAUNCH = "launch"  # into the requesting GM's internal partition
    REPARTITION = "repartition"  # into another GM's partition, as a logical node


# Records made once per task on the placement hot path are not `frozen`: a frozen
# dataclass's __init__ costs five times a plain one (1.1 us against 0.24 us for seven
# fields, measured here), which is a tenth of a GM decision. Nothing mutates them.
@dataclass(slots=True)
class Placement:
    """One launch item: run this attempt of a task on that node for that GM."""

    attempt_id: str  # `task_id#epoch.n` (the GM's): the idempotency key of a launch
    task: TaskSpec
    node_id: str
    gm: str
    user: str
    priority: float = 0.0  # the job's estimated remaining work: lower runs first (SRPT)
    pilot: bool = False  # a slearn pilot task: a worker runs these first
    # a redundant copy (docs/redundancy.md): the work it starts from (its task's checkpoint),
    # and the original attempt it copies; an LM's own, never a GM's
    start_work: float = 0.0
    copy_of: str | None = None


@dataclass(slots=True)
class LaunchResult:
    attempt_id: str
    task_id: str
    node_id: str
    reason: Reason

    @property
    def accepted(self) -> bool:
        return self.reason in LAUNCH_OK


@dataclass(slots=True)  # not frozen either: two per task, see above
class TaskEvent:
    """What an LM tells the owning GM about an attempt: started, finished, preempted, lost."""

    kind: Reason
    attempt_id: str
    task_id: str
    job_id: str
    gm: str
    lm: str
    node_id: str
    runtime: float | None = None  # measured by the worker, for finished attempts
    detail: str = ""
    at: float | None = None  # the worker's clock when a "started" attempt started
