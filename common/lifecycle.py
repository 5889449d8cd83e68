"""Task and job lifecycles as tables of allowed transitions.

An impossible move raises `IllegalTransition` with the entity's story, so a bug surfaces
with its history instead of as a silently wrong count.
"""

from __future__ import annotations

from enum import StrEnum

from common.errors import IllegalTransition
from common.story import TransitionLog


class TaskState(StrEnum):
    PENDING = "pending"  # in the GM's queue, eligible to place
    HELD = "held"  # slearn: waiting for its job's pilots (work conservation may still run it)
    PLACING = "placing"  # reserved in the GM's view, launch request in flight
    LAUNCHED = "launched"  # the LM accepted it and dispatched it to a worker
    RUNNING = "running"  # the worker reported its start
    DONE = "done"
    FAILED = "failed"


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


# A task waiting again (PENDING or HELD) may still finish: an attempt the GM gave up on (its
# request went unanswered, or its node was reported lost) can complete after all, and the
# first attempt to finish wins.
TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset(
        {TaskState.PLACING, TaskState.HELD, TaskState.DONE, TaskState.FAILED}
    ),
    TaskState.HELD: frozenset(
        {TaskState.PENDING, TaskState.PLACING, TaskState.DONE, TaskState.FAILED}
    ),
    TaskState.PLACING: frozenset(
        {TaskState.LAUNCHED, TaskState.RUNNING, TaskState.PENDING, TaskState.DONE,
         TaskState.FAILED}
    ),
    TaskState.LAUNCHED: frozenset(
        {TaskState.RUNNING, TaskState.PENDING, TaskState.DONE, TaskState.FAILED}
    ),
    TaskState.RUNNING: frozenset({TaskState.PENDING, TaskState.DONE, TaskState.FAILED}),
    TaskState.DONE: frozenset(),
    TaskState.FAILED: frozenset(),
}

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.DONE, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.DONE, JobState.FAILED}),
    JobState.DONE: frozenset(),
    JobState.FAILED: frozenset(),
}


def check_transition(
    table: dict, entity: str, old: StrEnum, new: StrEnum, log: TransitionLog
) -> None:
    if new not in table[old]:
        raise IllegalTransition(entity, str(old), str(new), log.story(entity))
