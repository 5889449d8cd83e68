"""Where a core's command goes: the event it becomes, whom it is delivered to, and its id.

A core returns commands; a driver carries them out. Most commands are messages to another
role: a GM's launch request becomes the LM's `LaunchRequested`, a worker's report the LM's
`WorkerTaskStarted` (or finished, or failed). `ROUTES` says, for each such command, which role
receives it, which actor of that role, and which event it becomes; the simulator and the test
harness (tests/harness.py) route with it, and the services, whose messages cross HTTP and
RabbitMQ as common/wire.py models, decode a worker's report with the same function. The rest
(`OWN_EFFECTS`: log lines, a job's end, running and killing a task) are the driver's own
business: they reach no other core.

What this module leaves to the driver is how and when an event gets there: the simulator's
network delay and processing time, the harness's list of messages in flight. How each routed
command crosses a process boundary in the services (its wire model, converters, HTTP route or
RabbitMQ exchange) is common/message_table.py's, which is checked against `ROUTES`.

Stimulus ids. Every event carries the id of its stimulus, and each core records its state
changes against it (`story()`). A driver numbers its stimuli with `StimulusIds`:

- `tag-n` for a stimulus from outside the cores (a job submitted, a tick, a task's run ended);
- `tag-n<cause` for an event a command caused, `cause` being the `tag-n` part of the stimulus
  whose handling produced the command.

So `assign-9<launch-7` is the driver's ninth stimulus, a worker's assignment, caused by
handling `launch-7<submit-3` at the LM, itself caused by the submission `submit-3` at a GM: a
task's story can be followed from GM to LM to worker and back one id at a time, and an id
never grows along a chain (heartbeat -> launch -> reply -> launch ...). The ids depend on the
order of stimuli only, so a seeded simulation repeats them exactly.

Nothing here does I/O, and routing a command allocates nothing but its event and its id: the
simulator routes millions of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter
from typing import Any

from common.commands import (
    CheckpointOnWorker,
    ContinuePass,
    JobEnded,
    KillTask,
    Log,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
    RunTask,
    SendCancel,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
    StartOnWorker,
    StopOnWorker,
)
from common.events import (
    CancelRequested,
    HeartbeatReceived,
    JobReprioritized,
    LaunchRequested,
    LMReplied,
    PassContinued,
    PreemptRequested,
    ReprioritizeRequested,
    TaskAssigned,
    TaskCancelled,
    TaskCheckpointRequested,
    TaskEventReceived,
    TaskRestored,
    WorkerTaskCheckpointed,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
    WorkerTaskSuspended,
)
from common.reasons import Reason

GM, LM, WORKER = "gm", "lm", "worker"  # the roles, as drivers name them

# --- stimulus ids --------------------------------------------------------------------------------


class StimulusIds:
    """One driver's stimulus ids: `tag-n` for a stimulus from outside, `tag-n<cause` for one a
    command caused (see the module's docstring). `prefix` keeps the ids of several processes
    apart (a service's name); a single-process driver needs none."""

    __slots__ = ("_cause", "_next", "_own", "prefix")

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._next = itertools.count(1).__next__
        # The commands of one event share its id as their cause: its own part is cut once.
        self._cause: str | None = None
        self._own = ""

    def new(self, tag: str) -> str:
        """The id of a stimulus from outside the cores."""
        return f"{self.prefix}{tag}-{self._next()}"

    def caused(self, tag: str, cause: str) -> str:
        """The id of an event caused by handling the stimulus `cause` (a whole id: only its
        own `tag-n` part is kept, so ids stay short along any chain)."""
        if cause is not self._cause:
            self._cause = cause
            self._own = cause.partition("<")[0]
        return f"{self.prefix}{tag}-{self._next()}<{self._own}"


def own_part(stimulus_id: str) -> str:
    """`launch-7` of `launch-7<submit-3`: what the ids it causes name it by."""
    return stimulus_id.partition("<")[0]


def cause_of(stimulus_id: str) -> str | None:
    """`submit-3` of `launch-7<submit-3`; None for a stimulus from outside the cores."""
    _, separator, cause = stimulus_id.partition("<")
    return cause if separator else None


# --- the worker's report, as its LM takes it -----------------------------------------------------


def worker_report_event(
    worker: str, report: ReportToLM, stimulus_id: str
) -> (WorkerTaskStarted | WorkerTaskFinished | WorkerTaskFailed | WorkerTaskSuspended
      | WorkerTaskCheckpointed):
    """What a worker's report is to its LM, in every driver (the LM service decodes a
    `WorkerReport` into a `ReportToLM` and comes here too).

    The LM has no separate "the worker cancelled it" event: for the LM a cancelled attempt is
    one that ended without finishing, which is what `WorkerTaskFailed` means; its detail starts
    with `cancelled` so the cause stays readable in the story and the event log. A failure's
    detail is the worker's own.
    """
    kind = report.kind
    if kind is Reason.STARTED:
        return WorkerTaskStarted(stimulus_id, worker, report.attempt_id, report.at)
    if kind is Reason.SUSPENDED:
        return WorkerTaskSuspended(stimulus_id, worker, report.attempt_id, report.at)
    if kind is Reason.FINISHED:
        runtime = report.runtime
        return WorkerTaskFinished(stimulus_id, worker, report.attempt_id,
                                  0.0 if runtime is None else runtime)
    if kind is Reason.CHECKPOINTED:
        return WorkerTaskCheckpointed(stimulus_id, worker, report.attempt_id,
                                      0.0 if report.work is None else report.work)
    detail = report.detail
    if kind is Reason.CANCELLED:
        detail = f"cancelled: {detail}" if detail else "cancelled"
    return WorkerTaskFailed(stimulus_id, worker, report.attempt_id, detail, report.work)


# --- the routes ----------------------------------------------------------------------------------


class Receiver(Enum):
    """Which actor of a route's role receives the event:

    - NAMED: the one the command names (`SendLaunch.lm`);
    - EVERY: every one (an LM's heartbeat goes to every GM, as one event);
    - WORKERS_LM: the LM of the sending worker (a report names none: a worker has exactly
      one, and its driver knows which);
    - SELF: the sender itself (a GM's bounded pass goes on: `ContinuePass`), with no delay
      but behind what already waits for it.
    """

    NAMED = "named"
    EVERY = "every"
    WORKERS_LM = "workers_lm"
    SELF = "self"


@dataclass(frozen=True, slots=True)
class Route:
    """How one kind of command reaches another core.

    `event(source, command, stimulus_id)` builds the event, `source` being the id of the actor
    whose core returned the command; `name_of(command)` is the receiver's id for a `NAMED`
    receiver. `deliver` and `receiver` put the pieces together; a driver that routes millions
    of commands (the simulator) picks the pieces once per command type instead.
    """

    role: str
    tag: str  # the kind of the delivered event's stimulus id
    event: Callable[[str, Any, str], Any]
    to: Receiver = Receiver.NAMED
    name_of: Callable[[Any], str] | None = None

    def deliver(self, source: str, command: object, cause: str | None,
                ids: StimulusIds) -> object:
        """The event to deliver, its stimulus id derived from `cause`, the id of the stimulus
        whose handling produced `command` (None: unknown to the driver, as for a command a
        test hands in itself; the event's id then names no cause)."""
        stimulus_id = ids.new(self.tag) if cause is None else ids.caused(self.tag, cause)
        return self.event(source, command, stimulus_id)

    def receiver(self, source: str, command: object,
                 lm_of_worker: Mapping[str, str]) -> str | None:
        """The receiving actor's id; None: every actor of the role."""
        if self.to is Receiver.NAMED:
            return self.name_of(command)
        if self.to is Receiver.WORKERS_LM:
            return lm_of_worker[source]
        if self.to is Receiver.SELF:
            return source
        return None


def _named(role: str, tag: str, event: Callable[[str, Any, str], Any], field: str) -> Route:
    return Route(role, tag, event, Receiver.NAMED, attrgetter(field))


def _continue_pass(source: str, c: ContinuePass, stimulus_id: str) -> PassContinued:
    return PassContinued(stimulus_id)


def _launch(source: str, c: SendLaunch, stimulus_id: str) -> LaunchRequested:
    return LaunchRequested(stimulus_id, source, c.request_id, c.kind, c.placements, c.lm_epoch)


def _preempt(source: str, c: SendPreempt, stimulus_id: str) -> PreemptRequested:
    return PreemptRequested(stimulus_id, source, c.request_id, c.placement, c.victims,
                            c.lm_epoch)


def _cancel(source: str, c: SendCancel, stimulus_id: str) -> CancelRequested:
    return CancelRequested(stimulus_id, source, c.attempt_id)


def _reprioritize(source: str, c: SendReprioritize,
                  stimulus_id: str) -> ReprioritizeRequested:
    return ReprioritizeRequested(stimulus_id, source, c.job_id, c.priority)


def _reply(source: str, c: ReplyToGM, stimulus_id: str) -> LMReplied:
    return LMReplied(stimulus_id, source, c.request_id, c.results, c.snapshot)


def _assign(source: str, c: StartOnWorker, stimulus_id: str) -> TaskAssigned:
    return TaskAssigned(stimulus_id, c.placement)


def _stop(source: str, c: StopOnWorker, stimulus_id: str) -> TaskCancelled:
    return TaskCancelled(stimulus_id, c.attempt_id, c.reason)


def _checkpoint(source: str, c: CheckpointOnWorker,
                stimulus_id: str) -> TaskCheckpointRequested:
    return TaskCheckpointRequested(stimulus_id, c.attempt_ids)


def _restore(source: str, c: RestoreOnWorker, stimulus_id: str) -> TaskRestored:
    return TaskRestored(stimulus_id, c.attempt_id, c.work)


def _reprioritized(source: str, c: ReprioritizeOnWorker,
                   stimulus_id: str) -> JobReprioritized:
    return JobReprioritized(stimulus_id, c.job_id, c.priority)


def _task_event(source: str, c: PublishTaskEvent, stimulus_id: str) -> TaskEventReceived:
    return TaskEventReceived(stimulus_id, c.event)


def _heartbeat(source: str, c: PublishHeartbeat, stimulus_id: str) -> HeartbeatReceived:
    return HeartbeatReceived(stimulus_id, c.snapshot)


ROUTES: dict[type, Route] = {
    # GM -> LM
    SendLaunch: _named(LM, "launch", _launch, "lm"),
    SendPreempt: _named(LM, "preempt", _preempt, "lm"),
    SendCancel: _named(LM, "cancel", _cancel, "lm"),
    SendReprioritize: _named(LM, "reprio", _reprioritize, "lm"),
    # LM -> GM
    ReplyToGM: _named(GM, "reply", _reply, "gm"),
    PublishTaskEvent: _named(GM, "taskev", _task_event, "gm"),
    PublishHeartbeat: Route(GM, "hb", _heartbeat, Receiver.EVERY),
    # LM -> worker
    StartOnWorker: _named(WORKER, "assign", _assign, "worker"),
    StopOnWorker: _named(WORKER, "stop", _stop, "worker"),
    CheckpointOnWorker: _named(WORKER, "ckpt", _checkpoint, "worker"),
    RestoreOnWorker: _named(WORKER, "restore", _restore, "worker"),
    ReprioritizeOnWorker: _named(WORKER, "reprio", _reprioritized, "worker"),
    # worker -> its LM
    ReportToLM: Route(LM, "report", worker_report_event, Receiver.WORKERS_LM),
    # GM -> itself
    ContinuePass: Route(GM, "pass", _continue_pass, Receiver.SELF),
}
"""Command type -> how it reaches another core."""

OWN_EFFECTS: frozenset[type] = frozenset({Log, JobEnded, RunTask, KillTask})
"""Commands that reach no other core: the driver carries them out itself (writes the log
line, forgets the ended job, holds or releases a task's resources)."""
