"""Commands: what a role asks its driver to do. I/O described as data, done elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cluster import LMSnapshot
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.reasons import Reason

# Not `frozen`, as events are not (see common/events.py): a core returns several commands
# per event. Nothing mutates a command once made.


@dataclass(slots=True)
class Log:
    """One line of the JSON event log (docs/architecture.md, The event log); the driver adds
    `ts` and `svc`."""

    event: str
    fields: dict = field(default_factory=dict)


# --- GM commands --------------------------------------------------------------------------------


@dataclass(slots=True)
class SendLaunch:
    lm: str
    request_id: str
    kind: RequestKind
    placements: tuple[Placement, ...]
    lm_epoch: int | None = None  # the LM incarnation the GM planned on (its view's)


@dataclass(slots=True)
class SendPreempt:
    lm: str
    request_id: str
    placement: Placement
    victims: tuple[str, ...]
    lm_epoch: int | None = None  # as in SendLaunch


@dataclass(slots=True)
class SendCancel:
    lm: str
    attempt_id: str


@dataclass(slots=True)
class SendReprioritize:
    """The job's priority changed enough to re-key its tasks at this LM's workers
    (common/reprioritize.py)."""

    lm: str
    job_id: str
    priority: float


@dataclass(slots=True)
class ContinuePass:
    """The GM's pass stopped at its bound with tasks still to try: the driver hands the GM a
    `PassContinued` soon, behind what already waits for it, so that what the pass placed so
    far leaves now and other events are not held up by a long pass."""


@dataclass(slots=True)
class JobEnded:
    """A job reached DONE or FAILED: the driver may drop its durable record."""

    job_id: str
    user: str
    state: str
    reason: str = ""


# --- LM commands --------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplyToGM:
    gm: str
    request_id: str
    results: tuple[LaunchResult, ...]
    snapshot: LMSnapshot


@dataclass(slots=True)
class StartOnWorker:
    worker: str
    placement: Placement


@dataclass(slots=True)
class StopOnWorker:
    worker: str
    attempt_id: str
    reason: Reason


@dataclass(slots=True)
class CheckpointOnWorker:
    """Ask the worker how much work these attempts have done (`checkpointed` reports)."""

    worker: str
    attempt_ids: tuple[str, ...]


@dataclass(slots=True)
class RestoreOnWorker:
    """Tell the worker that the attempt may continue from `work` done (a copy of its task
    got that far): it does, if it is behind."""

    worker: str
    attempt_id: str
    work: float


@dataclass(slots=True)
class ReprioritizeOnWorker:
    """The job's attempts on this worker take this priority (its queued ones are re-keyed)."""

    worker: str
    job_id: str
    priority: float


@dataclass(slots=True)
class PublishTaskEvent:
    gm: str
    event: TaskEvent


@dataclass(slots=True)
class PublishHeartbeat:
    snapshot: LMSnapshot


# --- worker agent commands ----------------------------------------------------------------------


@dataclass(slots=True)
class RunTask:
    """Hold the placement's resources for `duration` seconds (None: until killed)."""

    attempt_id: str
    node_id: str
    duration: float | None


@dataclass(slots=True)
class KillTask:
    attempt_id: str


@dataclass(slots=True)
class ReportToLM:
    """started / finished / failed / cancelled / suspended / checkpointed, with the measured
    runtime when finished."""

    kind: Reason
    attempt_id: str
    runtime: float | None = None
    detail: str = ""
    at: float | None = None  # the worker's clock when it happened (set for "started")
    work: float | None = None  # the work done (checkpointed, cancelled), if its duration is known


Command = (
    Log
    | SendLaunch
    | SendPreempt
    | SendCancel
    | SendReprioritize
    | JobEnded
    | ContinuePass
    | ReplyToGM
    | StartOnWorker
    | StopOnWorker
    | CheckpointOnWorker
    | RestoreOnWorker
    | ReprioritizeOnWorker
    | PublishTaskEvent
    | PublishHeartbeat
    | RunTask
    | KillTask
    | ReportToLM
)
