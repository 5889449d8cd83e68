"""A worker's attempts: each live one's record and the work it has done, and the book of them.

The worker (common/worker.py) keeps one `LiveAttempt` per attempt it runs or queues, in its
`WorkerAttemptBook` with the states recent ones ended in. An attempt's progress is the work it
started with (`Placement.start_work`: a redundant copy starts from its task's checkpoint),
plus what its runs did, read off its node's speed process (`NodeSpeed.work_until`), so it is
exact under varying speed. A run ends early when the attempt is suspended
(common/worker_suspension.py) or restored further on (`TaskRestored`): its wall time and its
work are then banked, and the next run does the work left.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from common.ended_memory import EndedMemory
from common.errors import InvalidInput, InvariantViolated

if TYPE_CHECKING:
    from common.messages import Placement
    from common.speed import NodeSpeed


class AttemptState(StrEnum):
    """An attempt as the worker sees it; NEW is only the origin of its first transition."""

    NEW = "new"
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"  # also a cancel that arrived before its assignment
    FAILED = "failed"  # refused: unknown node, impossible demand, local queue full


@dataclass(slots=True)
class LiveAttempt:
    placement: Placement
    state: AttemptState
    # when it entered `state`: queued time gives the worker-queuing part; running, the start
    # of its current run
    since: float
    run_for: float | None = None  # running: the current run's planned wall time (RunTask's)
    # work done before its current run: where it started (a copy's checkpoint), what it
    # did before a suspension, or where a restore moved it; its task's duration less this
    # is what the current run does
    base_work: float = 0.0
    mark: float = 0.0  # its node's `work_until` when the current run started (varying speed)
    own_work: float = 0.0  # work its own runs did (a restore's jump is not its own)
    ran_seconds: float = 0.0  # wall time of its runs before its suspensions

    def work_left(self) -> float | None:
        """What its current (or next) run does; None for a task of no known duration."""
        duration = self.placement.task.duration
        return None if duration is None else max(0.0, duration - self.base_work)

    def progress(self, speed: NodeSpeed | None, now: float) -> float | None:
        """The work it has done by `now` on a node of this speed process (None: constant);
        None for a task of no known duration."""
        duration = self.placement.task.duration
        if duration is None:
            return None
        if self.state is not AttemptState.RUNNING:
            return self.base_work
        # its current run's work: the node's clock at constant speed, else its speed process
        ran = now - self.since if speed is None else speed.work_until(now) - self.mark
        return self.base_work + min(max(0.0, ran), duration - self.base_work)

    def plan_run(self, speed: NodeSpeed | None, now: float, fields: dict) -> float | None:
        """Plan a run starting now: its wall time (`run_for`), the work left at its node's
        speed (a varying node's run lasts what the node takes to do it; `run_for` in
        `fields` says so)."""
        work = self.work_left()
        if speed is not None and work is not None:
            self.mark = speed.work_until(now)
            work = fields["run_for"] = speed.time_to_do(now, work)
        self.run_for = work
        return work

    def bank_run(self, progress: float | None, now: float) -> float | None:
        """End its current run at `now`, `progress` done (`progress(...)` of now): its wall
        time and its work count as done before whatever it does next, from now. The work the
        run did; None for a task of no known duration."""
        self.ran_seconds += max(0.0, now - self.since)
        self.since = now
        if progress is None:
            return None
        done = progress - self.base_work
        self.own_work += done
        self.base_work = progress
        return done


class WorkerAttemptBook:
    """The live attempts by id and by job, and how recent attempts ended: an id seen before is
    never run again, in flat memory. The worker records each move in its story first."""

    def __init__(self, ended_memory: int) -> None:
        if ended_memory < 1:
            raise InvalidInput("ended_memory", f"must be >= 1, got {ended_memory}")
        self.live: dict[str, LiveAttempt] = {}
        self.by_job: dict[str, set[str]] = {}  # job id -> its live attempts' ids
        self.ended: EndedMemory[AttemptState] = EndedMemory(ended_memory)

    def state_of(self, attempt_id: str) -> AttemptState | None:
        """The attempt's state if it is live or remembered as ended, else None."""
        live = self.live.get(attempt_id)
        if live is not None:
            return live.state
        return self.ended.get(attempt_id)

    def add(self, live: LiveAttempt) -> None:
        placement = live.placement
        self.live[placement.attempt_id] = live
        self.by_job.setdefault(placement.task.job_id, set()).add(placement.attempt_id)

    def end(self, attempt_id: str, state: AttemptState) -> None:
        """The attempt ended in `state`: live until now, or refused or cancelled as it came."""
        live = self.live.pop(attempt_id, None)
        if live is not None:
            job_id = live.placement.task.job_id
            attempts = self.by_job[job_id]
            attempts.discard(attempt_id)
            if not attempts:
                del self.by_job[job_id]
        self.ended.remember(attempt_id, state)

    def validate(self) -> None:
        """Every live attempt indexed by its job and none else, none of them ended, its work
        done within its task's."""
        self.ended.validate("worker")
        indexed = sum(len(attempts) for attempts in self.by_job.values())
        if indexed != len(self.live):
            raise InvariantViolated(f"{indexed} attempts indexed by job, {len(self.live)} live")
        for attempt_id, live in self.live.items():
            placement = live.placement
            if attempt_id in self.ended:
                raise InvariantViolated(f"attempt {attempt_id}: {live.state} but ended")
            if attempt_id not in self.by_job.get(placement.task.job_id, ()):
                raise InvariantViolated(f"attempt {attempt_id}: not indexed by its job")
            duration = placement.task.duration
            if live.base_work < 0 or (duration is not None and live.base_work > duration + 1e-9):
                raise InvariantViolated(f"attempt {attempt_id}: {live.base_work} work done of "
                                        f"{duration}")
