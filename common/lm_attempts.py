"""The LM's book of attempts: which ones it has taken on, in what state, and which have ended.

An attempt at the LM is launched (accepted and handed to its worker), then running once its
worker reports the start, until it ends: finished, failed, lost, preempted or cancelled. A
restarted LM adopts the attempts its workers still hold. Every move is checked against
`ATTEMPT_TRANSITIONS`, and the story records the state the attempt was really in, so an
attempt preempted before it ever started reads `launched -> preempted`.

The book also keeps the live attempts as heartbeats list them (and their ids by GM), beside
the attempts themselves, so that a snapshot is one C-level copy; and, for an LM that forwards
reprioritizations (one with local queues or copies), the live attempts of each job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from common.cluster import RunningInfo
from common.ended_memory import EndedMemory
from common.errors import InvariantViolated
from common.lifecycle import check_transition
from common.messages import Placement
from common.reasons import Reason
from common.step import Step
from common.story import TransitionLog

if TYPE_CHECKING:
    from collections.abc import Sequence

    from common.lm_copies import CopyBook


class AttemptState(StrEnum):
    """An attempt as the LM sees it; NEW is only the origin of its first transition."""

    NEW = "new"
    LAUNCHED = "launched"  # accepted and handed to its worker; no start reported yet
    RUNNING = "running"  # its worker reported the start
    ADOPTED = "adopted"  # a restarted LM learnt it from its worker's heartbeat
    FINISHED = "finished"
    FAILED = "failed"  # its worker refused or could not run it
    LOST = "lost"  # it never reached its worker, or its worker dropped it or went silent
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"


_ENDS = frozenset({AttemptState.FINISHED, AttemptState.FAILED, AttemptState.LOST,
                   AttemptState.PREEMPTED, AttemptState.CANCELLED})

# Any live attempt may end in any way: a worker's finish may overtake its start report, a
# worker refuses (fails) an attempt it never started, and a launched one may be preempted,
# cancelled or lost like a running one. An adopted attempt was already started or queued
# when its worker listed it, so a later start report is a repeat, not a move.
ATTEMPT_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.NEW: frozenset({AttemptState.LAUNCHED, AttemptState.ADOPTED}),
    AttemptState.LAUNCHED: _ENDS | {AttemptState.RUNNING},
    AttemptState.RUNNING: _ENDS,
    AttemptState.ADOPTED: _ENDS,
    **{end: frozenset() for end in _ENDS},
}

LIVE_STATES = frozenset({AttemptState.LAUNCHED, AttemptState.RUNNING, AttemptState.ADOPTED})

# the states every attempt passes through, looked up once: reading an enum member off its
# class costs a descriptor call on Python 3.11, and these are read for every attempt
_NEW, _RUNNING = AttemptState.NEW, AttemptState.RUNNING

# how each end the LM is told of (a task-event kind) shows as the attempt's state
END_STATES: dict[Reason, AttemptState] = {
    Reason.FINISHED: AttemptState.FINISHED,
    Reason.FAILED: AttemptState.FAILED,
    Reason.LOST: AttemptState.LOST,
    Reason.PREEMPTED: AttemptState.PREEMPTED,
    Reason.CANCELLED: AttemptState.CANCELLED,
}


@dataclass(slots=True)
class RunningAttempt:
    """An attempt the LM holds resources for: launched, running or adopted, not yet ended."""

    placement: Placement
    node_index: int
    logical: bool  # placed by repartition or preemption outside the GM's own partition
    launched_at: float
    state: AttemptState = AttemptState.LAUNCHED
    # its worker has listed it in a heartbeat or started it: a delivery fact, not a state
    # (a launched attempt may be acknowledged while it waits in its worker's queue)
    acknowledged: bool = False
    # in its node's local queue at the worker (launched there, or suspended): it holds no
    # resources until its worker reports the start
    queued: bool = False
    suspended_at: float | None = None  # its worker's clock when it last suspended it
    _info: RunningInfo | None = None

    def info(self) -> RunningInfo:
        """The attempt as heartbeats list it; made once, since none of it changes (every
        snapshot lists every running attempt: building them anew was most of its cost)."""
        if self._info is None:
            task = self.placement.task
            self._info = RunningInfo(self.placement.attempt_id, self.node_index,
                                     self.placement.gm, self.placement.user, task.demand.cpu_m,
                                     task.demand.mem_mib, self.logical, self.queued)
        return self._info


class LMAttemptBook:
    """The LM's live attempts by id, as heartbeats list them, and the ids of recent ends.

    Only `add`, `start` and `end` change it, each one checked transition recorded in `log`.
    """

    def __init__(self, lm: str, log: TransitionLog, ended_memory: int,
                 by_job: bool = False) -> None:
        self.lm = lm
        self.log = log
        self.running: dict[str, RunningAttempt] = {}
        self.infos: dict[str, RunningInfo] = {}
        # how recent attempts ended: an id seen before is never run again, in flat memory
        self.ended: EndedMemory[AttemptState] = EndedMemory(ended_memory)
        # job id -> its live attempts' ids: who holds a reprioritized job, without a scan of
        # every attempt; None where nothing asks (an LM without queues or copies)
        self.by_job: dict[str, dict[str, None]] | None = {} if by_job else None

    def add(self, step: Step, attempt: RunningAttempt, detail: str) -> None:
        """Take on a new attempt in its first state (launched or adopted)."""
        placement = attempt.placement
        attempt_id = placement.attempt_id
        self._transition(step, attempt_id, _NEW, attempt.state, detail)
        self.running[attempt_id] = attempt
        self.infos[attempt_id] = attempt.info()
        if self.by_job is not None:
            self.by_job.setdefault(placement.task.job_id, {})[attempt_id] = None

    def start(self, step: Step, attempt: RunningAttempt) -> None:
        """Its worker reported the start: the one move every attempt makes, so its check is
        `_transition`'s, written out."""
        old = attempt.state
        if _RUNNING not in ATTEMPT_TRANSITIONS[old]:
            check_transition(ATTEMPT_TRANSITIONS, attempt.placement.attempt_id, old, _RUNNING,
                             self.log)
        self.log.add((step.now, step.stimulus_id, attempt.placement.attempt_id, old, _RUNNING, ""))
        attempt.state = _RUNNING
        attempt.acknowledged = True

    def set_queued(self, attempt: RunningAttempt, queued: bool) -> None:
        """The attempt left its node's local queue (it started) or went back (suspended)."""
        attempt.queued = queued
        attempt._info = None
        self.infos[attempt.placement.attempt_id] = attempt.info()

    def end(self, step: Step, attempt_id: str, why: Reason, detail: str) -> RunningAttempt:
        """Drop a live attempt, remembering how it ended; the caller frees its resources."""
        attempt = self.running[attempt_id]
        new = END_STATES[why]
        self._transition(step, attempt_id, attempt.state, new, detail)
        del self.running[attempt_id]
        del self.infos[attempt_id]
        if self.by_job is not None:
            job_id = attempt.placement.task.job_id
            of_job = self.by_job[job_id]
            del of_job[attempt_id]
            if not of_job:
                del self.by_job[job_id]
        attempt.state = new
        self.ended.remember(attempt_id, new)  # (a live attempt never is ended: `validate`)
        return attempt

    def reprioritize(self, job_id: str, gm: str, priority: float, workers_of: Sequence[str],
                     copies: CopyBook | None) -> dict[str, None] | None:
        """A GM's job has a new priority (docs/local-queues.md, Estimates that change): its
        attempts here take it (a copy candidate is re-keyed). The workers holding them, each
        once in the order of their attempts (`workers_of`: each node's worker); None: the job
        has no attempts here, or the book keeps no index by job (only an LM with local queues
        or copies does, since only there does an attempt's priority order anything)."""
        ids = self.by_job.get(job_id) if self.by_job is not None else None
        if not ids:
            return None
        workers: dict[str, None] = {}
        for attempt_id in ids:
            attempt = self.running[attempt_id]
            placement = attempt.placement
            if placement.gm != gm:
                continue
            workers[workers_of[attempt.node_index]] = None
            if placement.priority != priority:
                # a new placement, not a mutated one: the simulator shares it among roles
                attempt.placement = replace(placement, priority=priority)
                if copies is not None:
                    copies.reprioritized(attempt_id, priority)
        return workers

    def _transition(self, step: Step, attempt_id: str, old: AttemptState, new: AttemptState,
                    detail: str = "") -> None:
        if new not in ATTEMPT_TRANSITIONS[old]:  # the check costs a call only when it fails
            check_transition(ATTEMPT_TRANSITIONS, attempt_id, old, new, self.log)
        self.log.add((step.now, step.stimulus_id, attempt_id, old, new, detail))

    def validate(self) -> None:
        """The listings match the attempts, and every attempt's state is a live one."""
        self.ended.validate(self.lm)
        if self.infos.keys() != self.running.keys():
            raise InvariantViolated(f"{self.lm}: heartbeat listing differs from running")
        if self.by_job is not None:
            by_job: dict[str, set[str]] = {}
            for attempt_id, attempt in self.running.items():
                by_job.setdefault(attempt.placement.task.job_id, set()).add(attempt_id)
            if by_job != {job: set(ids) for job, ids in self.by_job.items()}:
                raise InvariantViolated(f"{self.lm}: attempt ids by job differ from running")
        for attempt_id, attempt in self.running.items():
            if attempt_id in self.ended:
                raise InvariantViolated(f"{self.lm}: {attempt_id} both running and ended")
            if attempt.state not in LIVE_STATES:
                raise InvariantViolated(f"{self.lm}: {attempt_id} is {attempt.state} but held")
            if attempt.state is not AttemptState.LAUNCHED and not attempt.acknowledged:
                raise InvariantViolated(
                    f"{self.lm}: {attempt_id} is {attempt.state} but its worker never said so")
