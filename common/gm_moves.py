"""What a GM's task moves change besides its state, worked out once per kind of move; and
the fields of the log lines of a job's arrival and of a task's new attempt.

`GlobalMaster._move` is the one place a task changes state; each move keeps the counts and
lists that depend on the state in step. Which of them a move touches depends only on the two
states, so it is a table (`MOVES`), read once per move instead of asking four state sets
twice each: a task moves three to five times in its life, and a placement is one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.gm_records import ACTIVE_STATES, LAUNCHED_STATES, WAITING_STATES
from common.lifecycle import TASK_TRANSITIONS, JobState, TaskState
from common.reasons import Reason

if TYPE_CHECKING:
    from enum import StrEnum

    from common.gm_records import TaskRecord
    from common.models import JobSpec
    from common.policies.job import JobProgress


# The states and reasons as plain strings, for the story: a story entry of plain strings is
# left alone by the cyclic collector once it has seen it, one holding enum members is
# scanned in every full collection for as long as the story keeps it (100,000 entries), a
# fifth of a placement's cost in benchmarks/bench_core.py. Equal, and the same in JSON.
NAME: dict[StrEnum, str] = {member: str(member)
                            for members in (TaskState, JobState, Reason) for member in members}


def _effects(old: TaskState, new: TaskState) -> tuple[int, bool, int, int, str, str]:
    """What a task's move from `old` to `new` changes besides its state (`GlobalMaster._move`):
    the waiting count (+1 joins, -1 leaves), whether it starts or stops running, the active
    count (placing, launched or running), and the attempt book's launched list (+1 listed,
    -1 unlisted); and the two states' `NAME`s."""
    def change(states: frozenset[TaskState]) -> int:
        return (new in states) - (old in states)

    return (change(WAITING_STATES), (old is TaskState.RUNNING) != (new is TaskState.RUNNING),
            change(ACTIVE_STATES), change(LAUNCHED_STATES), NAME[old], NAME[new])


# every legal move's effects: MOVES[old][new]; a move missing here is illegal
MOVES: dict[TaskState, dict[TaskState, tuple[int, bool, int, int, str, str]]] = {
    old: {new: _effects(old, new) for new in targets} for old, targets in TASK_TRANSITIONS.items()}


def attempt_fields(gm: str, task: TaskRecord) -> dict:
    """What a log line of a task's new attempt starts with (one dict: a line per placement)."""
    job = task.job.spec
    return {"attempt": task.live, "task": task.spec.task_id, "job": job.job_id,
            "user": job.user, "gm": gm, "lm": task.lm, "node": task.node}


def arrival_fields(gm: str, job: JobSpec, progress: JobProgress) -> dict:
    """The fields of a job's `job_arrived` log line."""
    arrived = {"job": job.job_id, "user": job.user, "gm": gm, "tasks": len(job.tasks),
               "arrival": job.arrival, "pilots": len(progress.pilots), "weight": job.weight}
    if progress.sampling_ratio is not None:
        arrived["sampling_ratio"] = progress.sampling_ratio
    return arrived
