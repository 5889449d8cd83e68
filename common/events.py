"""Events: everything that can happen to a role, as small records nothing mutates.

Each event carries the id of the stimulus that caused it, so every state change it makes
is recorded against that id (`story()`). In the simulator and the test harness, an event
that a core's command caused has an id naming its cause (common/routing.py), so a story can
be followed from core to core; the services number their stimuli per process.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.cluster import LMSnapshot
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.models import JobSpec
from common.reasons import Reason

# Not `frozen`: the simulator makes an event per engine step, and a frozen dataclass's
# __init__ (object.__setattr__ per field) costs 0.74 us against 0.21 us for four fields
# (measured here); frozen events were a tenth of a 10,000-node run's wall time with the
# commands (benchmarks/bench_sim.py). Nothing mutates an event once made; they compare by
# value as before, but are not hashable.


@dataclass(slots=True)
class Tick:
    """Time passed: heartbeats fall due, liveness deadlines expire, pending work is retried."""

    stimulus_id: str


# --- GM inputs -------------------------------------------------------------------------------


@dataclass(slots=True)
class PassContinued:
    """A bounded pass goes on (the GM asked for it with `ContinuePass`)."""

    stimulus_id: str



@dataclass(slots=True)
class JobSubmitted:
    """A job for this GM. A restarted GM replays unfinished jobs from its store with the
    tasks that already finished (task id, measured runtime): those are never run again."""

    stimulus_id: str
    job: JobSpec
    done_tasks: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class LMReplied:
    """The LM's answer to a launch, repartition or preemption request of this GM."""

    stimulus_id: str
    lm: str
    request_id: str
    results: tuple[LaunchResult, ...]
    snapshot: LMSnapshot


@dataclass(slots=True)
class LMRequestFailed:
    """A request got no answer after the shell's retries (timeout, connection refused).

    The GM cannot know whether the LM acted on it: it requeues the tasks under new attempt
    ids and lets the first attempt to finish win.
    """

    stimulus_id: str
    lm: str
    request_id: str
    reason: Reason = Reason.LM_UNREACHABLE


@dataclass(slots=True)
class HeartbeatReceived:
    stimulus_id: str
    snapshot: LMSnapshot


@dataclass(slots=True)
class TaskEventReceived:
    stimulus_id: str
    event: TaskEvent


@dataclass(slots=True)
class TaskEventsReceived:
    """Several task events at once (one broker message), applied in order before one
    scheduling pass."""

    stimulus_id: str
    events: tuple[TaskEvent, ...]


# --- LM inputs -------------------------------------------------------------------------------


@dataclass(slots=True)
class LaunchRequested:
    stimulus_id: str
    gm: str
    request_id: str
    kind: RequestKind
    placements: tuple[Placement, ...]
    # the LM incarnation the GM planned on; an older one than the LM's is refused (None: not
    # checked, for a request of no GM's view)
    lm_epoch: int | None = None


@dataclass(slots=True)
class PreemptRequested:
    """Stop `victims` (attempt ids running on the placement's node), then launch it."""

    stimulus_id: str
    gm: str
    request_id: str
    placement: Placement
    victims: tuple[str, ...]
    lm_epoch: int | None = None  # as in LaunchRequested


@dataclass(slots=True)
class CancelRequested:
    """The owning GM no longer wants this attempt (a redundant or superseded copy)."""

    stimulus_id: str
    gm: str
    attempt_id: str


@dataclass(slots=True)
class ReprioritizeRequested:
    """The GM's job has a new priority: its attempts here take it, at their workers too."""

    stimulus_id: str
    gm: str
    job_id: str
    priority: float


@dataclass(slots=True)
class TaskEventBacklog:
    """The driver's outbox of task events filled up (`full`) or drained again."""

    stimulus_id: str
    full: bool
    size: int


@dataclass(slots=True)
class WorkerTaskStarted:
    stimulus_id: str
    worker: str
    attempt_id: str
    at: float | None = None  # the worker's clock when the task started


@dataclass(slots=True)
class WorkerTaskFinished:
    stimulus_id: str
    worker: str
    attempt_id: str
    runtime: float


@dataclass(slots=True)
class WorkerTaskFailed:
    stimulus_id: str
    worker: str
    attempt_id: str
    detail: str
    work: float | None = None  # the work it had done (a cancelled attempt's report says)


@dataclass(slots=True)
class WorkerTaskCheckpointed:
    """The worker's answer to a checkpoint request: the work the attempt has done."""

    stimulus_id: str
    worker: str
    attempt_id: str
    work: float


@dataclass(slots=True)
class WorkerTaskSuspended:
    """A preemptive local queue paused the attempt for a much shorter one: it waits in its
    node's queue again and holds no resources until its next start."""

    stimulus_id: str
    worker: str
    attempt_id: str
    at: float | None = None  # the worker's clock when it suspended it


@dataclass(slots=True)
class DispatchFailed:
    """The LM's driver could not hand an attempt to its worker agent (it never answered)."""

    stimulus_id: str
    worker: str
    attempt_id: str
    detail: str


@dataclass(slots=True)
class WorkerHeartbeat:
    """A worker agent is alive and runs (or queues) these attempts.

    The placements let a restarted LM adopt what its workers are running.
    """

    stimulus_id: str
    worker: str
    running: tuple[Placement, ...]
    queued: frozenset[str] = frozenset()  # those of `running` waiting in a local queue


# --- worker agent inputs ----------------------------------------------------------------------


@dataclass(slots=True)
class TaskAssigned:
    stimulus_id: str
    placement: Placement


@dataclass(slots=True)
class TaskCancelled:
    stimulus_id: str
    attempt_id: str
    reason: Reason


@dataclass(slots=True)
class TaskRunEnded:
    """The shell's runner finished holding (or burning) the task's resources."""

    stimulus_id: str
    attempt_id: str
    runtime: float


@dataclass(slots=True)
class TaskCheckpointRequested:
    """The LM asks how much work these attempts have done (a copy of their task starts)."""

    stimulus_id: str
    attempt_ids: tuple[str, ...]


@dataclass(slots=True)
class TaskRestored:
    """The attempt may continue from `work` done: a copy of its task got that far."""

    stimulus_id: str
    attempt_id: str
    work: float


@dataclass(slots=True)
class JobReprioritized:
    """The job's estimated remaining work changed: its attempts here take this priority, and
    those queued are re-keyed (keeping their aging credit)."""

    stimulus_id: str
    job_id: str
    priority: float


Event = (
    Tick
    | JobSubmitted
    | LMReplied
    | LMRequestFailed
    | HeartbeatReceived
    | TaskEventReceived
    | LaunchRequested
    | PreemptRequested
    | CancelRequested
    | ReprioritizeRequested
    | WorkerTaskStarted
    | WorkerTaskFinished
    | WorkerTaskFailed
    | WorkerTaskSuspended
    | WorkerTaskCheckpointed
    | DispatchFailed
    | WorkerHeartbeat
    | TaskAssigned
    | TaskCancelled
    | TaskRunEnded
    | TaskCheckpointRequested
    | TaskRestored
    | JobReprioritized
)
