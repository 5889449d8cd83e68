"""Open-loop replay of a workload against the GMs over HTTP, and what came of it.

Open loop: each job is POSTed at its scheduled time whatever the earlier answers were, so a
slow federation shows up as allocation time, not as a slower offered load. A job submitted
more than `LATE_AFTER` seconds after its time is counted and reported as late, not hidden.

Each job goes to the GM that serves its user queue (`gm_for_user`). Job ids are chosen here, so
a retry after a lost answer (transport error, 503) is the same job: the GM answers 202 for a
job id it already holds and does not run it twice.

After the last submission the replayer polls the GMs (`GET /v1/jobs/{id}`) until every accepted
job is done or failed, or until `completion_timeout`. Allocation times and job completion
times come from those answers: a task's allocation time is when it started on its worker (the
worker's clock, carried in the task event) minus the job's arrival at the GM (the GM's clock).
On one machine, as in the testbed, both are the same clock.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from loadgen.progress import Progress, quiet
from loadgen.workload import ReplayJob

LATE_AFTER = 0.1  # seconds behind schedule before a submission counts as late
SUBMIT_ATTEMPTS = 8  # per job, over about 30 s of backoff: a GM restarting comes back in that
POLL_CONCURRENCY = 16  # status requests in flight at once
FINAL_STATES = ("done", "failed")


@dataclass(slots=True)
class JobOutcome:
    job: ReplayJob
    gm: str
    late_by: float = 0.0  # seconds behind schedule when the POST went out
    attempts: int = 0
    status: str = "unsent"  # accepted | rejected | unreachable | unsent
    http_status: int | None = None
    detail: str = ""  # the GM's reason for a rejection, or the last transport error
    state: str | None = None  # the GM's last answer: pending, running, done, failed, ...
    reason: str = ""
    arrival: float | None = None  # at the GM, its clock
    finished_at: float | None = None
    task_starts: list[float | None] = field(default_factory=list)

    @property
    def jct(self) -> float | None:
        if self.arrival is None or self.finished_at is None:
            return None
        return self.finished_at - self.arrival

    def allocation_times(self) -> list[float]:
        if self.arrival is None:
            return []
        return [start - self.arrival for start in self.task_starts if start is not None]


@dataclass(slots=True)
class ReplayResult:
    outcomes: list[JobOutcome]
    wall_seconds: float
    timed_out: bool


class Replayer:
    def __init__(self, jobs: Sequence[ReplayJob], gm_for_user: Mapping[str, tuple[str, str]], *,
                 completion_timeout: float = 600.0, poll_interval: float = 1.0,
                 request_timeout: float = 10.0, progress: Progress = quiet,
                 log: Callable[[str], None] = print) -> None:
        unknown = sorted({job.user for job in jobs} - set(gm_for_user))
        if unknown:
            raise ValueError(f"no GM serves user queue(s) {', '.join(unknown)}")
        self.jobs = list(jobs)
        self.gm_for_user = dict(gm_for_user)  # user -> (gm id, base url)
        self.completion_timeout = completion_timeout
        self.poll_interval = poll_interval
        self.request_timeout = request_timeout
        self.progress = progress
        self.log = log

    async def run(self) -> ReplayResult:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=self.request_timeout, limits=limits) as client:
            started = time.monotonic()
            outcomes = await self._submit_all(client, started)
            timed_out = not await self._await_completion(client, outcomes)
            return ReplayResult(outcomes, time.monotonic() - started, timed_out)

    # -- submission ------------------------------------------------------------------------------

    async def _submit_all(self, client: httpx.AsyncClient, started: float) -> list[JobOutcome]:
        outcomes = [JobOutcome(job, self.gm_for_user[job.user][0]) for job in self.jobs]
        sent: list[asyncio.Task] = []
        done = 0

        def one_done(_: asyncio.Task) -> None:
            nonlocal done
            done += 1
            self.progress("submit", done, len(outcomes))

        for outcome in outcomes:
            delay = started + outcome.job.arrival - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._submit(client, outcome, started))
            task.add_done_callback(one_done)
            sent.append(task)
        await asyncio.gather(*sent)
        return outcomes

    async def _submit(self, client: httpx.AsyncClient, outcome: JobOutcome,
                      started: float) -> None:
        job = outcome.job
        outcome.late_by = max(0.0, time.monotonic() - (started + job.arrival))
        if outcome.late_by > LATE_AFTER:
            self.log(f"late: job {job.job_id} submitted {outcome.late_by:.3f} s after its time")
        url = self.gm_for_user[job.user][1] + "/v1/jobs"
        body = job.submission()
        backoff = 0.25
        for attempt in range(1, SUBMIT_ATTEMPTS + 1):
            outcome.attempts = attempt
            try:
                response = await client.post(url, json=body)
            except httpx.TransportError as error:
                outcome.status, outcome.detail = "unreachable", f"{type(error).__name__}: {error}"
            else:
                outcome.http_status = response.status_code
                if response.status_code == 202:
                    outcome.status, outcome.detail = "accepted", ""
                    return
                if response.status_code != 503:  # a refusal: retrying gives the same answer
                    outcome.status, outcome.detail = "rejected", reason_of(response)
                    return
                outcome.status, outcome.detail = "unreachable", reason_of(response)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 8.0)

    # -- completion ------------------------------------------------------------------------------

    async def _await_completion(self, client: httpx.AsyncClient,
                                outcomes: list[JobOutcome]) -> bool:
        waiting = [o for o in outcomes if o.status == "accepted"]
        total = len(waiting)
        deadline = time.monotonic() + self.completion_timeout
        limit = asyncio.Semaphore(POLL_CONCURRENCY)
        while waiting:
            await asyncio.gather(*(self._poll(client, o, limit) for o in waiting))
            waiting = [o for o in waiting if o.state not in FINAL_STATES]
            self.progress("complete", total - len(waiting), total)
            if not waiting:
                break
            if time.monotonic() > deadline:
                self.log(f"gave up waiting after {self.completion_timeout:.0f} s: "
                         f"{len(waiting)} job(s) unfinished")
                return False
            await asyncio.sleep(self.poll_interval)
        return True

    async def _poll(self, client: httpx.AsyncClient, outcome: JobOutcome,
                    limit: asyncio.Semaphore) -> None:
        url = f"{self.gm_for_user[outcome.job.user][1]}/v1/jobs/{outcome.job.job_id}"
        async with limit:
            try:
                response = await client.get(url)
            except httpx.TransportError:
                return  # a GM restarting: ask again next round
        if response.status_code != 200:
            return
        status = response.json()
        outcome.state = status.get("state")
        outcome.reason = status.get("reason") or ""
        if "tasks" in status:  # a restarted GM knows only the state of jobs ended before
            outcome.arrival = status.get("arrival")
            outcome.finished_at = status.get("finished_at")
            outcome.task_starts = [task.get("started_at") for task in status["tasks"]]


def reason_of(response: httpx.Response) -> str:
    """The GM's reason in one line: a validation error list (FastAPI's 422 body) as
    `tasks[7]: no node in the federation satisfies ...`, anything else as text."""
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list) and all(isinstance(item, dict) for item in detail):
        detail = "; ".join(_one_error(item) for item in detail)
    return str(detail)[:500]


def _one_error(item: dict) -> str:
    where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
    message = str(item.get("msg", item))
    return f"{where}: {message}" if where else message


def rejection_reasons(outcomes: Sequence[JobOutcome]) -> Counter[str]:
    return Counter(o.detail for o in outcomes if o.status in ("rejected", "unreachable"))
