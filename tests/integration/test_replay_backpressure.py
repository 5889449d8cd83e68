"""`Replayer` against real GM, LM and worker processes: a burst that overflows the GMs' backlog
(429s, retried as told, without a retry storm, in schedule order), and completion followed
through the GMs' feeds of ended jobs across a GM restart."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from test_federation import CONFIG, free_port_block, read_events

from loadgen.replay import Post, Replayer, ReplayResult
from loadgen.summary import render, summarize
from loadgen.workload import ReplayJob, ReplayTask
from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BACKLOG_LIMIT = 8  # tasks: two 4-task jobs fill a GM
COMPLETION_TIMEOUT = 60.0  # the replayer's, after the last arrival: these take about 10 s
REPLAY_TIMEOUT = 120.0  # seconds for a whole replay, submissions and completions


def burst(tag: str, users: tuple[str, ...], jobs: int, span: float, tasks: int,
          duration: float) -> list[ReplayJob]:
    """`jobs` jobs arriving evenly within `span` seconds, users in turn."""
    return [ReplayJob(f"{tag}-{k}", users[k % len(users)], span * k / jobs,
                      tuple(ReplayTask(500, 256, duration) for _ in range(tasks)))
            for k in range(jobs)]


def replayer_for(fed: LocalFederation, jobs: list[ReplayJob], log: Callable[[str], None],
                 **options) -> Replayer:
    gm_for_user = {q.name: (q.gm, fed.endpoints.url(q.gm)) for q in fed.federation.queues}
    return Replayer(jobs, gm_for_user, completion_timeout=COMPLETION_TIMEOUT, log=log,
                    tokens=fed.user_tokens, **options)


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition never held")
        time.sleep(0.05)


def refused_by_gms(fed: LocalFederation) -> int:
    """429s the GMs answered, by their own counters (/metrics)."""
    total = 0.0
    with httpx.Client(timeout=5) as client:
        for gm in fed.federation.gms:
            for line in client.get(fed.endpoints.url(gm) + "/metrics").text.splitlines():
                if line.startswith("megha_gm_jobs_refused_total "):
                    total += float(line.split()[1])
    return int(total)


def posts_while_shut(posts: list[Post]) -> list[tuple[Post, Post]]:
    """(429, POST) pairs where the POST went to the same GM before that 429's Retry-After had
    passed: each one a request that a retry storm would send and the gate must hold back."""
    refusals = [p for p in posts if p.status == 429]
    return [(refusal, post) for refusal in refusals for post in posts
            if post.gm == refusal.gm
            and refusal.answered < post.sent < refusal.answered + refusal.retry_after - 1e-3]


def sent_ahead_of_an_earlier_job(posts: list[Post], order: dict[str, int]) -> list[Post]:
    """POSTs sent while a job of the same GM scheduled earlier waited (joined, neither
    accepted nor in flight): the lane must hand its jobs out in schedule order."""
    wrong = []
    for post in posts:
        same_gm = [p for p in posts if p.gm == post.gm]
        accepted = {p.job for p in same_gm if p.status == 202 and p.answered <= post.sent}
        in_flight = {p.job for p in same_gm if p.sent <= post.sent < p.answered}
        earlier = {p.job for p in same_gm if order[p.job] < order[post.job]}
        if earlier - accepted - in_flight:
            wrong.append(post)
    return wrong


def test_a_burst_over_the_backlog_limit_is_deferred_as_told_and_all_of_it_runs_once(
        tmp_path: Path, amqp_url: str) -> None:
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text() + f"\n[limits]\ngm_backlog_tasks = {BACKLOG_LIMIT}\n")
    jobs = burst(f"bp-{uuid.uuid4().hex[:6]}", ("u1", "u2"), jobs=40, span=1.0, tasks=4,
                 duration=0.5)
    lines: list[str] = []
    with LocalFederation(config, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed:
        replayer = replayer_for(fed, jobs, lines.append)
        result: ReplayResult = asyncio.run(asyncio.wait_for(replayer.run(), REPLAY_TIMEOUT))
        refused = refused_by_gms(fed)
        ids = {o.job.job_id for o in result.outcomes if o.status == "accepted"}
        wait_until(lambda: ids <= {e["job"] for e in read_events(fed.logs)
                                   if e["event"] == "job_accepted"})
        accepted = Counter(e["job"] for e in read_events(fed.logs)
                           if e["event"] == "job_accepted")
        # everything ran: nothing is waiting, and the GMs' own counts agree (an accepted job
        # counted after its consumer had taken it once stayed in the backlog for ever)
        with httpx.Client(timeout=5) as client:
            backlogs = {gm: client.get(fed.endpoints.url(gm) + "/healthz").json()["backlog"]
                        for gm in fed.federation.gms}
        assert backlogs == dict.fromkeys(fed.federation.gms, 0)

    outcomes = result.outcomes
    assert [o.status for o in outcomes] == ["accepted"] * len(jobs), Counter(
        o.detail for o in outcomes)
    assert not result.timed_out, lines
    assert [o.state for o in outcomes] == ["done"] * len(jobs)
    assert accepted == dict.fromkeys(ids, 1)  # every job stored once, none under another id

    answers_429 = sum(o.deferrals for o in outcomes)
    assert answers_429 >= 1, "the backlog limit never refused anything: nothing was tested"
    assert answers_429 == refused == sum(p.status == 429 for p in result.posts)
    assert posts_while_shut(result.posts) == []
    assert sent_ahead_of_an_earlier_job(result.posts, {j.job_id: k for k, j in
                                                       enumerate(jobs)}) == []
    # No storm (every waiting job once per Retry-After: jobs x seconds). A job is refused at
    # most once while its GM's gate is wide; after that each GM gets one probe per Retry-After
    # (1 s at least) and, once the probe is accepted, one more POST in flight per job accepted,
    # so the 429s of a reopening are at most one more than the jobs it accepted.
    submitting = max(p.answered for p in result.posts) - min(p.sent for p in result.posts)
    probes = len(fed.federation.gms) * (submitting + 1)
    assert answers_429 <= 2 * len(jobs) + probes, (answers_429, submitting)

    held = [o for o in outcomes if o.held_back]
    assert max(o.accepted_after for o in held) >= 1.0  # they waited seconds for the GMs...
    assert max(o.late_by for o in held) < 0.5  # ...and that wait is not the replayer's lateness

    summary = summarize(result)
    assert summary["answers_429"] == answers_429
    assert summary["jobs_answered_429"] == sum(o.deferrals > 0 for o in outcomes)
    assert summary["jobs_held_back"] == len(held) >= summary["jobs_answered_429"]
    assert summary["held_back_accepted_after_s"]["max"] == max(o.accepted_after for o in held)
    assert (f"  backpressure  {answers_429} answers 429 for {summary['jobs_answered_429']} "
            f"jobs (retried as told)") in render(summary)
    # completions came from the feed, not from asking about each job
    assert result.job_requests == 0 and result.feed_requests >= 1


def test_completions_are_followed_across_a_gm_restart(tmp_path: Path, amqp_url: str) -> None:
    """gm-1 is killed once some of its jobs have ended and others still run, and started
    again: the jobs that ended before are no longer in its feed (a new epoch), so they are
    asked about one by one; those that end after are in the new feed. Every job ends done."""
    jobs = burst(f"rs-{uuid.uuid4().hex[:6]}", ("u1",), jobs=16, span=1.0, tasks=4,
                 duration=1.5)
    lines: list[str] = []
    with LocalFederation(CONFIG, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed:
        some_ended = asyncio.Event()

        def progress(phase: str, done: int, total: int) -> None:
            if phase == "complete" and 0 < done < total:
                some_ended.set()

        replayer = replayer_for(fed, jobs, lines.append, progress=progress)

        async def restart_gm_1() -> None:
            await some_ended.wait()
            await asyncio.to_thread(fed.kill, "gm-1", signal.SIGKILL)
            await asyncio.to_thread(fed.start_service, "gm-1")
            await asyncio.to_thread(fed.wait_healthy, ["gm-1"])

        async def replay_with_restart() -> ReplayResult:
            result, _ = await asyncio.gather(replayer.run(), restart_gm_1())
            return result

        result = asyncio.run(asyncio.wait_for(replay_with_restart(), REPLAY_TIMEOUT))
        starts = [e for e in read_events(fed.logs)
                  if e["svc"] == "gm-1" and e["event"] == "gm_starting"]

    assert len(starts) == 2, "gm-1 was not restarted"
    assert not result.timed_out, lines
    assert [o.status for o in result.outcomes] == ["accepted"] * len(jobs)
    assert [o.state for o in result.outcomes] == ["done"] * len(jobs), lines
    restarted = [line for line in lines if line.startswith("gm-1 restarted")]
    assert len(restarted) == 1, lines
