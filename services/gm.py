"""The Global Master service: the `GlobalMaster` core behind HTTP and RabbitMQ.

Flow of a job: `POST /v1/jobs` validates it against the core (422 with the field at fault),
publishes it, persistent and confirmed, to its user's durable queue, and only then answers
202. The GM consumes those queues: each job is committed to the embedded store (services/
store.py) before its message is acknowledged, then handed to the core. The core's launch,
repartition and preemption requests go to the LMs over HTTP; their answers, the LMs'
heartbeats (fanout) and task events (the GM's durable queue) come back as events. A restarted
GM replays its store (unfinished jobs, with the tasks that already finished), rebuilds its
view from heartbeats and adopts the attempts it had launched that still run.

Backpressure: a GM holds about `limits.gm_backlog_tasks` waiting tasks (pending, held, or
accepted and still in its broker queue), each user queue a part of them in proportion to its
share, so that one queue's burst never refuses another (services/admission.py). Past its part,
`POST /v1/jobs` answers 429 with a `Retry-After` (seconds, from the rate the backlog drains)
and the reason, and accepts nothing: a job is either accepted (202, durable) or clearly not.
The start and end of each queue's episode of refusals are events (`backlog_full`,
`backlog_open`), and metrics count them.

Job ids: a client-chosen id belongs to its queue (services/admission.py): the same id, queue
and body again is the same job (202); anything else is 409 with the reason. A submission's
body is bounded before it is built (services/job_body.py): a byte cap from
`limits.max_tasks_per_job`, then its tasks counted by a streaming parser.

Access (services/auth.py): a user queue's token submits and reads that queue's jobs only
(403 otherwise), the cluster token everything; each token's submissions are bounded by
`limits.submit_rate_per_token` (429 with Retry-After, as for the backlog), and a job by
`limits.max_tasks_per_job` tasks (422).

Run it with `python -m services.gm` (see `main` for the environment it reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pydantic import ValidationError

from api.peers import PeerClient, PeerError
from common.commands import (
    ContinuePass,
    JobEnded,
    SendCancel,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
)
from common.errors import InvalidInput
from common.events import (
    JobSubmitted,
    LMRequestFailed,
    PassContinued,
    TaskEventsReceived,
    Tick,
)
from common.federation import Federation
from common.gm import GlobalMaster
from common.messages import RequestKind
from common.policies.fairness import dominant
from common.reasons import Reason
from common.startlog import gm_starting
from common.wire import (
    JobSubmission,
    LMReply,
    LMSnapshotWire,
    TaskEventBatchWire,
    TopologyCache,
    cancel_request_to_wire,
    heartbeat_from_wire,
    job_from_wire,
    launch_request_to_wire,
    lm_replied_from_wire,
    preempt_request_to_wire,
    reprioritize_request_to_wire,
    task_event_from_wire,
)
from services.admission import (
    AcceptedJob,
    Backpressure,
    IdConflict,
    QueueAdmission,
    check_reuse,
    submission_digest,
)
from services.auth import (
    USER_PATHS,
    AuthConfig,
    Caller,
    auth_from_env,
    forbidden,
    seal,
    secure_app,
)
from services.batching import BatchSender
from services.bodylimit import RouteCap
from services.broker import (
    HEARTBEAT_EXCHANGE,
    TASK_EVENTS_EXCHANGE,
    Broker,
    BrokerUnavailable,
    jobs_queue,
    task_events_queue,
)
from services.eventlog import EventLog
from services.http import (
    add_shared_routes,
    build_and_serve,
    lifespan_of,
    parse_body,
    read_service_env,
    required_env,
    wire_body,
)
from services.job_body import TASK_BYTES, check_shape, submission_body_cap
from services.ratelimit import SubmissionRates, retry_after
from services.runtime import CoreRunner
from services.store import GMStore

if TYPE_CHECKING:
    from api.endpoints import Endpoints

LM_REQUEST_TIMEOUT = 2.0  # seconds per try; an LM answers a batch in milliseconds
LM_CONNECT_TRIES = 3  # an LM that refuses connections is down: give up after these
# A slow LM (a timeout, not a refusal) is asked the same request again until this deadline:
# attempt ids make that safe, while giving up would requeue tasks that are in fact running
# and add duplicate work to an overloaded federation (a congestion collapse, measured with
# benchmarks/bench_services.py).
LM_SLOW_DEADLINE = 30.0
# Heartbeats waiting for this GM in RabbitMQ: past this many the oldest are dropped (each
# LM's newest snapshot supersedes its older ones).
HEARTBEAT_QUEUE_LIMIT = 200
CANCEL_BATCH = 50  # cancels sent one after another per turn of an LM's cancel outbox
CANCEL_OUTBOX_LIMIT = 1000
# Jobs' new priorities, per LM as for cancels: a job sends at most about log2(width) + 1
# (common/reprioritize.py), so the outbox holds a burst of estimates, not a backlog
REPRIORITIZE_BATCH = 50
REPRIORITIZE_OUTBOX_LIMIT = 1000
ENDED_FEED_MAX = 1000  # jobs per answer of GET /v1/jobs?ended_after=


def invalid(error: InvalidInput) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["body", *error.field.split(".")],
                                       "msg": error.message, "type": "invalid_input"}])


class GMService:
    """Everything one GM process holds: its core, store, broker link and HTTP client."""

    def __init__(self, federation: Federation, gm_id: str, endpoints: Endpoints,
                 amqp_url: str, state_dir: Path, *, auth: AuthConfig, epoch: int | None = None,
                 log: EventLog | None = None) -> None:
        self.federation = federation
        self.auth = auth
        self.gm_id = gm_id
        self.endpoints = endpoints
        self.log = log or EventLog(gm_id)
        self.epoch = epoch if epoch is not None else int(time.time() * 1000)
        config = federation.gm_config(gm_id, self.epoch)
        self.core = GlobalMaster(config, topologies=federation.topologies())
        self.runner = CoreRunner(self.core, gm_id, self.log)
        self.runner.registry.register(_CoreCounters(self.core, self.backlog))
        self.store = GMStore(state_dir / f"{gm_id}.sqlite")
        self.users = sorted(q.name for q in federation.queues if q.gm == gm_id)
        self.topologies = TopologyCache()
        self.broker = Broker(amqp_url, gm_id, events=self.log.emit)
        self.client = PeerClient(timeout=LM_REQUEST_TIMEOUT, headers=auth.outgoing_headers())
        self.rates = SubmissionRates(federation.limits.submit_rate_per_token,
                                     federation.limits.submit_burst)
        self.max_tasks_per_job = federation.limits.max_tasks_per_job
        self._publishing: dict[str, asyncio.Future] = {}  # job id -> its publish's outcome
        self.backlog_limit = federation.limits.gm_backlog_tasks
        # each queue's part of the backlog; the jobs published and not yet consumed
        self.admission = QueueAdmission(
            gm_id, self.backlog_limit,
            {q.name: q.share for q in federation.queues if q.gm == gm_id}, emit=self.log.emit)
        self.refused_total = Counter("megha_gm_jobs_refused_total",
                                     "Jobs answered 429: the GM's backlog was full",
                                     registry=self.runner.registry)
        self.rate_limited_total = Counter(
            "megha_gm_jobs_rate_limited_total",
            "Jobs answered 429: their token was over limits.submit_rate_per_token",
            ["queue"], registry=self.runner.registry)
        self.runner.on(SendLaunch, lambda c: self.runner.spawn(self._send_launch(c)))
        self.runner.on(SendPreempt, lambda c: self.runner.spawn(self._send_preempt(c)))
        # Cancels (a duplicate attempt that lost the race) are best effort: one LM at a time,
        # a bounded outbox, and past it dropped and logged (the duplicate then runs to its end
        # and its finish is ignored: the first finish wins).
        self.cancel_outboxes = {
            lm.id: BatchSender(f"cancels to {lm.id}", partial(self._send_cancels, lm.id),
                               max_batch=CANCEL_BATCH, limit=CANCEL_OUTBOX_LIMIT)
            for lm in federation.lms}
        self.runner.on(SendCancel, self._queue_cancel)
        # New priorities of jobs (with local queues or copies) are best effort the same way:
        # past the bound one is dropped and logged, and the job's tasks at that LM's workers
        # keep their older key until its next one.
        self.reprioritize_outboxes = {
            lm.id: BatchSender(f"reprioritizations to {lm.id}",
                               partial(self._send_reprioritizations, lm.id),
                               max_batch=REPRIORITIZE_BATCH, limit=REPRIORITIZE_OUTBOX_LIMIT)
            for lm in federation.lms}
        self.runner.on(SendReprioritize, self._queue_reprioritize)
        self.runner.on(JobEnded, self._job_ended)
        # a bounded pass goes on in the event loop's next turn, behind what already waits
        self.runner.on(ContinuePass, lambda _: asyncio.get_running_loop().call_soon(
            self._continue_pass))

    def _continue_pass(self) -> None:
        self.runner.handle(PassContinued(self.runner.stimulus("pass")))

    # -- life ------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.log.emit("gm_starting", gm_starting(self.federation, self.gm_id, self.epoch))
        for stored in self.store.unfinished():
            sub = JobSubmission.model_validate_json(stored.body)
            job = job_from_wire(sub, stored.job_id, stored.arrival)
            self.runner.handle(JobSubmitted(self.runner.stimulus("replay"), job,
                                            stored.done_tasks))
            self.log.emit("job_replayed", {"job": stored.job_id, "user": stored.user,
                                           "done": len(stored.done_tasks)})
        for user in self.users:
            self.broker.declare_queue(jobs_queue(user))
            self.broker.consume_queue(jobs_queue(user), self._on_job_message, prefetch=50)
        self.broker.consume_queue(task_events_queue(self.gm_id), self._on_task_events,
                                  bind_exchange=TASK_EVENTS_EXCHANGE, routing_key=self.gm_id,
                                  prefetch=500)
        self.broker.consume_fanout(HEARTBEAT_EXCHANGE, self._on_heartbeat, prefetch=200,
                                   max_length=HEARTBEAT_QUEUE_LIMIT)
        await self.client.start()
        for outbox in (*self.cancel_outboxes.values(), *self.reprioritize_outboxes.values()):
            self.runner.spawn(outbox.run(), outbox.name)
        await self.broker.start(wait=False)
        interval = self.federation.timing.tick_interval
        self.runner.spawn(self.runner.tick_forever(
            interval, lambda: Tick(self.runner.stimulus("tick"))), "tick")

    async def stop(self) -> None:
        await self.runner.stop()
        await self.broker.close()
        await self.client.close()
        self.store.close()

    # -- jobs in ---------------------------------------------------------------------------------

    async def submit(self, sub: JobSubmission) -> str:
        """Validate, publish durably, and return the job id; raises HTTPException."""
        job_id = sub.job_id or uuid.uuid4().hex[:16]
        arrival = time.time()  # the task count was checked before the body was built
        try:
            job = job_from_wire(sub, job_id, arrival)
            self.core.check_job(job)
        except InvalidInput as error:
            raise invalid(error) from None
        canonical = sub.model_dump_json()
        digest = submission_digest(sub, job_id)
        try:
            known = self.admission.accepted.get(job_id)
            if check_reuse(job_id, sub.user, digest, (known.queue, known.digest)
                           if known is not None else self._stored_identity(job_id)):
                publishing = self._publishing.get(job_id)
                if publishing is not None:  # the same job, sent again while its first is
                    await asyncio.shield(publishing)  # on its way: its outcome is ours
                return job_id  # idempotent: a retried submission is the same job
        except IdConflict as conflict:
            raise HTTPException(409, detail=conflict.detail) from None
        self.admission.admit(sub.user, self.core.waiting_by_user, self.core.waiting,
                             self._placed, time.monotonic())
        self.admission.accept(job_id, AcceptedJob(sub.user, len(sub.tasks), digest))
        done = self._publishing[job_id] = asyncio.get_running_loop().create_future()
        # the submission as its wire model writes it, framed without parsing it again
        message = f'{{"job_id":{json.dumps(job_id)},"arrival":{arrival!r},"job":{canonical}}}'
        try:
            await self.broker.publish("", jobs_queue(sub.user), message.encode(),
                                      persistent=True, timeout=5.0)
        except BrokerUnavailable as error:
            # not confirmed: maybe not stored; the client is told so and may send it again
            self.admission.taken(job_id)
            refused = HTTPException(503, detail=f"job not accepted: {error}")
            done.set_exception(refused)
            raise refused from None
        finally:
            del self._publishing[job_id]
            if not done.done():
                done.set_result(None)
            elif done.exception() is not None:
                done.exception()  # retrieved: no "never retrieved" warning
        self.log.emit("job_accepted", {"job": job_id, "user": sub.user, "gm": self.gm_id,
                                       "tasks": len(sub.tasks), "arrival": arrival})
        return job_id

    def _stored_identity(self, job_id: str) -> tuple[str, str] | None:
        """(queue, body digest) of a job this GM took out of the broker before."""
        stored = self.store.identity_of(job_id)
        return None if stored is None else (
            stored[0], submission_digest(JobSubmission.model_validate_json(stored[1]), job_id))

    # -- backpressure ----------------------------------------------------------------------------

    def backlog(self) -> int:
        """Tasks waiting here: pending or held in the core, or accepted and still queued."""
        return self.admission.total(self.core.waiting)

    def _placed(self) -> int:
        """Tasks placed so far (and preemptions asked): how fast the backlog drains."""
        counters = self.core.counters
        return sum(value for key, value in counters.items()
                   if key.startswith("placements_total.")) + counters["preemption_requests_total"]

    async def _on_job_message(self, body: bytes) -> None:
        self.runner.received()
        message = json.loads(body)
        job_id, arrival = message["job_id"], message["arrival"]
        sub = JobSubmission.model_validate(message["job"])
        self.admission.taken(job_id)
        if not self.store.add_job(job_id, sub.user, sub.model_dump_json(), arrival):
            return  # redelivered after a crash between commit and acknowledgement
        try:
            job = job_from_wire(sub, job_id, arrival)
            self.runner.handle(JobSubmitted(self.runner.stimulus("job"), job))
        except InvalidInput as error:  # valid when accepted, but the federation changed
            self.store.job_ended(job_id, "failed", str(error))
            self.log.emit("job_failed", {"job": job_id, "user": sub.user, "gm": self.gm_id,
                                         "reason": str(error)})

    # -- events in -------------------------------------------------------------------------------

    async def _on_task_events(self, body: bytes) -> None:
        """One LM's batch: finishes committed (one transaction) before the acknowledgement,
        so a restarted GM never reruns them; then the core takes them all, and schedules once."""
        self.runner.received()
        batch = TaskEventBatchWire.model_validate_json(body)
        events = tuple(task_event_from_wire(wire) for wire in batch.events)
        self.store.tasks_done([(e.job_id, e.task_id, e.runtime or 0.0) for e in events
                               if e.kind is Reason.FINISHED
                               and self.core.would_complete(e.attempt_id)])
        self.runner.handle(TaskEventsReceived(self.runner.stimulus("task_events"), events))

    async def _on_heartbeat(self, body: bytes) -> None:
        self.runner.received()
        wire = LMSnapshotWire.model_validate_json(body)
        self.runner.handle(heartbeat_from_wire(wire, self.runner.stimulus("heartbeat"),
                                               self.topologies))

    def _job_ended(self, command: JobEnded) -> None:
        self.store.job_ended(command.job_id, command.state, command.reason)

    # -- requests to LMs -------------------------------------------------------------------------

    async def _send_launch(self, command: SendLaunch) -> None:
        path = "/v1/launch" if command.kind is RequestKind.LAUNCH else "/v1/repartition"
        body = launch_request_to_wire(command, self.gm_id,
                                      self.topologies.known_epoch(command.lm)).model_dump_json()
        await self._request(command.lm, path, body, command.request_id)

    async def _send_preempt(self, command: SendPreempt) -> None:
        body = preempt_request_to_wire(command, self.gm_id,
                                       self.topologies.known_epoch(command.lm)).model_dump_json()
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
                response = await self.client.post(url, body)
                if response.status_code == 200:
                    reply = LMReply.model_validate_json(response.content)
                    self.runner.handle(lm_replied_from_wire(
                        reply, self.runner.stimulus("reply"), self.topologies))
                    return
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code < 500:
                    break  # the LM refused the request itself: repeating it cannot help
                refused += 1
            except PeerError as error:
                failure = str(error)[:200]
                if not error.timed_out:  # slow is not gone: ask again
                    refused += 1
            except ValidationError as error:
                failure = repr(error)[:200]
                refused += 1
            except InvalidInput as error:  # a reply this GM cannot decode: asking again won't help
                failure = str(error)[:200]
                break
            attempt += 1
            await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
        self.log.emit("lm_request_failed", {"lm": lm, "request": request_id, "path": path,
                                            "error": failure})
        self.runner.handle(LMRequestFailed(self.runner.stimulus("request_failed"), lm,
                                           request_id))

    def _queue_cancel(self, command: SendCancel) -> None:
        outbox = self.cancel_outboxes.get(command.lm)
        if outbox is None or not outbox.offer(command):
            self.log.emit("cancel_dropped", {"gm": self.gm_id, "lm": command.lm,
                                             "attempt": command.attempt_id,
                                             "reason": "outbox full" if outbox else "unknown LM"})

    async def _send_cancels(self, lm: str, commands: Sequence[SendCancel]) -> None:
        url = self.endpoints.url(lm) + "/v1/cancel"
        for command in commands:
            with contextlib.suppress(PeerError):
                body = cancel_request_to_wire(command, self.gm_id)
                await self.client.post(url, body.model_dump_json())

    def _queue_reprioritize(self, command: SendReprioritize) -> None:
        outbox = self.reprioritize_outboxes.get(command.lm)
        if outbox is None or not outbox.offer(command):
            self.log.emit("reprioritize_dropped", {"gm": self.gm_id, "lm": command.lm,
                                                   "job": command.job_id,
                                                   "priority": command.priority,
                                                   "reason": "outbox full" if outbox
                                                   else "unknown LM"})

    async def _send_reprioritizations(self, lm: str,
                                      commands: Sequence[SendReprioritize]) -> None:
        url = self.endpoints.url(lm) + "/v1/reprioritize"
        latest = {command.job_id: command for command in commands}  # a job's last one only
        for command in latest.values():
            with contextlib.suppress(PeerError):
                body = reprioritize_request_to_wire(command, self.gm_id)
                await self.client.post(url, body.model_dump_json())

    # -- questions -------------------------------------------------------------------------------

    def owner_of(self, job_id: str) -> str | None:
        """The user queue of a job this GM holds or held (None: unknown here)."""
        job = self.core.jobs.get(job_id)
        if job is not None:
            return job.spec.user
        accepted = self.admission.accepted.get(job_id)
        return accepted.queue if accepted is not None else self.store.user_of(job_id)

    def job_view(self, job_id: str) -> dict:
        status = self.core.job_status(job_id)
        if status is None:
            if job_id in self.admission.accepted:
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

    def ended_jobs(self, after: int, limit: int, queue: str | None = None) -> dict:
        """The feed of ended jobs after the `after`-th: a client follows completions with one
        request a second instead of asking about every job it submitted."""
        ids, cursor = self.core.ended_since(after, min(limit, ENDED_FEED_MAX))
        # numbers between `after` and `cursor` that name no job any more: the GM forgot them.
        # Another queue's jobs, left out for a user token, are not forgotten: a client
        # cannot tell the two apart from the gaps, so the answer counts them.
        forgotten = max(cursor - after - len(ids), 0)
        jobs = []
        for job_id in ids:
            job = self.core.jobs.get(job_id)
            if job is None:
                forgotten += 1
                continue
            if queue is not None and job.spec.user != queue:
                continue
            jobs.append({"job": job_id, "user": job.spec.user, "state": str(job.state),
                         "reason": job.reason, "arrival": job.spec.arrival,
                         "finished_at": job.finished_at,
                         "task_starts": [task.started_at for task in job.tasks]})
        return {"gm": self.gm_id, "epoch": self.epoch, "cursor": cursor, "forgotten": forgotten,
                "jobs": jobs}

    def queues_view(self) -> list[dict]:
        usage = self.core.placer.usage()
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
             "pending_tasks": pending.get(q.name, 0) if q.gm == self.gm_id else None,
             "active_tasks": running.get(q.name, 0) if q.gm == self.gm_id else None,
             "backlog_part": self.admission.parts.get(q.name) if q.gm == self.gm_id else None}
            for q in self.federation.queues
        ]


class _CoreCounters:
    """Exposes the core's own counters (`placements_total.launch`, ...) at scrape time."""

    def __init__(self, core: GlobalMaster, backlog) -> None:
        self.core = core
        self.backlog = backlog

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
        pending.add_metric([], self.core.waiting)
        yield pending
        backlog = GaugeMetricFamily("megha_gm_backlog_tasks",
                                    "Waiting tasks, with those accepted and still queued")
        backlog.add_metric([], self.backlog())
        yield backlog


def create_app(service: GMService) -> FastAPI:
    app = secure_app(f"megha GM {service.gm_id}", lifespan_of(service), service.auth,
                     user_paths=USER_PATHS)

    @app.post("/v1/jobs", status_code=202, openapi_extra=wire_body(JobSubmission), responses={
        403: {"description": "A user token for another queue than the job's."},
        409: {"description": "The job id is taken: by another queue's job, or by this "
                             "queue's job with another body."},
        413: {"description": "The body is over the submission cap (from "
                             "`limits.max_tasks_per_job`)."},
        422: {"description": "A malformed job, one no node could run, a field over its "
                             "limit, or too many tasks."},
        429: {"description": "The queue's part of the GM's backlog is full (and no other "
                             "room is free), or this token submits faster than "
                             "`limits.submit_rate_per_token`; nothing was accepted. Retry "
                             "after the `Retry-After` header's seconds."}})
    async def post_job(request: Request, principal: Caller) -> dict:
        """A `JobSubmission` (common/wire.py) as JSON; 202 once it is durable."""
        # before the body is parsed: a client over its rate costs the GM no more than this
        wait = service.rates.wait(principal.name, time.monotonic())
        if wait > 0:
            service.rate_limited_total.labels(principal.name).inc()
            limits = service.federation.limits
            seconds = retry_after(wait)
            raise HTTPException(429, headers={"Retry-After": str(seconds)}, detail=(
                f"the token of {principal.name!r} submits more than "
                f"{limits.submit_rate_per_token:g} jobs/s (bursts of {limits.submit_burst}; "
                f"limits.submit_rate_per_token): retry after {seconds} s"))
        # before any task is built: a body of too many tasks costs a scan, no more
        too_big = check_shape(await request.body(), service.max_tasks_per_job)
        if too_big is not None:
            raise invalid(too_big)
        sub = await parse_body(request, JobSubmission)
        if not principal.may_use(sub.user):
            raise forbidden(f"the token of queue {principal.queue!r} may not submit jobs of "
                            f"queue {sub.user!r}")
        try:
            return {"job_id": await service.submit(sub), "gm": service.gm_id}
        except Backpressure as full:
            service.refused_total.inc()
            raise HTTPException(429, detail=full.detail,
                                headers={"Retry-After": str(full.retry_after)}) from None

    @app.get("/v1/jobs")
    async def get_ended_jobs(principal: Caller, ended_after: int = Query(0, ge=0),
                             limit: int = Query(500, ge=1, le=ENDED_FEED_MAX)) -> dict:
        """Jobs that ended after the `ended_after`-th to end (0: from the first), in the order
        they ended, with `cursor` for the next call; `epoch` changes when the GM restarts
        (then the numbering starts again). A user token sees its own queue's jobs only (the
        cursor still counts every job)."""
        return service.ended_jobs(ended_after, limit, principal.queue)

    @app.get("/v1/jobs/{job_id}", responses={404: {"description": "No such job here."}})
    async def get_job(job_id: str, principal: Caller) -> dict:
        owner = service.owner_of(job_id)
        if owner is not None and not principal.may_use(owner):
            raise forbidden(f"job {job_id!r} is of queue {owner!r}; the token of queue "
                            f"{principal.queue!r} reads only its own queue's jobs")
        return service.job_view(job_id)

    @app.get("/v1/queues")
    async def get_queues() -> list[dict]:
        """Every queue's share and usage, to any token: aggregates, no job ids."""
        return service.queues_view()

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        ok = service.broker.connected
        view = service.core.view
        body = {"gm": service.gm_id, "broker": ok, "lms_in_view": len(view.slots),
                "nodes_up_in_view": view.state.up.count() if view.state is not None else 0,
                "backlog": service.backlog(), "backlog_limit": service.backlog_limit}
        return JSONResponse(body, status_code=200 if ok else 503)

    add_shared_routes(app, service.core, service.runner.registry, service.runner.received)
    app.state.body_caps = {"/v1/jobs": RouteCap(
        submission_body_cap(service.max_tasks_per_job),
        f"{TASK_BYTES} bytes per task of limits.max_tasks_per_job")}
    return seal(app)


def main() -> None:
    """`python -m services.gm`: MEGHA_CONFIG (federation TOML), MEGHA_ID (this GM),
    MEGHA_ENDPOINTS (id=url,...), MEGHA_AMQP_URL, MEGHA_STATE_DIR (default ./state),
    MEGHA_CLUSTER_TOKEN, MEGHA_GM_TOKEN (and the other roles' tokens or digests) and
    MEGHA_USER_TOKENS (services/auth.py; any secret as NAME_FILE too), MEGHA_TLS_CERT,
    MEGHA_TLS_KEY and MEGHA_TLS_CA (services/http.py), MEGHA_MAX_BODY_BYTES."""
    env = read_service_env()

    def build() -> FastAPI:
        federation = env.federation
        auth = auth_from_env(env.log, role="gm", queues=[q.name for q in federation.queues],
                             own_queues=[q.name for q in federation.queues
                                         if q.gm == env.service_id])
        return create_app(GMService(
            federation, env.service_id, env.endpoints, required_env("MEGHA_AMQP_URL"),
            Path(os.environ.get("MEGHA_STATE_DIR", "state")), auth=auth, log=env.log))

    build_and_serve(env, build)


if __name__ == "__main__":
    main()
