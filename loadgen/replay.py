"""Open-loop replay of a workload against the GMs over HTTP, and what came of it.

Open loop: each job joins its GM's queue at its scheduled time whatever the earlier answers
were, so a slow federation shows up as allocation time, not as a slower offered load. A job
first sent more than `LATE_AFTER` seconds after its time, by the replayer's own fault, is
counted and reported as late, not hidden.

Each job goes to the GM that serves its user queue (`gm_for_user`). Job ids are chosen here, so
a retry after a lost answer (transport error, 503) or a refusal (429) is the same job: the GM
answers 202 for a job id it already holds and does not run it twice.

Submission, per GM: the jobs whose time has come wait in schedule order (`Lane`) for one of
`SENDERS_PER_GM` senders. A GM whose backlog is full answers 429 with a `Retry-After`: the job
goes back to its place at the front, and the GM's `Gate` stays shut that long, then lets one
request through (a probe) and widens again by one with each job accepted. A GM that keeps
refusing thus gets about one request per Retry-After, not one per waiting job. 429s are
retried until the completion timeout; transport errors and 503 `SUBMIT_ATTEMPTS` times.

Tokens: each request carries the bearer token of its job's user queue (`tokens`, services/
auth.py); a GM answers a user token with that queue's jobs only, so the replayer follows one
feed per (GM, queue). A token over its submission rate gets a 429 with `Retry-After` like a
full backlog, and is treated the same way.

Completion: each round the replayer reads every queue's feed of ended jobs at its GM
(`GET /v1/jobs?ended_after=CURSOR`), one request per queue and round rather than one per job
in flight. Jobs the feed cannot speak for are asked about one by one (`GET /v1/jobs/{id}`, at most
`CHECKS_PER_ROUND` a round): those of a GM that restarted (its feed's epoch changed and the
jobs that ended before are not in the new feed), those of a feed that skipped jobs it forgot,
and in turn those of a GM whose feed has named none of this replay's jobs for `FEED_SILENCE`.
Everything ends at `completion_timeout` after the last job's scheduled time.

Allocation times and job completion times come from those answers: a task's allocation time
is when it started on its worker (the worker's clock, carried in the task event) minus the
job's arrival at the GM (the GM's clock). On one machine, as in the testbed, both are the same
clock.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from api.peers import PeerClient, PeerError, PeerResponse
from loadgen.progress import Progress, quiet
from loadgen.workload import ReplayJob

LATE_AFTER = 0.1  # seconds behind schedule before a submission counts as late
SUBMIT_ATTEMPTS = 8  # per job, over about 30 s of backoff: a GM restarting comes back in that
SENDERS_PER_GM = 32  # jobs being sent to one GM at once (a POST in flight, or a retry due)
RETRY_AFTER_DEFAULT = 1.0  # seconds, when a 429 carries no usable Retry-After
RETRY_AFTER_CAP = 60.0  # a typo in a header does not park a replay for an hour
POLL_CONCURRENCY = 16  # status requests in flight at once
FEED_PAGE = 1000  # ended jobs per feed request: the GM's maximum
CHECKS_PER_ROUND = 32  # jobs asked about one by one per poll round, at most
FEED_SILENCE = 10.0  # seconds without news of this replay in a GM's feed before asking directly
FINAL_STATES = ("done", "failed")


@dataclass(slots=True)
class JobOutcome:
    job: ReplayJob
    gm: str
    late_by: float = 0.0  # seconds behind schedule when the first POST went out (our fault)
    attempts: int = 0  # POSTs sent
    status: str = "unsent"  # accepted | rejected | unreachable | unsent
    http_status: int | None = None
    detail: str = ""  # the GM's reason for a rejection, or the last transport error
    state: str | None = None  # the GM's last answer: pending, running, done, failed, ...
    reason: str = ""
    arrival: float | None = None  # at the GM, its clock
    finished_at: float | None = None
    task_starts: list[float | None] = field(default_factory=list)
    deferrals: int = 0  # answers 429: the GM's backlog was full, the job was not accepted
    held_s: float = 0.0  # seconds it waited while its GM's gate was shut or narrowed
    accepted_after: float | None = None  # seconds from its scheduled time to the GM's 202

    @property
    def jct(self) -> float | None:
        if self.arrival is None or self.finished_at is None:
            return None
        return self.finished_at - self.arrival

    @property
    def held_back(self) -> bool:
        """Whether the GM's backpressure delayed it (a 429, or a wait behind a shut gate)."""
        return self.deferrals > 0 or self.held_s > LATE_AFTER

    def allocation_times(self) -> list[float]:
        if self.arrival is None:
            return []
        return [start - self.arrival for start in self.task_starts if start is not None]


@dataclass(frozen=True, slots=True)
class Post:
    """One `POST /v1/jobs` as the replayer saw it; times in seconds since the replay started."""
    gm: str
    job: str
    sent: float
    answered: float
    status: int | None  # None: no answer (transport error)
    retry_after: float | None = None  # for a 429: how long the GM's gate was shut


@dataclass(slots=True)
class ReplayResult:
    outcomes: list[JobOutcome]
    wall_seconds: float
    timed_out: bool
    posts: list[Post] = field(default_factory=list)
    feed_requests: int = 0  # GET /v1/jobs?ended_after=: the way completions are followed
    job_requests: int = 0  # GET /v1/jobs/{id}: jobs asked about one by one


def retry_after_seconds(header: str | None) -> float:
    """A 429's `Retry-After` in seconds: a positive number of seconds (the GM sends an integer
    from 1 to 30), capped at `RETRY_AFTER_CAP`; anything else, an HTTP date included, is
    `RETRY_AFTER_DEFAULT` (zero would make the probe a busy loop)."""
    try:
        seconds = float((header or "").strip())
    except ValueError:
        return RETRY_AFTER_DEFAULT
    if not math.isfinite(seconds) or seconds <= 0:
        return RETRY_AFTER_DEFAULT
    return min(seconds, RETRY_AFTER_CAP)


# -- submission: one lane per GM ---------------------------------------------------------------


class Gate:
    """When one GM may be sent a job; the clock is passed in.

    Wide open, `widest` POSTs may be in flight. A 429 shuts the gate for its Retry-After and
    narrows it to one POST in flight (a probe); each job then accepted lets one more POST in
    flight (the width doubles every round trip, as in TCP's slow start), back to `widest`. So
    the 429s after a reopening are at most about as many as the jobs accepted since. Only POSTs
    sent since the last 429 widen it: those in flight when it came describe the backlog before
    the refusal. The time spent shut or narrowed is backpressure, kept apart from the
    replayer's own lateness."""

    def __init__(self, widest: int) -> None:
        self.widest = widest
        self.width = widest
        self.in_flight = 0
        self.shut_until = 0.0
        self._refusals = 0  # 429s so far: a POST's ticket says which gate it went through
        self._narrow_since: float | None = None
        self._narrow_total = 0.0

    def may_send(self, now: float) -> bool:
        return now >= self.shut_until and self.in_flight < self.width

    def opens_in(self, now: float) -> float:
        return max(0.0, self.shut_until - now)

    def sent(self) -> int:
        """A POST goes out; its ticket tells `on_accepted` and `refused_since` which gate it
        went through."""
        self.in_flight += 1
        return self._refusals

    def on_accepted(self, ticket: int, now: float) -> None:
        self.in_flight -= 1
        if self.refused_since(ticket):
            return
        self.width = min(self.widest, self.width + 1)
        if self.width == self.widest and self._narrow_since is not None:
            self._narrow_total += now - self._narrow_since
            self._narrow_since = None

    def on_refused(self, retry_after: float, now: float) -> None:
        self.in_flight -= 1
        self._refusals += 1
        self.width = 1
        self.shut_until = max(self.shut_until, now + retry_after)
        if self._narrow_since is None:
            self._narrow_since = now

    def on_other_answer(self) -> None:
        """A rejection, a 503, no answer: says nothing about the backlog."""
        self.in_flight -= 1

    def refused_since(self, ticket: int) -> bool:
        """Whether a 429 came after this ticket was issued."""
        return ticket != self._refusals

    def withdraw(self) -> None:
        """A POST let through is not sent after all (a 429 came before it left)."""
        self.in_flight -= 1

    def narrowed_seconds(self, now: float) -> float:
        """Seconds so far during which the gate was shut or narrower than `widest`."""
        ongoing = now - self._narrow_since if self._narrow_since is not None else 0.0
        return self._narrow_total + ongoing


@dataclass(order=True, slots=True)
class _Waiting:
    order: int  # its place in the schedule: the lane hands out the earliest first
    outcome: JobOutcome = field(compare=False)
    narrowed_then: float = field(compare=False)  # the gate's narrowed seconds when it joined


class Lane:
    """One GM's jobs whose time has come, earliest scheduled first, behind its `Gate`.

    A job refused with 429 comes back to its place in the schedule, ahead of every later job:
    order is kept however the answers of concurrent POSTs interleave. The clock is passed in."""

    def __init__(self, gm: str, url: str, widest: int = SENDERS_PER_GM) -> None:
        self.gm = gm
        self.url = url
        self.gate = Gate(widest)
        self._waiting: list[_Waiting] = []  # a heap by schedule order
        self.busy = 0  # jobs taken by a sender and not yet settled or put back
        self.all_joined = False

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def done(self) -> bool:
        return self.all_joined and not self._waiting and self.busy == 0

    def join(self, order: int, outcome: JobOutcome, now: float) -> None:
        heapq.heappush(self._waiting, _Waiting(order, outcome, self.gate.narrowed_seconds(now)))

    def put_back(self, order: int, outcome: JobOutcome, now: float) -> None:
        """After a 429: the job waits again, at its place."""
        self.busy -= 1
        self.join(order, outcome, now)

    def ready(self, now: float) -> bool:
        """A job waits, fewer than `widest` jobs are out, and the gate lets a POST through."""
        return (bool(self._waiting) and self.busy < self.gate.widest
                and self.gate.may_send(now))

    def wake_in(self, now: float) -> float | None:
        """Seconds until the lane may be ready with nothing else happening (its gate
        reopens), or None: only a job joining or an answer coming back can make it ready."""
        opens = self.gate.opens_in(now)
        if self._waiting and self.busy < self.gate.widest and opens > 0:
            return opens
        return None

    def take(self, now: float) -> tuple[int, JobOutcome, int]:
        """The earliest waiting job, to be POSTed at once (its gate ticket comes with it),
        its wait behind the gate added to its `held_s`. Only when `ready`."""
        waiting = heapq.heappop(self._waiting)
        waiting.outcome.held_s += self.gate.narrowed_seconds(now) - waiting.narrowed_then
        self.busy += 1
        return waiting.order, waiting.outcome, self.gate.sent()

    def settled(self) -> None:
        self.busy -= 1

    def abandon(self) -> list[JobOutcome]:
        """Jobs still waiting when the replay gives up."""
        left = [waiting.outcome for waiting in sorted(self._waiting)]
        self._waiting.clear()
        return left


class _Waker:
    """Wakes every coroutine waiting on it (the dispatcher of one GM's lane, and retries
    waiting for its gate) when the lane changed."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def kick(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float | None) -> None:
        event = self._event
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass


# -- completion: the GMs' feeds of ended jobs ------------------------------------------------


@dataclass(slots=True)
class Feed:
    """How far the replay has read one GM's feed of ended jobs."""
    gm: str
    url: str
    epoch: int | None = None  # the GM process's; another one means it restarted
    cursor: int = 0  # the number of the last ended job read (0: none yet)
    last_news: float = 0.0  # when it last listed a job of this replay (monotonic clock)
    queue: str | None = None  # the user queue whose token reads it (None: no token)


class FeedNews(NamedTuple):
    listed: int  # jobs of this replay it listed
    restarted: bool  # the GM restarted since the last read: read again from 0
    skipped: bool  # jobs ended that the page does not list (the GM forgot them)
    more: bool  # the page was full: read on


def take_page(feed: Feed, page: Mapping, unfinished: Mapping[str, JobOutcome],
              limit: int = FEED_PAGE) -> FeedNews:
    """Apply one answer of `GET /v1/jobs?ended_after={feed.cursor}&limit={limit}`: record the
    end of every unfinished job it lists and move the cursor. A page from another epoch is
    not used: numbering started again, so the cursor goes back to 0 and the caller reads again."""
    if page["epoch"] != feed.epoch:
        restarted = feed.epoch is not None
        feed.epoch, feed.cursor = page["epoch"], 0
        return FeedNews(0, restarted, False, True)
    after, cursor, jobs = feed.cursor, page["cursor"], page["jobs"]
    listed = 0
    for item in jobs:
        outcome = unfinished.get(item["job"])
        if outcome is not None:
            record_ended(outcome, item)
            listed += 1
    feed.cursor = cursor
    # numbers that name no job any more: forgotten by the GM (it says how many; gaps alone
    # would count another queue's jobs, which a user token does not see). From 0 that is
    # history older than this replay (the GM keeps its last 100,000); further on it may be ours.
    forgotten = page.get("forgotten", cursor - after - len(jobs))
    skipped = after > 0 and forgotten > 0
    return FeedNews(listed, False, skipped, cursor - after >= limit)


def record_ended(outcome: JobOutcome, item: Mapping) -> None:
    """An entry of the feed of ended jobs."""
    outcome.state = item.get("state")
    outcome.reason = item.get("reason") or ""
    outcome.arrival = item.get("arrival")
    outcome.finished_at = item.get("finished_at")
    outcome.task_starts = list(item.get("task_starts") or [])


def record_status(outcome: JobOutcome, status: Mapping) -> None:
    """An answer of `GET /v1/jobs/{id}`."""
    outcome.state = status.get("state")
    outcome.reason = status.get("reason") or ""
    if "tasks" in status:  # a restarted GM knows only the state of jobs ended before
        outcome.arrival = status.get("arrival")
        outcome.finished_at = status.get("finished_at")
        outcome.task_starts = [task.get("started_at") for task in status["tasks"]]


def pick_checks(suspects: Mapping[str, JobOutcome], silent: Sequence[deque[JobOutcome]],
                budget: int = CHECKS_PER_ROUND) -> list[JobOutcome]:
    """The jobs to ask about one by one this round: suspects first (in the order they became
    suspect), then the unfinished jobs of silent feeds, each feed's in turn (a job checked goes
    to the back of its rotation; finished ones drop out of it)."""
    picked = [o for o in suspects.values() if o.state not in FINAL_STATES][:budget]
    chosen = {id(o) for o in picked}
    for k, rotation in enumerate(silent):
        share = (budget - len(picked)) // (len(silent) - k)
        for _ in range(len(rotation)):
            if share <= 0:
                break
            outcome = rotation.popleft()
            if outcome.state in FINAL_STATES:
                continue
            rotation.append(outcome)
            if id(outcome) not in chosen:
                chosen.add(id(outcome))
                picked.append(outcome)
                share -= 1
    return picked


class Replayer:
    def __init__(self, jobs: Sequence[ReplayJob], gm_for_user: Mapping[str, tuple[str, str]], *,
                 completion_timeout: float = 600.0, poll_interval: float = 1.0,
                 request_timeout: float = 10.0, progress: Progress = quiet,
                 log: Callable[[str], None] = print,
                 tokens: Mapping[str, str] | None = None) -> None:
        """`tokens`: user queue -> its bearer token (None: send none, for MEGHA_AUTH=off)."""
        users = {job.user for job in jobs}
        unknown = sorted(users - set(gm_for_user))
        if unknown:
            raise ValueError(f"no GM serves user queue(s) {', '.join(unknown)}")
        untokened = sorted(users - set(tokens)) if tokens is not None else []
        if untokened:
            raise ValueError(f"no token for user queue(s) {', '.join(untokened)} "
                             f"(MEGHA_USER_TOKENS has {', '.join(sorted(tokens or {})) or 'none'})")
        self.headers = {user: {"Authorization": f"Bearer {token}"}
                        for user, token in (tokens or {}).items()}
        self.jobs = list(jobs)
        self.gm_for_user = dict(gm_for_user)  # user -> (gm id, base url)
        self.gm_urls = dict(self.gm_for_user.values())  # gm id -> base url
        self.completion_timeout = completion_timeout
        self.poll_interval = poll_interval
        self.request_timeout = request_timeout
        self.progress = progress
        self.log = log
        self.posts: list[Post] = []
        self.feed_requests = 0
        self.job_requests = 0

    async def run(self) -> ReplayResult:
        # every sender and poller gets a connection: a request waiting for one in the pool
        # would time out as if the GM were unreachable
        connections = SENDERS_PER_GM * len(self.gm_urls) + POLL_CONCURRENCY + len(self.gm_urls)
        client = PeerClient(timeout=self.request_timeout, max_connections=max(256, connections))
        await client.start()
        try:
            self.posts, self.feed_requests, self.job_requests = [], 0, 0
            feeds = await self._open_feeds(client)  # before the clock starts: not our lateness
            started = time.monotonic()
            last_scheduled = max((job.arrival for job in self.jobs), default=0.0)
            give_up_at = started + last_scheduled + self.completion_timeout
            outcomes = [JobOutcome(job, self.gm_for_user[job.user][0]) for job in self.jobs]
            submission = _Submission(self, client, outcomes, started, give_up_at)
            await submission.run()
            completed = await self._await_completion(client, outcomes, feeds, give_up_at)
            return ReplayResult(outcomes, time.monotonic() - started,
                                submission.gave_up > 0 or not completed, self.posts,
                                self.feed_requests, self.job_requests)
        finally:
            await client.close()

    # -- completion ------------------------------------------------------------------------------

    async def _open_feeds(self, client: PeerClient) -> dict[str, Feed]:
        """Each queue's feed at its GM, with its epoch before any job is sent: a GM that
        restarts during the submissions is then noticed at the first read, like one that
        restarts later."""
        feeds = {user: Feed(gm, url, queue=user) for user, (gm, url) in self.gm_for_user.items()
                 if any(job.user == user for job in self.jobs)}

        async def learn_epoch(feed: Feed) -> None:
            page = await self._feed_page(client, feed, ended_after=0, limit=1)
            if page is not None:
                feed.epoch = page["epoch"]

        await asyncio.gather(*(learn_epoch(feed) for feed in feeds.values()))
        return feeds

    async def _await_completion(self, client: PeerClient, outcomes: list[JobOutcome],
                                feeds: dict[str, Feed], deadline: float) -> bool:
        # per user queue, as the feeds
        unfinished: dict[str, dict[str, JobOutcome]] = {queue: {} for queue in feeds}
        for outcome in outcomes:
            if outcome.status == "accepted":
                unfinished[outcome.job.user][outcome.job.job_id] = outcome
        rotations = {queue: deque(jobs.values()) for queue, jobs in unfinished.items()}
        suspects: dict[str, JobOutcome] = {}  # to ask about one by one
        total = sum(len(jobs) for jobs in unfinished.values())
        for feed in feeds.values():
            feed.last_news = time.monotonic()
        limit = asyncio.Semaphore(POLL_CONCURRENCY)
        while True:
            await asyncio.gather(*(self._follow_feed(client, feeds[queue], jobs, suspects)
                                   for queue, jobs in unfinished.items() if jobs))
            now = time.monotonic()
            silent = [rotations[queue] for queue, jobs in unfinished.items()
                      if jobs and now - feeds[queue].last_news >= FEED_SILENCE]
            checks = pick_checks(suspects, silent)
            answered = await asyncio.gather(*(self._poll(client, o, limit) for o in checks))
            for outcome, ok in zip(checks, answered, strict=True):
                if ok:  # not final yet: the feed will list it when it ends
                    suspects.pop(outcome.job.job_id, None)
            left = _drop_finished(unfinished, suspects)
            self.progress("complete", total - left, total)
            if not left:
                return True
            if time.monotonic() > deadline:
                self.log(f"gave up waiting after {self.completion_timeout:.0f} s: "
                         f"{left} job(s) unfinished")
                return False
            await asyncio.sleep(self.poll_interval)

    async def _follow_feed(self, client: PeerClient, feed: Feed,
                           unfinished: dict[str, JobOutcome],
                           suspects: dict[str, JobOutcome]) -> None:
        """Read one GM's feed from its cursor to its end (or to a failed request)."""
        while True:
            page = await self._feed_page(client, feed, feed.cursor, FEED_PAGE)
            if page is None:
                return  # a GM restarting, or one without the feed: its silence tells
            news = take_page(feed, page, unfinished)
            if news.listed:
                feed.last_news = time.monotonic()
            if news.restarted or news.skipped:
                why = "restarted" if news.restarted else "forgot some ended jobs"
                fresh = {job: o for job, o in unfinished.items() if o.state not in FINAL_STATES
                         and job not in suspects}
                suspects.update(fresh)
                self.log(f"{feed.gm} {why}: asking about {len(fresh)} unfinished job(s) "
                         f"one by one")
            if not news.more:
                return

    async def _feed_page(self, client: PeerClient, feed: Feed, ended_after: int,
                         limit: int) -> dict | None:
        self.feed_requests += 1
        try:
            response = await client.request(
                "GET", f"{feed.url}/v1/jobs?ended_after={ended_after}&limit={limit}",
                headers=self.headers.get(feed.queue or ""))
        except PeerError:
            return None
        if response.status_code != 200:
            return None
        try:
            page = response.json()
        except ValueError:
            return None
        return page if isinstance(page, dict) and "epoch" in page else None

    async def _poll(self, client: PeerClient, outcome: JobOutcome,
                    limit: asyncio.Semaphore) -> bool:
        """Ask the GM about one job; whether it answered (a 404 too: the job may still be in
        the broker queue of a GM that restarted)."""
        url = f"{self.gm_for_user[outcome.job.user][1]}/v1/jobs/{outcome.job.job_id}"
        async with limit:
            self.job_requests += 1
            try:
                response = await client.request("GET", url,
                                                headers=self.headers.get(outcome.job.user))
            except PeerError:
                return False  # a GM restarting: ask again next round
        if response.status_code != 200:
            return response.status_code == 404
        record_status(outcome, response.json())
        return True


class _Submission:
    """One replay's submissions: a scheduler puts each job in its GM's lane at its time, and
    one dispatcher per GM hands the lane's jobs, as its gate allows, to delivery tasks (at
    most `SENDERS_PER_GM` jobs at a time; one coroutine waits on a lane, not one per sender)."""

    def __init__(self, replayer: Replayer, client: PeerClient,
                 outcomes: list[JobOutcome], started: float, give_up_at: float) -> None:
        self.replayer = replayer
        self.client = client
        self.outcomes = outcomes
        self.started = started
        self.give_up_at = give_up_at
        self.lanes = {gm: Lane(gm, url) for gm, url in replayer.gm_urls.items()}
        self.wakers = {gm: _Waker() for gm in self.lanes}
        self.settled = 0
        self.gave_up = 0  # jobs still refused (429) when the completion timeout came

    async def run(self) -> None:
        await asyncio.gather(self._schedule(), *(self._dispatch(lane)
                                                  for lane in self.lanes.values()))
        for lane in self.lanes.values():
            for outcome in lane.abandon():
                self._give_up(outcome)
                self._count_settled()
        if self.gave_up:
            self.replayer.log(f"gave up submitting after {self.replayer.completion_timeout:.0f}"
                              f" s: {self.gave_up} job(s) never accepted (the GM answered 429)")

    async def _schedule(self) -> None:
        """Each job joins its GM's lane at its scheduled time, whatever the GMs answer."""
        for order, outcome in enumerate(self.outcomes):
            delay = self.started + outcome.job.arrival - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lanes[outcome.gm].join(order, outcome, time.monotonic())
            self.wakers[outcome.gm].kick()
        for gm, lane in self.lanes.items():
            lane.all_joined = True
            self.wakers[gm].kick()

    async def _dispatch(self, lane: Lane) -> None:
        waker = self.wakers[lane.gm]
        deliveries: set[asyncio.Task] = set()
        while True:
            now = time.monotonic()
            if now >= self.give_up_at or lane.done:
                break
            if lane.ready(now):
                order, outcome, ticket = lane.take(now)
                if outcome.attempts == 0:
                    self._note_lateness(outcome, now - (self.started + outcome.job.arrival))
                delivery = asyncio.create_task(self._send(lane, order, outcome, ticket))
                deliveries.add(delivery)
                delivery.add_done_callback(deliveries.discard)
                continue
            wake_in = lane.wake_in(now)
            until_give_up = self.give_up_at - now
            await waker.wait(until_give_up if wake_in is None else min(wake_in, until_give_up))
        await asyncio.gather(*deliveries)  # a job refused meanwhile stays in the lane

    def _note_lateness(self, outcome: JobOutcome, waited: float) -> None:
        """Lateness is the replayer's own delay: the wait behind a shut gate is backpressure."""
        outcome.late_by = max(0.0, waited - outcome.held_s)
        if outcome.late_by > LATE_AFTER:
            self.replayer.log(f"late: job {outcome.job.job_id} submitted "
                              f"{outcome.late_by:.3f} s after its time")

    async def _send(self, lane: Lane, order: int, outcome: JobOutcome, ticket: int) -> None:
        if await self._deliver(lane, outcome, ticket):
            lane.settled()
            self._count_settled()
        else:  # not accepted yet: back to its place in the lane, behind the shut gate
            lane.put_back(order, outcome, time.monotonic())
        self.wakers[lane.gm].kick()

    def _count_settled(self) -> None:
        self.settled += 1
        self.replayer.progress("submit", self.settled, len(self.outcomes))

    async def _deliver(self, lane: Lane, outcome: JobOutcome, ticket: int) -> bool:
        """POST the job (the gate let it through: `ticket`) until it is settled (True), or
        refused with 429 or held back by a 429 that came before it left (False). Transport
        errors and 503 are retried here with backoff, `SUBMIT_ATTEMPTS` times in the job's
        life at most; a retry waits for the gate too."""
        job, gate, waker = outcome.job, lane.gate, self.wakers[lane.gm]
        url = lane.url + "/v1/jobs"
        body = json.dumps(job.submission(), separators=(",", ":"))
        while True:
            if gate.refused_since(ticket):  # between the hand-out and now: wait with the rest
                gate.withdraw()
                return False
            outcome.attempts += 1
            sent = time.monotonic()
            try:
                response = await self.client.request(
                    "POST", url, body, headers=self.replayer.headers.get(job.user))
            except PeerError as error:
                response = None
                outcome.status, outcome.detail = "unreachable", str(error)
            now = time.monotonic()
            status = response.status_code if response is not None else None
            retry_after = (retry_after_seconds(response.headers.get("retry-after"))
                           if status == 429 else None)
            self.replayer.posts.append(Post(lane.gm, job.job_id, sent - self.started,
                                            now - self.started, status, retry_after))
            if status == 429:
                gate.on_refused(retry_after, now)
                outcome.deferrals += 1
                outcome.http_status, outcome.detail = status, reason_of(response)
                if now >= self.give_up_at:
                    self._give_up(outcome)
                    return True
                return False
            if status == 202:
                gate.on_accepted(ticket, now)
                outcome.http_status, outcome.status, outcome.detail = status, "accepted", ""
                outcome.accepted_after = now - (self.started + job.arrival)
                return True
            gate.on_other_answer()
            waker.kick()  # a slot is free: a retry or the dispatcher may use it
            if response is not None:
                outcome.http_status = status
                if status != 503:  # a refusal: retrying gives the same answer
                    outcome.status, outcome.detail = "rejected", reason_of(response)
                    return True
                outcome.status, outcome.detail = "unreachable", reason_of(response)
            failures = outcome.attempts - outcome.deferrals  # in the job's whole life
            if failures >= SUBMIT_ATTEMPTS:
                return True
            await asyncio.sleep(min(0.25 * 2 ** (failures - 1), 8.0))
            while not gate.may_send(time.monotonic()):
                await waker.wait(gate.opens_in(time.monotonic()) or None)
            ticket = gate.sent()

    def _give_up(self, outcome: JobOutcome) -> None:
        self.gave_up += 1
        outcome.status = "unreachable"
        outcome.detail = (f"not accepted: {outcome.gm} was still refusing new jobs (429: "
                          f"backlog full, or the queue's token over its submission rate) when "
                          f"the replay gave up")


def _drop_finished(unfinished: dict[str, dict[str, JobOutcome]],
                   suspects: dict[str, JobOutcome]) -> int:
    """Forget the jobs that ended; how many are left."""
    for jobs in (*unfinished.values(), suspects):
        for job_id in [job_id for job_id, o in jobs.items() if o.state in FINAL_STATES]:
            del jobs[job_id]
    return sum(len(jobs) for jobs in unfinished.values())


def reason_of(response: PeerResponse) -> str:
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
