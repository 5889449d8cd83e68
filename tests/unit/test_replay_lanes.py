"""The replayer's pure parts for backpressure and completion: Retry-After, a GM's gate and
lane (schedule order kept across 429s), the feed of ended jobs, the jobs asked about one by
one, and the summary's backpressure figures. The clock is passed in: no sleeping."""

from __future__ import annotations

from collections import deque

import pytest

from loadgen.replay import (
    CHECKS_PER_ROUND,
    RETRY_AFTER_CAP,
    RETRY_AFTER_DEFAULT,
    Feed,
    Gate,
    JobOutcome,
    Lane,
    ReplayResult,
    pick_checks,
    retry_after_seconds,
    take_page,
)
from loadgen.summary import render, summarize
from loadgen.workload import ReplayJob, ReplayTask


def outcomes(count: int, gm: str = "gm-1") -> list[JobOutcome]:
    return [JobOutcome(ReplayJob(f"j{k}", "u1", float(k), (ReplayTask(500, 64, 1.0),)), gm)
            for k in range(count)]


@pytest.mark.parametrize("header, seconds", [
    ("3", 3.0), (" 7 ", 7.0), ("1.5", 1.5), ("30", 30.0), ("3600", RETRY_AFTER_CAP),
    (None, RETRY_AFTER_DEFAULT), ("", RETRY_AFTER_DEFAULT), ("soon", RETRY_AFTER_DEFAULT),
    ("0", RETRY_AFTER_DEFAULT), ("-2", RETRY_AFTER_DEFAULT), ("nan", RETRY_AFTER_DEFAULT),
    ("inf", RETRY_AFTER_DEFAULT), ("Wed, 21 Oct 2015 07:28:00 GMT", RETRY_AFTER_DEFAULT),
])
def test_retry_after_is_positive_seconds_else_the_default(header, seconds):
    assert retry_after_seconds(header) == seconds


def test_a_refusal_shuts_the_gate_then_one_probe_then_one_more_per_job_accepted():
    gate = Gate(widest=4)
    tickets = [gate.sent() for _ in range(4)]
    assert not gate.may_send(0.0)  # as wide as it goes
    gate.on_refused(2.0, now=1.0)
    assert gate.shut_until == 3.0 and not gate.may_send(2.9) and gate.opens_in(2.5) == 0.5
    gate.on_accepted(tickets[1], now=1.1)  # sent before the refusal: does not widen
    gate.on_other_answer()
    gate.on_other_answer()
    assert gate.in_flight == 0 and gate.width == 1 and not gate.may_send(2.99)
    assert gate.may_send(3.0)
    probe = gate.sent()
    assert not gate.may_send(3.0)  # the probe alone
    gate.on_accepted(probe, now=3.1)
    assert gate.width == 2
    both = [gate.sent(), gate.sent()]
    assert not gate.may_send(3.1)
    for ticket in both:
        gate.on_accepted(ticket, now=3.2)
    assert gate.width == 4
    # narrowed from the refusal (1.0) until wide again (3.2)
    assert gate.narrowed_seconds(10.0) == pytest.approx(2.2)


def test_a_post_let_through_before_a_refusal_knows_it_and_can_step_back():
    gate = Gate(widest=2)
    early, late = gate.sent(), gate.sent()
    assert not gate.refused_since(late)
    gate.on_refused(1.0, now=0.5)  # `early` was refused; `late` has not left yet
    assert gate.refused_since(late)
    gate.withdraw()
    assert gate.in_flight == 0 and not gate.refused_since(gate.sent())
    assert early == late


def test_a_second_refusal_keeps_the_later_reopening():
    gate = Gate(widest=2)
    gate.sent(), gate.sent()
    gate.on_refused(5.0, now=1.0)
    gate.on_refused(1.0, now=1.5)  # in flight together, answered after: not an earlier reopening
    assert gate.shut_until == 6.0 and gate.in_flight == 0
    assert gate.narrowed_seconds(2.0) == pytest.approx(1.0)  # still narrowed


def test_a_lane_hands_out_jobs_in_schedule_order_however_refusals_interleave():
    jobs = outcomes(6)
    lane = Lane("gm-1", "http://gm", widest=3)
    for k, job in enumerate(jobs):
        lane.join(k, job, now=0.0)
    taken = [lane.take(0.0) for _ in range(3)]
    assert [order for order, _, _ in taken] == [0, 1, 2] and not lane.ready(0.0)
    # answers come back out of order: 2 refused first, then 0; 1 accepted
    lane.gate.on_refused(1.0, now=0.2)
    lane.put_back(2, jobs[2], now=0.2)
    lane.gate.on_refused(1.0, now=0.3)
    lane.put_back(0, jobs[0], now=0.3)
    lane.gate.on_accepted(taken[1][2], now=0.4)
    lane.settled()
    assert not lane.ready(1.2) and lane.wake_in(1.0) == pytest.approx(0.3)
    order, job, probe = lane.take(1.3)
    assert order == 0 and job is jobs[0]
    assert job.held_s == pytest.approx(1.0)  # from its return (0.3) until taken (1.3)
    assert not lane.ready(1.3) and lane.wake_in(1.3) is None  # only an answer can help now
    lane.gate.on_accepted(probe, now=1.4)
    lane.settled()
    assert [lane.take(1.4)[0] for _ in range(2)] == [2, 3]
    assert [o.job.job_id for o in lane.abandon()] == ["j4", "j5"] and len(lane) == 0


def test_a_lane_is_done_when_every_job_joined_and_none_is_out():
    jobs = outcomes(1)
    lane = Lane("gm-1", "http://gm", widest=2)
    lane.join(0, jobs[0], now=0.0)
    lane.all_joined = True
    order, job, ticket = lane.take(0.0)
    assert not lane.done  # out: it may come back after a 429
    lane.gate.on_refused(1.0, now=0.1)
    lane.put_back(order, job, now=0.1)
    assert not lane.done
    order, job, ticket = lane.take(1.1)
    lane.gate.on_accepted(ticket, now=1.2)
    lane.settled()
    assert lane.done


def test_a_lane_holds_no_more_jobs_out_than_its_senders():
    jobs = outcomes(3)
    lane = Lane("gm-1", "http://gm", widest=2)
    for k, job in enumerate(jobs):
        lane.join(k, job, now=0.0)
    lane.take(0.0)
    lane.take(0.0)
    lane.gate.on_other_answer()  # a transport error: the job waits for its retry, still out
    assert lane.gate.may_send(0.0) and not lane.ready(0.0)


def page(epoch: int, cursor: int, *jobs: str, state: str = "done") -> dict:
    return {"gm": "gm-1", "epoch": epoch, "cursor": cursor, "jobs": [
        {"job": job, "user": "u1", "state": state, "reason": "", "arrival": 10.0,
         "finished_at": 12.5, "task_starts": [10.5]} for job in jobs]}


def test_the_feed_records_ended_jobs_and_moves_its_cursor():
    jobs = {o.job.job_id: o for o in outcomes(3)}
    feed = Feed("gm-1", "http://gm", epoch=7)
    news = take_page(feed, page(7, 3, "other-run", "j0", "j2"), jobs)
    assert news == (2, False, False, False) and feed.cursor == 3
    assert jobs["j0"].state == "done" and jobs["j0"].jct == 2.5
    assert jobs["j0"].allocation_times() == [0.5] and jobs["j1"].state is None
    full = take_page(feed, page(7, 5, "j1", "x"), jobs, limit=2)
    assert full.more and feed.cursor == 5


def test_a_new_epoch_restarts_the_feed_from_zero_and_says_so():
    jobs = {o.job.job_id: o for o in outcomes(2)}
    feed = Feed("gm-1", "http://gm", epoch=7, cursor=40)
    news = take_page(feed, page(8, 41, "j0"), jobs)
    assert news.restarted and news.more and news.listed == 0
    assert (feed.epoch, feed.cursor) == (8, 0) and jobs["j0"].state is None
    unknown = Feed("gm-1", "http://gm")  # its epoch could not be learned before
    assert not take_page(unknown, page(8, 1, "j0"), jobs).restarted and unknown.epoch == 8


def test_jobs_the_gm_forgot_make_its_feed_suspect_but_not_on_the_first_read():
    jobs = {o.job.job_id: o for o in outcomes(2)}
    feed = Feed("gm-1", "http://gm", epoch=7)
    assert not take_page(feed, page(7, 100_050, "j0"), jobs).skipped  # older history
    assert take_page(feed, page(7, 100_060, "j1"), jobs).skipped  # 9 numbers unlisted



def test_another_queues_jobs_left_out_of_a_user_tokens_feed_are_not_forgotten():
    """A user token's feed lists its own queue's jobs only: the gaps are the GM's other
    queues, and the GM's `forgotten` count, not the gaps, says whether it forgot any."""
    jobs = {o.job.job_id: o for o in outcomes(2)}
    feed = Feed("gm-1", "http://gm", epoch=7, cursor=10, queue="u1")
    assert not take_page(feed, page(7, 20, "j0") | {"forgotten": 0}, jobs).skipped
    assert take_page(feed, page(7, 30, "j1") | {"forgotten": 2}, jobs).skipped


def test_suspects_are_checked_first_then_silent_feeds_in_turn_within_the_budget():
    gm1, gm2 = outcomes(40, "gm-1"), outcomes(40, "gm-2")
    suspects = {o.job.job_id: o for o in gm1[:10]}
    gm1[0].state = "done"  # answered meanwhile: not asked about
    rotations = [deque(gm1), deque(gm2)]
    first = pick_checks(suspects, rotations)
    assert len(first) == CHECKS_PER_ROUND and first[:9] == gm1[1:10]
    assert first[9:20] == gm1[10:21]  # after the suspects (already chosen: skipped)
    assert first[20:] == gm2[:12]
    second = pick_checks({}, rotations)
    assert second[:16] == gm1[21:37] and second[16:] == gm2[12:28]
    assert gm1[0] not in rotations[0]  # finished: out of the rotation


def test_the_summary_reports_backpressure_only_when_a_gm_refused():
    calm = outcomes(2)
    for job in calm:
        job.status, job.state, job.accepted_after = "accepted", "done", 0.01
    summary = summarize(ReplayResult(calm, 1.0, False))
    assert summary["answers_429"] == 0 and summary["held_back_accepted_after_s"] is None
    assert "backpressure" not in render(summary)

    busy = outcomes(4)
    for job, (deferrals, held, after) in zip(busy, [(3, 4.0, 4.2), (0, 3.9, 4.0),
                                                    (0, 0.05, 0.06), (1, 1.0, None)],
                                             strict=True):
        job.deferrals, job.held_s, job.accepted_after = deferrals, held, after
        job.status = "accepted" if after is not None else "unreachable"
    summary = summarize(ReplayResult(busy, 9.0, False))
    assert (summary["answers_429"], summary["jobs_answered_429"]) == (4, 2)
    assert summary["jobs_held_back"] == 3  # the third waited 50 ms: not held back
    assert summary["held_back_accepted_after_s"]["max"] == 4.2
    assert summary["late_submissions"] == 0
    assert ("  backpressure  4 answers 429 for 2 jobs (retried as told); 3 jobs held back, "
            "accepted after p50 4.1 s, max 4.2 s") in render(summary).splitlines()
