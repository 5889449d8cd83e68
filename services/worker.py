"""The worker agent service: runs the tasks its LM assigns on the nodes it hosts.

The decisions (what runs, what queues, in which order, what is reported) are the core's
`WorkerAgent` (common/worker.py); this shell turns HTTP calls into its events and carries
out its commands:

- `RunTask`: a timer holds the resources for the task's duration (an asyncio task instead
  when it runs until killed, or burns real CPU in a thread with `burn_cpu`), then feeds
  `TaskRunEnded` with the measured wall runtime;
- `KillTask`: cancels that timer or task (no `TaskRunEnded` follows);
- `ReportToLM`: appended to one outbox (services/batching.py) that keeps one
  `POST /v1/worker/reports` in flight and puts whatever queued meanwhile in the next one, so
  reports reach the LM in the order the core made them, survive an LM that is briefly away,
  and cost one request per round trip rather than one per report.

Besides, it heartbeats its LM with everything it runs or queues (how a restarted LM learns
what runs).

HTTP API (called by the LM; bodies are common/wire.py models):

    POST   /v1/tasks                  PlacementWire -> 202 {attempt_id, state}; 422 if invalid.
                                      A duplicate attempt id is refused by the core (logged),
                                      still 202: the LM may retry a POST whose answer it lost.
    POST   /v1/tasks/batch            WorkerBatchWire {start, stop, reprioritize, checkpoint,
                                      restore}: the starts, the stops, the jobs' new
                                      priorities (`JobReprioritized`: queued tasks re-keyed),
                                      then the checkpoint requests (each answered by a
                                      `checkpointed` report) and the restores
                                      -> 200 {started, stopped, refused}
    DELETE /v1/tasks/{attempt_id}     ?reason=cancelled|preempted -> 202 {attempt_id, was} if
                                      it was queued or running, else 404 {detail, state}
    GET    /v1/state                  running and queued placements, free resources per node
    GET    /v1/debug/story/{key}      the core's recorded transitions of an attempt
    GET    /healthz, /metrics

Every route but /healthz and /metrics needs the cluster token (services/auth.py), and the
worker sends it to its LM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import Counter, Gauge

from api.peers import PeerClient, PeerError, PeerUnreachable, request_with_retry
from common.commands import KillTask, ReportToLM, RunTask
from common.errors import InvalidInput
from common.events import TaskAssigned, TaskCancelled, TaskRunEnded
from common.federation import Federation
from common.messages import Placement
from common.reasons import Reason
from common.wire import (
    PlacementWire,
    WorkerBatchWire,
    WorkerReport,
    WorkerReportBatch,
    checkpoint_requested_from_wire,
    job_reprioritized_from_wire,
    placement_from_wire,
    placement_to_wire,
    report_to_wire,
    task_restored_from_wire,
    worker_heartbeat_to_wire,
)
from common.worker import AttemptState, WorkerAgent
from services.auth import AuthConfig, auth_from_env, seal, secure_app
from services.batching import BatchSender
from services.eventlog import EventLog
from services.http import (
    PeerLink,
    add_shared_routes,
    build_and_serve,
    lifespan_of,
    log_crashes,
    parse_body,
    read_service_env,
    wire_body,
)
from services.runtime import CoreRunner

if TYPE_CHECKING:
    from api.endpoints import Endpoints

REPORT_GIVE_UP_SECONDS = 60.0  # an LM away longer has marked our nodes down anyway
REPORT_BATCH = 500  # reports per request
# Report requests start at least timing.report_pace apart when busy: the start time a report
# carries is the worker's own clock, so pacing delays what the LM hears, never what it is told.
# Reports waiting for the LM: each live attempt makes at most a start and an end, so this is
# reached only if the LM stays away for long; past it a report is dropped (and counted), as it
# would be after REPORT_GIVE_UP_SECONDS, and the LM learns the attempt's fate from heartbeats.
REPORT_OUTBOX_LIMIT = 20_000
LIVE_STATES = (AttemptState.QUEUED, AttemptState.RUNNING)
# reports that are not an attempt's end (a StrEnum: the wire's kinds compare equal)
NOT_ENDS = frozenset({Reason.STARTED, Reason.SUSPENDED, Reason.CHECKPOINTED})
CANCEL_REASONS = {"cancelled": Reason.CANCELLED, "preempted": Reason.PREEMPTED}


@dataclass(slots=True)
class _OutgoingReport:
    report: WorkerReport
    queued_at: float  # loop time: a report gives up this long after the core made it


class WorkerService:
    """One worker agent: its core, the runs it holds, its outbox and its link to the LM."""

    def __init__(self, federation: Federation, worker_id: str, endpoints: Endpoints, *,
                 burn_cpu: bool = False, log: EventLog | None = None,
                 peer_headers: dict[str, str] | None = None) -> None:
        lm_id = federation.workers().get(worker_id)
        if lm_id is None:
            raise InvalidInput("MEGHA_ID", f"{worker_id!r} is no worker of the federation")
        self.worker_id = worker_id
        self.lm_id = lm_id
        self.lm_url = endpoints.url(lm_id)
        self.timing = federation.timing
        self.burn_cpu = burn_cpu
        self.log = log or EventLog(worker_id)
        self.nodes = federation.worker_nodes(worker_id)
        self.core = WorkerAgent(worker_id, self.nodes, **federation.worker_options())
        self.runner = CoreRunner(self.core, worker_id, self.log)
        # attempt id -> what holds its resources: a timer, or a task (burn_cpu, no duration)
        self.runs: dict[str, asyncio.TimerHandle | asyncio.Task] = {}
        self.outbox: BatchSender[_OutgoingReport] = BatchSender(
            f"{worker_id} reports", self._deliver, max_batch=REPORT_BATCH,
            limit=REPORT_OUTBOX_LIMIT, min_interval=self.timing.report_pace,
            on_error=self._outbox_failed)
        # Attempts that ended here but whose end report has not reached the LM yet: the
        # heartbeat still lists them, or an LM hearing the heartbeat before the report would
        # take them for lost and have them run again.
        self._placements: dict[str, Placement] = {}
        self._ending: set[str] = set()
        self.lm_link = PeerLink(self.log, "lm_unreachable", "lm_reachable",
                                {"worker": worker_id, "lm": lm_id})
        self.client = PeerClient(headers=peer_headers)  # the cluster token, to the LM
        self.runner.on(RunTask, self._run_task)
        self.runner.on(KillTask, self._kill_task)
        self.runner.on(ReportToLM, self._queue_report)
        self._metrics()

    def _metrics(self) -> None:
        registry = self.runner.registry
        self.reports_total = Counter("megha_worker_reports_total", "Reports to the LM",
                                     ["kind", "result"], registry=registry)
        self.heartbeats_total = Counter("megha_worker_heartbeats_total",
                                        "Heartbeats to the LM", ["result"], registry=registry)
        Gauge("megha_worker_running_tasks", "Tasks holding resources here",
              registry=registry).set_function(lambda: len(self.runs))
        Gauge("megha_worker_queued_tasks", "Tasks in the local queues",
              registry=registry).set_function(self.core.queue_length)
        Gauge("megha_worker_report_outbox", "Reports waiting to reach the LM",
              registry=registry).set_function(lambda: len(self.outbox))

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.client.start()
        self.log.emit("worker_started", {
            "worker": self.worker_id, "lm": self.lm_id, "nodes": len(self.nodes),
            "queue_policy": self.core.queue_policy, "burn_cpu": self.burn_cpu})
        self._spawn(self.outbox.run(), "reports")
        # no ticks: nothing in the worker's core is time-driven (a wake-up costs idle CPU)
        self._spawn(self._heartbeat_forever(), "heartbeat")

    async def stop(self) -> None:
        for run in self.runs.values():  # no TaskRunEnded after this
            run.cancel()
        self.runs.clear()
        await self.runner.stop()
        await self.client.close()

    def _spawn(self, coroutine, name: str) -> asyncio.Task:
        return log_crashes(self.runner.spawn(coroutine, name), self.log)

    # -- requests from the LM ----------------------------------------------------------------

    def assign(self, wire: PlacementWire) -> dict:
        placement = placement_from_wire(wire)
        self._placements.setdefault(placement.attempt_id, placement)
        self.runner.handle(TaskAssigned(self.runner.stimulus("assign"), placement))
        state = self.core.state_of(placement.attempt_id)
        return {"attempt_id": placement.attempt_id, "state": None if state is None else str(state)}

    def apply_batch(self, wire: WorkerBatchWire) -> dict:
        """The LM's queued starts, then its stops, its jobs' new priorities, its checkpoint
        requests and restores; which started, which stopped, which not."""
        started, refused, stopped = [], [], []
        for item in wire.start:
            answer = self.assign(item)
            if answer["state"] is None:
                refused.append({"attempt_id": item.attempt_id,
                                "detail": "refused by the worker (see its event log)"})
            else:
                started.append(answer)
        for item in wire.stop:
            was = self.cancel(item.attempt_id, CANCEL_REASONS[item.reason])
            stopped.append({"attempt_id": item.attempt_id,
                            "was": None if was is None else str(was)})
        for item in wire.reprioritize:
            self.runner.handle(job_reprioritized_from_wire(
                item, self.runner.stimulus("reprioritize")))
        if wire.checkpoint:
            self.runner.handle(checkpoint_requested_from_wire(
                wire, self.runner.stimulus("checkpoint")))
        for item in wire.restore:
            self.runner.handle(task_restored_from_wire(item, self.runner.stimulus("restore")))
        return {"started": started, "stopped": stopped, "refused": refused}

    def cancel(self, attempt_id: str, reason: Reason) -> AttemptState | None:
        """Cancel an attempt; its state before, if it was live.

        An unknown attempt is still passed to the core: a cancel that overtook its
        assignment is remembered there, so the late assignment is refused.
        """
        was = self.core.state_of(attempt_id)
        self.runner.handle(TaskCancelled(self.runner.stimulus("cancel"), attempt_id, reason))
        return was if was in LIVE_STATES else None

    def state(self) -> dict:
        running, queued = [], []
        for placement in self.core.running_placements():
            item = json.loads(placement_to_wire(placement).model_dump_json())
            if self.core.state_of(placement.attempt_id) is AttemptState.RUNNING:
                running.append(item)
            else:
                queued.append(item)
        nodes = {}
        for node in self.nodes:
            free = self.core.free(node.node_id)
            nodes[node.node_id] = {"free_cpu_m": free.cpu_m, "free_mem_mib": free.mem_mib,
                                   "queued": self.core.queue_length(node.node_id)}
        return {"worker": self.worker_id, "lm": self.lm_id, "running": running,
                "queued": queued, "nodes": nodes, "report_outbox": len(self.outbox),
                "lm_reachable": self.lm_link.reachable}

    # -- executors ---------------------------------------------------------------------------

    def _run_task(self, command: RunTask) -> None:
        if self.burn_cpu or command.duration is None:
            self.runs[command.attempt_id] = self._spawn(self._hold(command),
                                                        f"run {command.attempt_id}")
            return
        # A timer, not a task: a task per run cost the worker more than the run's own
        # bookkeeping at a few hundred runs a second (benchmarks/bench_services.py).
        self.runs[command.attempt_id] = asyncio.get_running_loop().call_later(
            command.duration, self._ended, command.attempt_id, time.monotonic())

    async def _hold(self, command: RunTask) -> None:
        started = time.monotonic()
        try:
            if self.burn_cpu:
                await _burn_cpu(command.duration)
            else:
                await asyncio.Event().wait()  # until killed
        finally:
            # a cancel takes effect an iteration later: the attempt may be running again
            # (suspended, then resumed) under a new task, which keeps its place
            if self.runs.get(command.attempt_id) is asyncio.current_task():
                del self.runs[command.attempt_id]
        self._report_end(command.attempt_id, started)

    def _ended(self, attempt_id: str, started: float) -> None:
        if self.runs.pop(attempt_id, None) is None:
            return
        try:
            self._report_end(attempt_id, started)
        except Exception as error:  # a timer's exception would reach only asyncio's handler
            self.log.emit("background_task_failed", {"task": f"run {attempt_id}",
                                                     "error": repr(error)[:500]})

    def _report_end(self, attempt_id: str, started: float) -> None:
        runtime = time.monotonic() - started
        self.runner.handle(TaskRunEnded(self.runner.stimulus("run_ended"), attempt_id,
                                        runtime))

    def _kill_task(self, command: KillTask) -> None:
        run = self.runs.pop(command.attempt_id, None)
        if run is not None:
            run.cancel()

    def _queue_report(self, command: ReportToLM) -> None:
        report = report_to_wire(command, self.worker_id)
        if not self.outbox.offer(_OutgoingReport(report, asyncio.get_running_loop().time())):
            self._dropped([report], f"outbox full ({REPORT_OUTBOX_LIMIT} reports)")
            return
        if command.kind not in NOT_ENDS:
            self._ending.add(command.attempt_id)

    # -- to the LM ---------------------------------------------------------------------------

    def heartbeat_placements(self) -> list[Placement]:
        """What runs or queues here, and what ended here but the LM has not heard of yet."""
        live = list(self.core.running_placements())
        live.extend(self._placements[a] for a in self._ending if a in self._placements)
        return live

    async def _deliver(self, items: Sequence[_OutgoingReport]) -> None:
        """One request with every queued report, in order, retried while the LM is away."""
        try:
            await self._deliver_once(items)
        finally:
            for item in items:
                if item.report.kind not in NOT_ENDS:
                    self._ending.discard(item.report.attempt_id)
                    self._placements.pop(item.report.attempt_id, None)

    async def _deliver_once(self, items: Sequence[_OutgoingReport]) -> None:
        reports = [item.report for item in items]
        waited = asyncio.get_running_loop().time() - items[0].queued_at
        try:
            response = await request_with_retry(
                self.client, "POST", f"{self.lm_url}/v1/worker/reports",
                body=WorkerReportBatch(reports=reports).model_dump_json(), attempts=None,
                give_up_after=max(0.0, REPORT_GIVE_UP_SECONDS - waited),
                on_failure=self.lm_link.failed)
        except PeerUnreachable as error:
            self._dropped(reports, str(error))
            return
        self.lm_link.answered()
        if response.is_success:
            for report in reports:
                self.reports_total.labels(report.kind, "sent").inc()
        else:  # the LM refused the batch itself: sending it again would not change that
            for report in reports:
                self.reports_total.labels(report.kind, "refused").inc()
            self.log.emit("report_refused", {
                "worker": self.worker_id, "lm": self.lm_id, "reports": len(reports),
                "attempts": [r.attempt_id for r in reports[:20]],
                "status": response.status_code, "detail": response.text[:300]})

    def _dropped(self, reports: Sequence[WorkerReport], why: str) -> None:
        for report in reports:
            self.reports_total.labels(report.kind, "dropped").inc()
            self.log.emit("report_dropped", {"worker": self.worker_id, "lm": self.lm_id,
                                             "attempt": report.attempt_id,
                                             "kind": report.kind, "error": why[:300]})

    def _outbox_failed(self, name: str, error: BaseException) -> None:
        self.log.emit("background_task_failed", {"task": name, "error": repr(error)[:500]})

    async def _heartbeat_forever(self) -> None:
        """At a fixed rate, starting at once: a recovering LM waits for this to launch."""
        loop = asyncio.get_running_loop()
        interval = self.timing.worker_heartbeat_interval
        timeout = max(interval, 1.0)  # a busy LM may take a moment; it still counts as heard
        url = f"{self.lm_url}/v1/worker/heartbeat"
        next_at = loop.time()
        while True:
            body = worker_heartbeat_to_wire(self.worker_id, self.heartbeat_placements(),
                                            self.core.queued_ids()).model_dump_json()
            try:
                # about an interval at most: the next heartbeat carries fresher news
                response = await self.client.post(url, body, timeout=timeout)
                if response.is_success:
                    self.heartbeats_total.labels("sent").inc()
                    self.lm_link.answered()
                else:
                    self.heartbeats_total.labels("refused").inc()
                    self.lm_link.failed(f"HTTP {response.status_code}: {response.text[:200]}")
            except PeerError as error:
                self.heartbeats_total.labels("failed").inc()
                self.lm_link.failed(str(error))
            next_at = max(next_at + interval, loop.time())
            await asyncio.sleep(next_at - loop.time())


async def _burn_cpu(seconds: float | None) -> None:
    """Keep one core busy for `seconds` (None: until cancelled) in a thread of its own.

    A thread per task, not the default executor, whose few threads would queue the runs.
    The loop in the thread holds the GIL most of the time; Python hands it over every few
    milliseconds, so the service stays responsive but slower: meant for a few tasks per
    worker, not hundreds.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    stop = threading.Event()

    def burn() -> None:
        deadline = None if seconds is None else time.monotonic() + seconds
        spins = 0
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            for _ in range(10_000):
                spins += 1
        # a service stopping meanwhile has closed its loop: nobody waits for this any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(spins))

    threading.Thread(target=burn, name="burn", daemon=True).start()
    try:
        await done
    finally:
        stop.set()  # a killed task: the thread notices within a millisecond


def create_app(federation: Federation, worker_id: str, endpoints: Endpoints, *,
               burn_cpu: bool = False, log: EventLog | None = None,
               auth: AuthConfig) -> FastAPI:
    service = WorkerService(federation, worker_id, endpoints, burn_cpu=burn_cpu, log=log,
                            peer_headers=auth.outgoing_headers())

    app = secure_app(f"megha worker agent {worker_id}", lifespan_of(service), auth)
    app.state.service = service

    @app.post("/v1/tasks", status_code=202, openapi_extra=wire_body(PlacementWire))
    async def post_task(request: Request) -> dict:
        return service.assign(await parse_body(request, PlacementWire))

    @app.post("/v1/tasks/batch", openapi_extra=wire_body(WorkerBatchWire))
    async def post_batch(request: Request) -> dict:
        return service.apply_batch(await parse_body(request, WorkerBatchWire))

    @app.delete("/v1/tasks/{attempt_id:path}", status_code=202, responses={
        404: {"description": "The attempt is not queued or running here."}})
    async def delete_task(attempt_id: str,
                          reason: Literal["cancelled", "preempted"] = "cancelled") -> Response:
        was = service.cancel(attempt_id, CANCEL_REASONS[reason])
        if was is None:
            state = service.core.state_of(attempt_id)
            return JSONResponse({"detail": f"attempt {attempt_id!r} is not queued or running",
                                 "state": None if state is None else str(state)},
                                status_code=404)
        return JSONResponse({"attempt_id": attempt_id, "was": str(was)}, status_code=202)

    @app.get("/v1/state")
    async def get_state() -> dict:
        return service.state()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"worker": worker_id, "lm": service.lm_id,
                "lm_reachable": service.lm_link.reachable}

    add_shared_routes(app, service.core, service.runner.registry, service.runner.received)
    return seal(app)


def main() -> None:
    """`python -m services.worker`: MEGHA_CONFIG, MEGHA_ID (e.g. `lm-1/w0`), MEGHA_ENDPOINTS;
    the tokens (MEGHA_CLUSTER_TOKEN or its digest, MEGHA_WORKER_TOKEN, and the LMs' token or
    its digest MEGHA_LM_TOKEN_SHA256: services/auth.py) and MEGHA_TLS_* (services/http.py);
    MEGHA_BURN_CPU=1 burns real CPU for each task instead of only holding its resources."""
    env = read_service_env()
    burn_cpu = os.environ.get("MEGHA_BURN_CPU", "") in ("1", "true", "yes")
    build_and_serve(env, lambda: create_app(env.federation, env.service_id, env.endpoints,
                                            burn_cpu=burn_cpu, log=env.log,
                                            auth=auth_from_env(env.log, role="worker")))


if __name__ == "__main__":
    main()
