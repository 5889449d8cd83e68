"""The Global Master service: the `GlobalMaster` core behind HTTP and RabbitMQ.

Flow of a job: `POST /v1/jobs` validates it against the core (422 with the field at fault),
publishes it, persistent and confirmed, to its user's durable queue, and only then answers
202. The GM consumes those queues: each job is committed to the embedded store (services/
store.py) before its message is acknowledged, then handed to the core. The core's launch,
repartition and preemption requests go to the LMs over HTTP; their answers, the LMs'
heartbeats (fanout) and task events (the GM's durable queue) come back as events. A restarted
GM replays its store (unfinished jobs, with the tasks that already finished), rebuilds its
view from heartbeats and adopts the attempts it had launched that still run.

Run it with `python -m services.gm` (see `main` for the environment it reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from pathlib import Path

import httpx
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import ValidationError

from common.commands import JobEnded, SendCancel, SendLaunch, SendPreempt
from common.errors import InvalidInput
from common.events import JobSubmitted, LMRequestFailed, TaskEventReceived, Tick
from common.federation import Federation
from common.gm import GlobalMaster
from common.messages import RequestKind
from common.policies.fairness import dominant
from common.reasons import Reason
from common.startlog import gm_starting
from common.wire import (
    CancelRequest,
    JobSubmission,
    LMReply,
    LMSnapshotWire,
    TaskEventWire,
    TopologyCache,
    heartbeat_from_wire,
    job_from_wire,
    launch_request_to_wire,
    lm_replied_from_wire,
    preempt_request_to_wire,
    task_event_from_wire,
)
from services.broker import (
    HEARTBEAT_EXCHANGE,
    TASK_EVENTS_EXCHANGE,
    Broker,
    BrokerUnavailable,
    jobs_queue,
    task_events_queue,
)
from services.endpoints import Endpoints
from services.eventlog import EventLog
from services.http import (
    add_shared_routes,
    build_and_serve,
    lifespan_of,
    read_service_env,
    required_env,
)
from services.runtime import CoreRunner
from services.store import GMStore

LM_REQUEST_TIMEOUT = 2.0  # seconds per try; an LM answers a batch in milliseconds
LM_CONNECT_TRIES = 3  # an LM that refuses connections is down: give up after these
# A slow LM (a timeout, not a refusal) is asked the same request again until this deadline:
# attempt ids make that safe, while giving up would requeue tasks that are in fact running
# and add duplicate work to an overloaded federation (a congestion collapse, measured with
# benchmarks/bench_services.py).
LM_SLOW_DEADLINE = 30.0


def invalid(error: InvalidInput) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["body", *error.field.split(".")],
                                       "msg": error.message, "type": "invalid_input"}])


class GMService:
    """Everything one GM process holds: its core, store, broker link and HTTP client."""

    def __init__(self, federation: Federation, gm_id: str, endpoints: Endpoints,
                 amqp_url: str, state_dir: Path, *, epoch: int | None = None,
                 log: EventLog | None = None) -> None:
        self.federation = federation
        self.gm_id = gm_id
        self.endpoints = endpoints
        self.log = log or EventLog(gm_id)
        self.epoch = epoch if epoch is not None else int(time.time() * 1000)
        config = federation.gm_config(gm_id, self.epoch)
        self.core = GlobalMaster(config, topologies=federation.topologies())
        self.runner = CoreRunner(self.core, gm_id, self.log)
        self.runner.registry.register(_CoreCounters(self.core))
        self.store = GMStore(state_dir / f"{gm_id}.sqlite")
        self.users = sorted(q.name for q in federation.queues if q.gm == gm_id)
        self.topologies = TopologyCache()
        self.broker = Broker(amqp_url, gm_id, events=self.log.emit)
        self.client = httpx.AsyncClient(timeout=LM_REQUEST_TIMEOUT)
        self._accepted: set[str] = set()  # published, not yet taken out of the queue
        self.runner.on(SendLaunch, lambda c: self.runner.spawn(self._send_launch(c)))
        self.runner.on(SendPreempt, lambda c: self.runner.spawn(self._send_preempt(c)))
        self.runner.on(SendCancel, lambda c: self.runner.spawn(self._send_cancel(c)))
        self.runner.on(JobEnded, self._job_ended)

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.log.emit("gm_starting", gm_starting(self.federation, self.gm_id, self.epoch))
        for stored in self.store.unfinished():
            sub = JobSubmission.model_validate_json(stored.body)
            job = job_from_wire(sub, stored.job_id, stored.arrival,
                                self.federation.num_constraints)
            self.runner.handle(JobSubmitted(self.runner.stimulus("replay"), job,
                                            stored.done_tasks))
            self.log.emit("job_replayed", {"job": stored.job_id, "user": stored.user,
                                           "done": len(stored.done_tasks)})
        for user in self.users:
            self.broker.declare_queue(jobs_queue(user))
            self.broker.consume_queue(jobs_queue(user), self._on_job_message, prefetch=50)
        self.broker.consume_queue(task_events_queue(self.gm_id), self._on_task_event,
                                  bind_exchange=TASK_EVENTS_EXCHANGE, routing_key=self.gm_id,
                                  prefetch=500)
        self.broker.consume_fanout(HEARTBEAT_EXCHANGE, self._on_heartbeat, prefetch=200)
        await self.broker.start(wait=False)
        interval = self.federation.timing.tick_interval
        self.runner.spawn(self.runner.tick_forever(
            interval, lambda: Tick(self.runner.stimulus("tick"))), "tick")

    async def stop(self) -> None:
        await self.runner.stop()
        await self.broker.close()
        await self.client.aclose()
        self.store.close()

    # -- jobs in ---------------------------------------------------------------------------------

    async def submit(self, sub: JobSubmission) -> str:
        """Validate, publish durably, and return the job id; raises HTTPException."""
        job_id = sub.job_id or uuid.uuid4().hex[:16]
        arrival = time.time()
        try:
            job = job_from_wire(sub, job_id, arrival, self.federation.num_constraints)
            self.core.check_job(job)
        except InvalidInput as error:
            raise invalid(error) from None
        if job_id in self._accepted or job_id in self.core.jobs or self.store.state_of(job_id):
            return job_id  # idempotent: a retried submission is the same job
        message = json.dumps({"job_id": job_id, "arrival": arrival,
                              "job": json.loads(sub.model_dump_json())})
        try:
            await self.broker.publish("", jobs_queue(sub.user), message.encode(),
                                      persistent=True, timeout=5.0)
        except BrokerUnavailable as error:
            raise HTTPException(503, detail=f"job not accepted: {error}") from None
        self._accepted.add(job_id)
        self.log.emit("job_accepted", {"job": job_id, "user": sub.user, "gm": self.gm_id,
                                       "tasks": len(sub.tasks), "arrival": arrival})
        return job_id

    async def _on_job_message(self, body: bytes) -> None:
        message = json.loads(body)
        job_id, arrival = message["job_id"], message["arrival"]
        sub = JobSubmission.model_validate(message["job"])
        self._accepted.discard(job_id)
        if not self.store.add_job(job_id, sub.user, sub.model_dump_json(), arrival):
            return  # redelivered after a crash between commit and acknowledgement
        job = job_from_wire(sub, job_id, arrival, self.federation.num_constraints)
        try:
            self.runner.handle(JobSubmitted(self.runner.stimulus("job"), job))
        except InvalidInput as error:  # valid when accepted, but the federation changed
            self.store.job_ended(job_id, "failed", str(error))
            self.log.emit("job_failed", {"job": job_id, "user": sub.user, "gm": self.gm_id,
                                         "reason": str(error)})

    # -- events in -------------------------------------------------------------------------------

    async def _on_task_event(self, body: bytes) -> None:
        event = task_event_from_wire(TaskEventWire.model_validate_json(body))
        if event.kind is Reason.FINISHED and self.core.would_complete(event.attempt_id):
            # committed before the acknowledgement: a restarted GM never reruns it
            self.store.task_done(event.job_id, event.task_id, event.runtime or 0.0)
        self.runner.handle(TaskEventReceived(self.runner.stimulus("task_event"), event))

    async def _on_heartbeat(self, body: bytes) -> None:
        wire = LMSnapshotWire.model_validate_json(body)
        self.runner.handle(heartbeat_from_wire(wire, self.runner.stimulus("heartbeat"),
                                               self.topologies))

    def _job_ended(self, command: JobEnded) -> None:
        self.store.job_ended(command.job_id, command.state, command.reason)

    # -- requests to LMs -------------------------------------------------------------------------

    async def _send_launch(self, command: SendLaunch) -> None:
        path = "/v1/launch" if command.kind is RequestKind.LAUNCH else "/v1/repartition"
        body = launch_request_to_wire(command, self.gm_id).model_dump_json()
        await self._request(command.lm, path, body, command.request_id)

    async def _send_preempt(self, command: SendPreempt) -> None:
        body = preempt_request_to_wire(command, self.gm_id).model_dump_json()
        await self._request(command.lm, "/v1/preempt", body, command.request_id)

    async def _request(self, lm: str, path: str, body: str, request_id: str) -> None:
        """POST to an LM, retrying the same request; its answer or its failure is an event."""
        url = self.endpoints.url(lm) + path
        failure = ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LM_SLOW_DEADLINE
        refused = 0
        attempt = 0
        while refused < LM_CONNECT_TRIES and loop.time() < deadline:
            try:
                response = await self.client.post(url, content=body,
                                                   headers={"content-type": "application/json"})
                if response.status_code == 200:
                    reply = LMReply.model_validate_json(response.content)
                    self.runner.handle(lm_replied_from_wire(
                        reply, self.runner.stimulus("reply"), self.topologies))
                    return
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code < 500:
                    break  # the LM refused the request itself: repeating it cannot help
                refused += 1
            except httpx.TimeoutException as error:
                failure = repr(error)[:200]  # slow, not gone: ask again
            except (httpx.TransportError, ValidationError) as error:
                failure = repr(error)[:200]
                refused += 1
            attempt += 1
            await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
        self.log.emit("lm_request_failed", {"lm": lm, "request": request_id, "path": path,
                                            "error": failure})
        self.runner.handle(LMRequestFailed(self.runner.stimulus("request_failed"), lm,
                                           request_id))

    async def _send_cancel(self, command: SendCancel) -> None:
        url = self.endpoints.url(command.lm) + "/v1/cancel"
        with contextlib.suppress(httpx.TransportError):
            body = CancelRequest(gm=self.gm_id, attempt_id=command.attempt_id)
            await self.client.post(url, content=body.model_dump_json(),
                                   headers={"content-type": "application/json"})

    # -- questions -------------------------------------------------------------------------------

    def job_view(self, job_id: str) -> dict:
        status = self.core.job_status(job_id)
        if status is None:
            if job_id in self._accepted:
                return {"job": job_id, "state": "accepted"}
            state = self.store.state_of(job_id)
            if state is None:
                raise HTTPException(404, detail=f"no job {job_id!r} at {self.gm_id}")
            return {"job": job_id, "state": state}
        why = {}
        for task in status["tasks"]:
            if task["state"] in ("pending", "held") and len(why) < 5:
                with contextlib.suppress(KeyError):
                    why[task["task"]] = self.core.explain(task["task"])
        status["why_pending"] = why
        return status

    def queues_view(self) -> list[dict]:
        usage = self.core.usage()
        pending: dict[str, int] = {}
        running: dict[str, int] = {}
        for job in self.core.jobs.values():
            user = job.spec.user
            for task in job.tasks:
                if task.state in ("pending", "held"):
                    pending[user] = pending.get(user, 0) + 1
                elif task.state in ("placing", "launched", "running"):
                    running[user] = running.get(user, 0) + 1
        return [
            {"queue": q.name, "gm": q.gm, "share": q.share,
             "usage": round(dominant(usage.get(q.name, (0.0, 0.0))), 6),
             "pending_tasks": pending.get(q.name) if q.gm == self.gm_id else None,
             "active_tasks": running.get(q.name) if q.gm == self.gm_id else None}
            for q in self.federation.queues
        ]


class _CoreCounters:
    """Exposes the core's own counters (`placements_total.launch`, ...) at scrape time."""

    def __init__(self, core: GlobalMaster) -> None:
        self.core = core

    def collect(self):
        families: dict[str, CounterMetricFamily] = {}
        for key, value in sorted(self.core.counters.items()):
            name, _, label = key.partition(".")
            family = families.get(name)
            if family is None:
                family = families[name] = CounterMetricFamily(
                    f"megha_gm_{name.removesuffix('_total')}", f"GM core counter {name}",
                    labels=["kind"])
            family.add_metric([label or "all"], value)
        yield from families.values()
        pending = GaugeMetricFamily("megha_gm_pending_tasks", "Tasks waiting in this GM")
        pending.add_metric([], self.core.pending_count())
        yield pending


def create_app(service: GMService) -> FastAPI:
    app = FastAPI(title=f"megha GM {service.gm_id}", lifespan=lifespan_of(service))

    @app.post("/v1/jobs", status_code=202)
    async def post_job(sub: JobSubmission) -> dict:
        return {"job_id": await service.submit(sub), "gm": service.gm_id}

    @app.get("/v1/jobs/{job_id}")
    async def get_job(job_id: str) -> dict:
        return service.job_view(job_id)

    @app.get("/v1/queues")
    async def get_queues() -> list[dict]:
        return service.queues_view()

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        ok = service.broker.connected
        view = service.core.view
        body = {"gm": service.gm_id, "broker": ok, "lms_in_view": len(view.slots),
                "nodes_up_in_view": view.state.up.count() if view.state is not None else 0}
        return JSONResponse(body, status_code=200 if ok else 503)

    add_shared_routes(app, service.core, service.runner.registry)
    return app


def main() -> None:
    """`python -m services.gm`: MEGHA_CONFIG (federation TOML), MEGHA_ID (this GM),
    MEGHA_ENDPOINTS (id=url,...), MEGHA_AMQP_URL, MEGHA_STATE_DIR (default ./state)."""
    env = read_service_env()
    build_and_serve(env, lambda: create_app(GMService(
        env.federation, env.service_id, env.endpoints, required_env("MEGHA_AMQP_URL"),
        Path(os.environ.get("MEGHA_STATE_DIR", "state")), log=env.log)))


if __name__ == "__main__":
    main()
