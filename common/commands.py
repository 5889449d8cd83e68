"""Commands: what a role asks its driver to do. I/O described as data, done elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cluster import LMSnapshot
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.reasons import Reason


@dataclass(slots=True)  # not frozen: one per task event, see common/messages.py
class Log:
    """One line of the JSON event log (docs/architecture.md, The event log); the driver adds
    `ts` and `svc`."""

    event: str
    fields: dict = field(default_factory=dict)


# --- GM commands --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendLaunch:
    lm: str
    request_id: str
    kind: RequestKind
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class SendPreempt:
    lm: str
    request_id: str
    placement: Placement
    victims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SendCancel:
    lm: str
    attempt_id: str


@dataclass(frozen=True, slots=True)
class JobEnded:
    """A job reached DONE or FAILED: the driver may drop its durable record."""

    job_id: str
    user: str
    state: str
    reason: str = ""


# --- LM commands --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplyToGM:
    gm: str
    request_id: str
    results: tuple[LaunchResult, ...]
    snapshot: LMSnapshot


@dataclass(frozen=True, slots=True)
class StartOnWorker:
    worker: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class StopOnWorker:
    worker: str
    attempt_id: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class PublishTaskEvent:
    gm: str
    event: TaskEvent


@dataclass(frozen=True, slots=True)
class PublishHeartbeat:
    snapshot: LMSnapshot


# --- worker agent commands ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunTask:
    """Hold the placement's resources for `duration` seconds (None: until killed)."""

    attempt_id: str
    node_id: str
    duration: float | None


@dataclass(frozen=True, slots=True)
class KillTask:
    attempt_id: str


@dataclass(frozen=True, slots=True)
class ReportToLM:
    """started / finished / failed / cancelled, with the measured runtime when finished."""

    kind: Reason
    attempt_id: str
    runtime: float | None = None
    detail: str = ""
    at: float | None = None  # the worker's clock when it happened (set for "started")


Command = (
    Log
    | SendLaunch
    | SendPreempt
    | SendCancel
    | JobEnded
    | ReplyToGM
    | StartOnWorker
    | StopOnWorker
    | PublishTaskEvent
    | PublishHeartbeat
    | RunTask
    | KillTask
    | ReportToLM
)
