"""Every message between roles that crosses a process boundary, one row each: the command the
sending core returns, the event the receiving core handles, the wire model it travels as, its
converters, and the HTTP route or RabbitMQ exchange that carries it.

A message is declared in five places: its command (common/commands.py), its event
(common/events.py), its route from one to the other (`ROUTES`, common/routing.py, which the
simulator and the test harness deliver by), its wire model and converters (common/wire.py), and
the service route that receives it (services/). This table names them together, and
tests/unit/test_message_table.py checks that they agree: each command that `ROUTES` sends to
another role has a row; the row's receiver and event are `ROUTES`' own; a sample command
encoded, sent as JSON and decoded is the event `ROUTES` delivers in memory; and the service
that serves the row's routes has them. So adding a message is: the command, the event, the
route, the wire model and converters, the service's route, and a row here, and the test names
whatever is missing.

Pure data and functions, like the rest of common/: the services use the converters in
common/wire.py directly; the few small decoders below exist where a service decodes a message
inside a larger one (a worker's batch, a broker message of task events) and say how one
message alone becomes its event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from common.commands import (
    CheckpointOnWorker,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
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
from common.routing import GM, LM, WORKER
from common.wire import (
    CancelRequest,
    LaunchRequest,
    LMReply,
    LMSnapshotWire,
    PlacementWire,
    PreemptRequest,
    ReprioritizeRequest,
    ReprioritizeWire,
    RestoreWire,
    StopWire,
    TaskEventWire,
    TopologyCache,
    WorkerBatchWire,
    WorkerReport,
    cancel_request_to_wire,
    cancel_requested_from_wire,
    checkpoint_requested_from_wire,
    heartbeat_from_wire,
    job_reprioritized_from_wire,
    launch_request_to_wire,
    launch_requested_from_wire,
    lm_replied_from_wire,
    placement_from_wire,
    placement_to_wire,
    preempt_request_to_wire,
    preempt_requested_from_wire,
    reply_to_wire,
    report_to_wire,
    reprioritize_request_to_wire,
    reprioritize_requested_from_wire,
    restore_to_wire,
    snapshot_to_wire,
    stop_to_wire,
    task_event_from_wire,
    task_event_to_wire,
    task_restored_from_wire,
    worker_batch_to_wire,
    worker_report_to_event,
    worker_reprioritize_to_wire,
)

# (command, the sending actor's id) -> the wire model
Encode = Callable[[Any, str], BaseModel]
# (wire model, stimulus id, the receiver's topologies) -> the event; only a snapshot needs the
# topologies (a GM keeps one cache for every LM's, common/wire.py TopologyCache)
Decode = Callable[[Any, str, TopologyCache], Any]


@dataclass(frozen=True, slots=True)
class Message:
    """One kind of message from a core of role `sender` to one of role `receiver`.

    Carried either over HTTP, as the body of a request to one of `routes` ("POST /v1/launch")
    of the receiver's service, or, with `answers`, as the answer of the sender's service to
    such a request; or over RabbitMQ, published on `exchange`. `wire` is the model of one
    message: several travel in one request or broker message where the carrier is a batch.
    """

    sender: str
    receiver: str
    command: type
    event: type | tuple[type, ...]  # several: the command's content decides which
    wire: type[BaseModel]
    encode: Encode
    decode: Decode
    routes: tuple[str, ...] = ()
    answers: bool = False
    exchange: str = ""

    @property
    def server(self) -> str | None:
        """The role whose service serves `routes` (None: not carried over HTTP)."""
        if not self.routes:
            return None
        return self.sender if self.answers else self.receiver


def _alone(decode: Callable[[Any, str], Any]) -> Decode:
    """A decoder that needs no topologies, in the table's shape."""
    return lambda wire, stimulus_id, _topologies: decode(wire, stimulus_id)


def _task_assigned(wire: PlacementWire, stimulus_id: str) -> TaskAssigned:
    return TaskAssigned(stimulus_id, placement_from_wire(wire))


def _task_cancelled(wire: StopWire, stimulus_id: str) -> TaskCancelled:
    return TaskCancelled(stimulus_id, wire.attempt_id, Reason(wire.reason))


def _task_event_received(wire: TaskEventWire, stimulus_id: str) -> TaskEventReceived:
    # the GM service takes a broker message's events together (`TaskEventsReceived`)
    return TaskEventReceived(stimulus_id, task_event_from_wire(wire))


# what a worker's report is to its LM, by its kind (common/routing.py worker_report_event)
WORKER_REPORT_EVENTS = (WorkerTaskStarted, WorkerTaskFinished, WorkerTaskFailed,
                        WorkerTaskSuspended, WorkerTaskCheckpointed)
LAUNCH_ROUTES = ("POST /v1/launch", "POST /v1/repartition")  # by the request's kind
WORKER_BATCH_ROUTE = "POST /v1/tasks/batch"

# Each row: sender, receiver, command, event, wire model, encode, decode; then what carries it.
MESSAGES: tuple[Message, ...] = (
    # GM -> LM: requests, each launch or preemption answered by a ReplyToGM
    Message(GM, LM, SendLaunch, LaunchRequested, LaunchRequest,
            launch_request_to_wire, _alone(launch_requested_from_wire),
            routes=LAUNCH_ROUTES),
    Message(GM, LM, SendPreempt, PreemptRequested, PreemptRequest,
            preempt_request_to_wire, _alone(preempt_requested_from_wire),
            routes=("POST /v1/preempt",)),
    Message(GM, LM, SendCancel, CancelRequested, CancelRequest,
            cancel_request_to_wire, _alone(cancel_requested_from_wire),
            routes=("POST /v1/cancel",)),
    Message(GM, LM, SendReprioritize, ReprioritizeRequested, ReprioritizeRequest,
            reprioritize_request_to_wire, _alone(reprioritize_requested_from_wire),
            routes=("POST /v1/reprioritize",)),
    # LM -> GM
    Message(LM, GM, ReplyToGM, LMReplied, LMReply, reply_to_wire, lm_replied_from_wire,
            routes=(*LAUNCH_ROUTES, "POST /v1/preempt"), answers=True),
    Message(LM, GM, PublishTaskEvent, TaskEventReceived, TaskEventWire,
            lambda command, _lm: task_event_to_wire(command.event),
            _alone(_task_event_received), exchange="megha.task_events"),
    Message(LM, GM, PublishHeartbeat, HeartbeatReceived, LMSnapshotWire,
            lambda command, _lm: snapshot_to_wire(command.snapshot), heartbeat_from_wire,
            exchange="megha.heartbeats"),
    # LM -> worker: one batch per request (WorkerBatchWire); a start may also come alone
    Message(LM, WORKER, StartOnWorker, TaskAssigned, PlacementWire,
            lambda command, _lm: placement_to_wire(command.placement), _alone(_task_assigned),
            routes=(WORKER_BATCH_ROUTE, "POST /v1/tasks")),
    Message(LM, WORKER, StopOnWorker, TaskCancelled, StopWire,
            lambda command, _lm: stop_to_wire(command), _alone(_task_cancelled),
            routes=(WORKER_BATCH_ROUTE,)),
    Message(LM, WORKER, ReprioritizeOnWorker, JobReprioritized, ReprioritizeWire,
            lambda command, _lm: worker_reprioritize_to_wire(command),
            _alone(job_reprioritized_from_wire), routes=(WORKER_BATCH_ROUTE,)),
    # a checkpoint request is a list of attempt ids in the batch, with no model of its own
    Message(LM, WORKER, CheckpointOnWorker, TaskCheckpointRequested, WorkerBatchWire,
            lambda command, _lm: worker_batch_to_wire([command]),
            _alone(checkpoint_requested_from_wire), routes=(WORKER_BATCH_ROUTE,)),
    Message(LM, WORKER, RestoreOnWorker, TaskRestored, RestoreWire,
            lambda command, _lm: restore_to_wire(command), _alone(task_restored_from_wire),
            routes=(WORKER_BATCH_ROUTE,)),
    # worker -> its LM: in order, in batches (WorkerReportBatch); the event depends on the kind
    Message(WORKER, LM, ReportToLM, WORKER_REPORT_EVENTS, WorkerReport,
            report_to_wire, _alone(worker_report_to_event),
            routes=("POST /v1/worker/reports", "POST /v1/worker/report")),
)
"""Every message between roles, by the command that sends it."""

BY_COMMAND: dict[type, Message] = {message.command: message for message in MESSAGES}
