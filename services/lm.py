"""The Local Master service: the truth about one cluster, behind HTTP and RabbitMQ.

The judgement (launch, repartition, preemption, worker liveness, recovery after a restart)
is the core's `LocalMaster` (common/lm.py); this shell turns GM requests, worker reports and
heartbeats and a clock into its events, and carries out its commands:

- `ReplyToGM` is the answer to the HTTP request that caused it;
- `StartOnWorker` / `StopOnWorker` (and `ReprioritizeOnWorker`, with local queues or copies;
  `CheckpointOnWorker` / `RestoreOnWorker`, with copies): queued in the worker's outbox
  (services/batching.py), which keeps one
  `POST /v1/tasks/batch` to that worker in flight and puts whatever queued meanwhile in the
  next one; a batch is retried a few times, then its starts are reported to the core
  as failed dispatches (their attempts end lost and their GMs place them again);
- `PublishTaskEvent`: an outbox drained by one publisher, one message per GM per
  batch, each retried until RabbitMQ confirms it, so events survive a broker outage and keep
  their order. Every event is first written to a log on disk (services/outbox_wal.py, in
  `MEGHA_STATE_DIR/<lm>`) and marked published once RabbitMQ confirms it, so they survive the
  LM's death too: a restarted LM publishes what its predecessor had not, before anything new.
  A worker's reports are answered once their events are fsynced. Bounded: at
  `limits.lm_task_event_outbox` events the core is told
  (`TaskEventBacklog`) and refuses new work until half have left;
- `PublishHeartbeat`: published if RabbitMQ is there, dropped if not (the next one replaces it).

A process always starts recovering: until its workers have told it what they run (or the
worker timeout passes) it refuses launches, so a restarted LM cannot over-commit a node whose
tasks it has not yet learnt. Its epoch is the wall clock in milliseconds (and above the
last one recorded in its state folder, should the clock have stepped back), so its snapshots
supersede those of the previous incarnation.

HTTP API (bodies are common/wire.py models; invalid ones are 422 with pydantic's detail):

    POST /v1/launch           LaunchRequest, kind "launch"      -> 200 LMReply
    POST /v1/repartition      LaunchRequest, kind "repartition" -> 200 LMReply
    POST /v1/preempt          PreemptRequest                    -> 200 LMReply
    POST /v1/cancel           {gm, attempt_id}                  -> 202 {attempt_id, cancelled}
    POST /v1/reprioritize     {gm, job_id, priority}            -> 202 {job_id}
    POST /v1/worker/report    WorkerReport                      -> 202
    POST /v1/worker/reports   WorkerReportBatch (in order)      -> 202
    POST /v1/worker/heartbeat WorkerHeartbeatWire               -> 202
    GET  /v1/state            {lm, epoch, recovering, snapshot: LMSnapshotWire, ...}
    GET  /v1/debug/story/{key}, /healthz, /metrics

Every route but /healthz and /metrics needs the cluster token (services/auth.py), and the LM
sends it to its workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import Counter, Gauge

from api.peers import PeerClient, PeerUnreachable, request_with_retry
from common.commands import (
    CheckpointOnWorker,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
    StartOnWorker,
    StopOnWorker,
)
from common.events import DispatchFailed, TaskEventBacklog, Tick
from common.federation import Federation
from common.lm import LocalMaster
from common.startlog import lm_capacity
from common.wire import (
    CancelRequest,
    LaunchRequest,
    PreemptRequest,
    ReprioritizeRequest,
    TaskEventBatchWire,
    TaskEventWire,
    WorkerHeartbeatWire,
    WorkerReport,
    WorkerReportBatch,
    cancel_requested_from_wire,
    launch_requested_from_wire,
    preempt_requested_from_wire,
    reply_to_wire,
    reprioritize_requested_from_wire,
    snapshot_to_wire,
    task_event_to_wire,
    worker_batch_to_wire,
    worker_heartbeat_from_wire,
    worker_report_to_event,
)
from services.auth import AuthConfig, auth_from_env, seal, secure_app
from services.batching import BatchSender
from services.broker import HEARTBEAT_EXCHANGE, TASK_EVENTS_EXCHANGE, Broker, BrokerUnavailable
from services.eventlog import EventLog
from services.http import (
    PeerLink,
    add_shared_routes,
    body_error,
    build_and_serve,
    lifespan_of,
    log_crashes,
    parse_body,
    read_service_env,
    required_env,
    wire_body,
    wire_response,
)
from services.outbox_wal import RecordId, TaskEventLog, next_epoch
from services.runtime import CoreRunner

if TYPE_CHECKING:
    from api.endpoints import Endpoints
    from common.wire import WorkerCommand

WORKER_CALL_TRIES = 5  # ~1.5 s of backoff: then the worker timeout takes over
# A worker's outbox holds the starts and stops not yet handed over: the core launches only
# what fits on the worker's nodes, so under any load it stays far below this; past it the
# worker is not taking anything, and a start that cannot queue fails at once.
WORKER_OUTBOX_LIMIT = 5_000
WORKER_BATCH = 500  # items per request to a worker
PUBLISH_TIMEOUT = 5.0
PUBLISH_BATCH = 500  # task events taken from the outbox at once: one message per GM
# Requests to one worker, and task event messages, start at least timing.worker_launch_pace
# and timing.task_event_pace apart when busy: each costs the LM, the peer (and RabbitMQ) a fixed
# price, so under load items wait that long at most and share one. Allocation times do not
# include the second (a start carries its worker's clock); GMs hear of it that much later.
MAX_PUBLISH_BACKOFF = 2.0
SHUTDOWN_FLUSH_SECONDS = 2.0
# the `call` label of a best-effort item of a worker's batch that found its outbox full
_WORKER_CALLS = {CheckpointOnWorker: "checkpoint", RestoreOnWorker: "restore",
                 ReprioritizeOnWorker: "reprioritize"}


@dataclass(frozen=True, slots=True)
class _OutgoingEvent:
    gm: str
    event: TaskEventWire
    record: RecordId | None = None  # its record in the task-event log, if the LM keeps one


class LMService:
    """One LM: its core, the calls to its workers, and its two ways out to RabbitMQ."""

    def __init__(self, federation: Federation, lm_id: str, endpoints: Endpoints,
                 amqp_url: str, *, epoch: int | None = None, recovering: bool = True,
                 log: EventLog | None = None, state_dir: Path | None = None,
                 peer_headers: dict[str, str] | None = None) -> None:
        topology = federation.topology(lm_id)
        timing = federation.timing
        now = time.time()
        self.lm_id = lm_id
        self.timing = timing
        self.log = log or EventLog(lm_id)
        if epoch is None:
            epoch = int(now * 1000) if state_dir is None else next_epoch(state_dir,
                                                                          int(now * 1000))
        self.core = LocalMaster(
            topology, now=now, epoch=epoch,
            heartbeat_interval=timing.heartbeat_interval, worker_timeout=timing.worker_timeout,
            heartbeat_keepalive=timing.heartbeat_keepalive,
            recovering=recovering, **federation.lm_options())
        self.runner = CoreRunner(self.core, lm_id, self.log)
        self.gms = frozenset(federation.gms)
        self.capacity = lm_capacity(federation, lm_id)  # logged at start, for megha inspect
        # every worker's address up front: a missing one is a deployment error, found now
        self.worker_urls = {worker: endpoints.url(worker) for worker in set(topology.workers)}
        self.broker = Broker(amqp_url, lm_id, events=self.log.emit)
        self.task_events: asyncio.Queue[_OutgoingEvent] = asyncio.Queue()
        self.outbox_limit = federation.limits.lm_task_event_outbox
        # without a state folder (tests of the shell alone) the outbox lives in memory only
        self.event_log = None if state_dir is None else TaskEventLog(state_dir, epoch)
        self.replayed = 0
        if self.event_log is not None:  # what an earlier incarnation left goes out first
            for pending in self.event_log.recover():
                self.task_events.put_nowait(_OutgoingEvent(
                    pending.gm, TaskEventWire.model_validate(pending.event), pending.id))
            self.replayed = self.task_events.qsize()
        self._publishing: int | None = None  # events taken from the queue, not confirmed yet
        self.broker_link = PeerLink(self.log, "task_events_delayed", "task_events_flowing",
                                    {"lm": lm_id})
        self.client = PeerClient(headers=peer_headers)  # the cluster token, to workers
        self.worker_outboxes = {
            worker: BatchSender(worker, lambda batch, w=worker: self._send_to_worker(w, batch),
                                max_batch=WORKER_BATCH, limit=WORKER_OUTBOX_LIMIT,
                                min_interval=timing.worker_launch_pace,
                                on_error=self._outbox_failed)
            for worker in sorted(self.worker_urls)}
        self.runner.on(StartOnWorker, self._queue_start)
        self.runner.on(StopOnWorker, self._queue_stop)
        self.runner.on(CheckpointOnWorker, self._queue_to_worker)
        self.runner.on(RestoreOnWorker, self._queue_to_worker)
        self.runner.on(ReprioritizeOnWorker, self._queue_to_worker)
        self.runner.on(PublishTaskEvent, self._queue_task_event)
        self.runner.on(PublishHeartbeat, self._publish_heartbeat)
        self._metrics()

    def _metrics(self) -> None:
        registry = self.runner.registry
        self.launch_results = Counter("megha_lm_launch_results_total",
                                      "Verdicts on launch, repartition and preemption items",
                                      ["kind", "reason"], registry=registry)
        self.task_events_published = Counter("megha_lm_task_events_published_total",
                                             "Task events confirmed by RabbitMQ", ["kind"],
                                             registry=registry)
        self.heartbeats = Counter("megha_lm_heartbeats_total", "Heartbeats to the GMs",
                                  ["result"], registry=registry)
        self.worker_calls_failed = Counter("megha_lm_worker_calls_failed_total",
                                           "Calls to worker agents given up", ["call"],
                                           registry=registry)
        gauges: dict[str, tuple[str, Callable[[], float]]] = {
            "megha_lm_running_attempts": ("Attempts running on this LM's nodes",
                                          lambda: len(self.core.running)),
            "megha_lm_nodes_up": ("Nodes whose worker is alive",
                                  lambda: self.core.state.up.count(1)),
            "megha_lm_recovering": ("1 while learning what the workers run",
                                    lambda: int(self.core.recovering)),
            "megha_lm_task_event_outbox": ("Task events waiting for RabbitMQ",
                                           self.outbox_size),
            "megha_lm_worker_outbox": ("Starts and stops not yet handed to workers",
                                       lambda: sum(map(len, self.worker_outboxes.values()))),
        }
        for name, (description, read) in gauges.items():
            Gauge(name, description, registry=registry).set_function(read)

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.client.start()
        self.log.emit("lm_started", {
            "lm": self.lm_id, "epoch": self.core.epoch, "recovering": self.core.recovering,
            "workers": sorted(self.worker_urls)} | self.capacity)
        if self.event_log is not None:
            # a damaged tail of the log was moved to a file of its own: say where and why
            aside = self.event_log.set_aside
            self.log.emit("task_events_recovered", {
                "lm": self.lm_id, "count": self.replayed, "path": str(self.event_log.path),
                "torn_tail": self.event_log.dropped_tail} | ({} if aside is None else {
                    "set_aside": str(aside.path), "set_aside_bytes": aside.size,
                    "set_aside_lines": aside.lines, "set_aside_intact": aside.intact,
                    "set_aside_reason": aside.reason}))
            if self.replayed:
                self._check_backlog()
        # not waiting for RabbitMQ: GMs and workers are served while it is away
        await self.broker.start(wait=False)
        self._spawn(self._drain_task_events(), "task-events")
        for worker, outbox in self.worker_outboxes.items():
            self._spawn(outbox.run(), f"to {worker}")
        self._spawn(self.runner.tick_forever(
            self.timing.tick_interval, lambda: Tick(self.runner.stimulus("tick"))), "tick")

    async def stop(self) -> None:
        # a graceful stop hands what it still holds to RabbitMQ, if RabbitMQ is there
        if self.broker.connected and self.outbox_size():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.task_events.join(), SHUTDOWN_FLUSH_SECONDS)
        if self.outbox_size():
            self.log.emit("task_events_abandoned", {"lm": self.lm_id,
                                                    "count": self.outbox_size(),
                                                    "kept_on_disk": self.event_log is not None})
        await self.runner.stop()
        await self.broker.close()
        await self.client.close()
        if self.event_log is not None:  # what is left is published by the next incarnation
            self.event_log.close()

    def _spawn(self, coroutine: Awaitable, name: str) -> asyncio.Task:
        return log_crashes(self.runner.spawn(coroutine, name), self.log)

    # -- requests from GMs -----------------------------------------------------------------------

    def _check_gm(self, gm: str) -> None:
        if gm not in self.gms:
            raise body_error("gm", f"unknown GM {gm!r} (known: {', '.join(sorted(self.gms))})",
                             gm)

    def launch(self, wire: LaunchRequest) -> Response:
        self._check_gm(wire.gm)
        event = launch_requested_from_wire(wire, self.runner.stimulus(wire.kind))
        return self._reply(wire.kind, self.runner.handle(event), wire.known_epoch)

    def preempt(self, wire: PreemptRequest) -> Response:
        self._check_gm(wire.gm)
        event = preempt_requested_from_wire(wire, self.runner.stimulus("preempt"))
        return self._reply("preempt", self.runner.handle(event), wire.known_epoch)

    def _reply(self, kind: str, commands: list, known_epoch: int | None) -> Response:
        # the core answers every request with exactly one ReplyToGM, left to us by the runner
        (reply,) = (command for command in commands if isinstance(command, ReplyToGM))
        for result in reply.results:
            self.launch_results.labels(kind, str(result.reason)).inc()
        return wire_response(reply_to_wire(reply, self.lm_id, known_epoch))

    def cancel(self, wire: CancelRequest) -> dict:
        self._check_gm(wire.gm)
        attempt = self.core.running.get(wire.attempt_id)
        cancelled = attempt is not None and attempt.placement.gm == wire.gm
        self.runner.handle(cancel_requested_from_wire(wire, self.runner.stimulus("cancel")))
        return {"attempt_id": wire.attempt_id, "cancelled": cancelled}

    def reprioritize(self, wire: ReprioritizeRequest) -> dict:
        """A job's new priority: the workers holding its attempts here are told (queued in
        their outboxes; a request about a job not here changes nothing)."""
        self._check_gm(wire.gm)
        self.runner.handle(reprioritize_requested_from_wire(
            wire, self.runner.stimulus("reprioritize")))
        return {"job_id": wire.job_id}

    # -- from workers ----------------------------------------------------------------------------

    def _check_worker(self, worker: str) -> None:
        # a report under a foreign name would make the core track a worker it has no nodes of
        if worker not in self.worker_urls:
            known = ", ".join(sorted(self.worker_urls))
            raise body_error("worker", f"{worker!r} is not a worker of {self.lm_id} "
                                       f"(known: {known})", worker)

    def worker_report(self, wire: WorkerReport) -> None:
        self._check_worker(wire.worker)
        self.runner.handle(worker_report_to_event(wire, self.runner.stimulus("report")))

    def worker_reports(self, wire: WorkerReportBatch) -> None:
        """A batch from one worker, applied in its order; all checked before any applied."""
        for report in wire.reports:
            self._check_worker(report.worker)
        for report in wire.reports:
            self.runner.handle(worker_report_to_event(report, self.runner.stimulus("report")))

    def worker_heartbeat(self, wire: WorkerHeartbeatWire) -> None:
        self._check_worker(wire.worker)
        self.runner.handle(worker_heartbeat_from_wire(wire, self.runner.stimulus("worker_hb")))

    # -- to workers ------------------------------------------------------------------------------

    def _queue_start(self, command: StartOnWorker) -> None:
        if not self.worker_outboxes[command.worker].offer(command):
            # after the core's current event, not inside it
            asyncio.get_running_loop().call_soon(
                self._dispatch_failed, command.worker, command.placement.attempt_id,
                f"outbox to {command.worker} full ({WORKER_OUTBOX_LIMIT})")

    def _queue_stop(self, command: StopOnWorker) -> None:
        if not self.worker_outboxes[command.worker].offer(command):
            # the attempt is already ended here; the worker's next heartbeat still lists it,
            # and the core answers that with another stop
            self.worker_calls_failed.labels("stop").inc()
            self.log.emit("worker_call_failed", {
                "lm": self.lm_id, "worker": command.worker, "attempt": command.attempt_id,
                "call": "stop", "error": f"outbox full ({WORKER_OUTBOX_LIMIT})"})

    def _queue_to_worker(self, command: CheckpointOnWorker | RestoreOnWorker
                         | ReprioritizeOnWorker) -> None:
        """A checkpoint request or a restore for a redundant copy's task, or a job's new
        priority: best effort (a lost one leaves a copy behind its best, or a queued task
        with its older key, nothing worse)."""
        if not self.worker_outboxes[command.worker].offer(command):
            self.worker_calls_failed.labels(_WORKER_CALLS[type(command)]).inc()

    async def _send_to_worker(self, worker: str, batch: Sequence[WorkerCommand]) -> None:
        """One request with everything queued for `worker`, retried a few times."""
        starts = [c for c in batch if isinstance(c, StartOnWorker)]
        stops = [c for c in batch if isinstance(c, StopOnWorker)]
        body = worker_batch_to_wire(batch).model_dump_json()
        url = f"{self.worker_urls[worker]}/v1/tasks/batch"
        try:
            response = await request_with_retry(self.client, "POST", url, body=body,
                                                attempts=WORKER_CALL_TRIES)
        except PeerUnreachable as error:
            self.log.emit("worker_call_failed", {
                "lm": self.lm_id, "worker": worker, "call": "batch", "starts": len(starts),
                "stops": len(stops), "error": str(error)[:300]})
            self.worker_calls_failed.labels("start").inc(len(starts))
            self.worker_calls_failed.labels("stop").inc(len(stops))
            for command in starts:  # they never got there: their GMs should place them again
                self._dispatch_failed(worker, command.placement.attempt_id, str(error)[:200])
            return
        if response.status_code >= 400:
            self.worker_calls_failed.labels("batch").inc()
            self.log.emit("worker_call_refused", {
                "lm": self.lm_id, "worker": worker, "call": "batch",
                "status": response.status_code, "detail": response.text[:300]})
            return
        for item in response.json().get("refused", []):
            self.worker_calls_failed.labels("start").inc()
            self.log.emit("worker_call_refused", {
                "lm": self.lm_id, "worker": worker, "call": "start",
                "attempt": item.get("attempt_id"), "detail": str(item.get("detail"))[:300]})

    def _dispatch_failed(self, worker: str, attempt_id: str, detail: str) -> None:
        self.runner.handle(DispatchFailed(self.runner.stimulus("dispatch_failed"), worker,
                                          attempt_id, detail))

    def _outbox_failed(self, name: str, error: BaseException) -> None:
        self.log.emit("background_task_failed", {"task": f"to {name}",
                                                 "error": repr(error)[:500]})

    # -- to RabbitMQ -----------------------------------------------------------------------------

    def _queue_task_event(self, command: PublishTaskEvent) -> None:
        wire = task_event_to_wire(command.event)
        record = (None if self.event_log is None else
                  self.event_log.append(command.gm, wire.model_dump(mode="json")))
        self.task_events.put_nowait(_OutgoingEvent(command.gm, wire, record))
        if not self.core.backlogged and self.outbox_size() >= self.outbox_limit:
            # after the core's current event, not inside it
            asyncio.get_running_loop().call_soon(self._check_backlog)

    def _check_backlog(self) -> None:
        """Tell the core when the outbox fills up, and when it has half drained again."""
        size = self.outbox_size()
        full = size >= self.outbox_limit if not self.core.backlogged else (
            size > self.outbox_limit // 2)
        if full != self.core.backlogged:
            self.runner.handle(TaskEventBacklog(self.runner.stimulus("backlog"), full, size))

    async def _drain_task_events(self) -> None:
        """The only publisher of task events: what queued meanwhile, one message per GM.

        Each batch's messages are published in order on the one channel and their confirms
        awaited together; a message that is not confirmed is published again, so an event can
        arrive twice (at least once): GMs take task events idempotently by attempt id and
        kind. One message per event cost the LM, RabbitMQ and the GM each a fixed price per
        event, and under load completions reached GMs tens of seconds late
        (benchmarks/bench_services.py).
        """
        loop = asyncio.get_running_loop()
        next_at = 0.0
        while True:
            batch = [await self.task_events.get()]
            wait = next_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            next_at = loop.time() + self.timing.task_event_pace
            while len(batch) < PUBLISH_BATCH and not self.task_events.empty():
                batch.append(self.task_events.get_nowait())
            self._publishing = len(batch)
            by_gm: dict[str, list[_OutgoingEvent]] = {}
            for item in batch:
                by_gm.setdefault(item.gm, []).append(item)
            delay = 0.1
            while by_gm:
                messages = list(by_gm.items())
                results = await asyncio.gather(*(
                    self.broker.publish(
                        TASK_EVENTS_EXCHANGE, gm,
                        TaskEventBatchWire(events=[i.event for i in items])
                        .model_dump_json().encode(),
                        persistent=True, timeout=PUBLISH_TIMEOUT)
                    for gm, items in messages), return_exceptions=True)
                for (gm, items), result in zip(messages, results, strict=True):
                    if isinstance(result, BaseException):
                        continue
                    del by_gm[gm]
                    if self.event_log is not None:
                        self.event_log.published([i.record for i in items])
                    for item in items:
                        self.task_events_published.labels(item.event.kind).inc()
                        self.task_events.task_done()
                if by_gm:
                    error = next(r for r in results if isinstance(r, BaseException))
                    self.broker_link.failed(str(error), pending=self.outbox_size())
                    await asyncio.sleep(delay)
                    delay = min(MAX_PUBLISH_BACKOFF, delay * 2)
                self._publishing = sum(map(len, by_gm.values())) or None
            self.broker_link.answered(pending=self.outbox_size())
            if self.core.backlogged:
                self._check_backlog()

    def outbox_size(self) -> int:
        return self.task_events.qsize() + (self._publishing or 0)

    async def task_events_durable(self) -> None:
        """Every task event made so far is on disk (one fsync for every caller meanwhile):
        awaited before a worker's reports are answered, since the worker forgets them then."""
        if self.event_log is not None:
            await self.event_log.sync()

    def _publish_heartbeat(self, command: PublishHeartbeat) -> None:
        if not self.broker.connected:
            self.heartbeats.labels("dropped").inc()
            return
        body = snapshot_to_wire(command.snapshot).model_dump_json().encode()
        self._spawn(self._send_heartbeat(body), "heartbeat")

    async def _send_heartbeat(self, body: bytes) -> None:
        try:
            # no longer than an interval: by then the next heartbeat replaces this one
            await self.broker.publish(HEARTBEAT_EXCHANGE, "", body,
                                      timeout=self.timing.heartbeat_interval)
            self.heartbeats.labels("published").inc()
        except BrokerUnavailable:
            self.heartbeats.labels("dropped").inc()

    # -- questions -------------------------------------------------------------------------------

    def state(self) -> dict:
        snapshot = json.loads(snapshot_to_wire(self.core.snapshot()).model_dump_json())
        return {"lm": self.lm_id, "epoch": self.core.epoch, "recovering": self.core.recovering,
                "broker_connected": self.broker.connected,
                "task_event_outbox": self.outbox_size(), "task_event_outbox_limit":
                self.outbox_limit, "backlogged": self.core.backlogged,
                "task_event_log": None if self.event_log is None else {
                    "pending": self.event_log.pending(), "records": self.event_log.size()},
                "worker_outbox": {w: len(o) for w, o in self.worker_outboxes.items()},
                "snapshot": snapshot}


def create_app(federation: Federation, lm_id: str, endpoints: Endpoints, amqp_url: str, *,
               epoch: int | None = None, recovering: bool = True,
               log: EventLog | None = None, state_dir: Path | None = None,
               auth: AuthConfig) -> FastAPI:
    service = LMService(federation, lm_id, endpoints, amqp_url, epoch=epoch,
                        recovering=recovering, log=log, state_dir=state_dir,
                        peer_headers=auth.outgoing_headers())

    app = secure_app(f"megha LM {lm_id}", lifespan_of(service), auth)
    app.state.service = service

    async def launch_body(request: Request, kind: str) -> LaunchRequest:
        """A launch request on the path of its kind (which the body names too)."""
        wire = await parse_body(request, LaunchRequest)
        if wire.kind != kind:
            raise body_error("kind", f"this path takes kind {kind!r}, got {wire.kind!r}",
                             wire.kind)
        return wire

    # The handlers answer with a Response of their own (the wire model's JSON, or no body);
    # `response_class` says which in the OpenAPI document.
    @app.post("/v1/launch", response_class=JSONResponse,
              openapi_extra=wire_body(LaunchRequest))
    async def launch(request: Request) -> Response:
        return service.launch(await launch_body(request, "launch"))

    @app.post("/v1/repartition", response_class=JSONResponse,
              openapi_extra=wire_body(LaunchRequest))
    async def repartition(request: Request) -> Response:
        return service.launch(await launch_body(request, "repartition"))

    @app.post("/v1/preempt", response_class=JSONResponse,
              openapi_extra=wire_body(PreemptRequest))
    async def preempt(request: Request) -> Response:
        return service.preempt(await parse_body(request, PreemptRequest))

    @app.post("/v1/cancel", status_code=202, response_class=JSONResponse,
              openapi_extra=wire_body(CancelRequest))
    async def cancel(request: Request) -> Response:
        return JSONResponse(service.cancel(await parse_body(request, CancelRequest)), 202)

    @app.post("/v1/reprioritize", status_code=202, response_class=JSONResponse,
              openapi_extra=wire_body(ReprioritizeRequest))
    async def reprioritize(request: Request) -> Response:
        return JSONResponse(service.reprioritize(await parse_body(request, ReprioritizeRequest)),
                            202)

    @app.post("/v1/worker/report", status_code=202, response_class=Response,
              openapi_extra=wire_body(WorkerReport))
    async def worker_report(request: Request) -> Response:
        service.worker_report(await parse_body(request, WorkerReport))
        await service.task_events_durable()
        return Response(status_code=202)

    @app.post("/v1/worker/reports", status_code=202, response_class=Response,
              openapi_extra=wire_body(WorkerReportBatch))
    async def worker_reports(request: Request) -> Response:
        service.worker_reports(await parse_body(request, WorkerReportBatch))
        await service.task_events_durable()
        return Response(status_code=202)

    @app.post("/v1/worker/heartbeat", status_code=202, response_class=Response,
              openapi_extra=wire_body(WorkerHeartbeatWire))
    async def worker_heartbeat(request: Request) -> Response:
        service.worker_heartbeat(await parse_body(request, WorkerHeartbeatWire))
        return Response(status_code=202)

    @app.get("/v1/state")
    async def get_state() -> dict:
        return service.state()

    @app.get("/healthz")
    async def healthz() -> dict:
        # healthy while RabbitMQ is away: the outbox holds task events until it is back
        return {"lm": lm_id, "epoch": service.core.epoch, "recovering": service.core.recovering,
                "broker_connected": service.broker.connected,
                "backlogged": service.core.backlogged}

    add_shared_routes(app, service.core, service.runner.registry, service.runner.received)
    return seal(app)


def main() -> None:
    """`python -m services.lm`: MEGHA_CONFIG, MEGHA_ID, MEGHA_ENDPOINTS, MEGHA_AMQP_URL,
    MEGHA_STATE_DIR (default ./state; this LM keeps its task-event log in a folder of its
    own there, which must outlive the process: a volume in a container); the tokens
    (MEGHA_CLUSTER_TOKEN, MEGHA_LM_TOKEN, the GMs' and workers' tokens or digests:
    services/auth.py) and MEGHA_TLS_* (services/http.py)."""
    env = read_service_env()
    state_dir = (Path(os.environ.get("MEGHA_STATE_DIR", "state"))
                 / env.service_id.replace("/", "_"))
    build_and_serve(env, lambda: create_app(env.federation, env.service_id, env.endpoints,
                                            required_env("MEGHA_AMQP_URL"), log=env.log,
                                            state_dir=state_dir,
                                            auth=auth_from_env(env.log, role="lm")))


if __name__ == "__main__":
    main()
