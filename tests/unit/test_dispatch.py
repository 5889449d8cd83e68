"""A GM's requests to its LMs: a bounded number in flight per LM, and placements made while
one is out join the next batch (common/dispatch.py), on the request window alone and on a
whole in-process federation."""

from __future__ import annotations

import pytest
from harness import Federation

from common.dispatch import RequestWindow
from common.errors import InvariantViolated
from common.events import LaunchRequested, LMReplied, PreemptRequested
from common.messages import RequestKind
from common.models import JobSpec, TaskSpec
from common.resources import Resources
from common.step import Step

LAUNCH, REPARTITION = RequestKind.LAUNCH, RequestKind.REPARTITION


def job(job_id: str, width: int, cpu: int = 1000, user: str = "u1") -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(cpu, 1024), frozenset(), 1.0)
                  for i in range(width))
    return JobSpec(job_id, user, tasks, 0.0)


def requests_to(fed: Federation, lm: str) -> list[LaunchRequested]:
    return [m.event for m in fed.network
            if isinstance(m.event, LaunchRequested | PreemptRequested) and m.target == lm]


# -- the window alone ------------------------------------------------------------------------


def test_placements_join_the_open_batch_until_it_leaves() -> None:
    window = RequestWindow("gm-1", epoch=7, window=1)
    first = window.batch_for("lm-1", LAUNCH)
    assert window.batch_for("lm-1", LAUNCH) is first
    assert window.batch_for("lm-1", REPARTITION) is not first  # one batch per kind
    assert [r.request_id for r in window.ready()] == [first.request_id]
    assert first.request_id == "gm-1.7.1"
    # the repartition batch waits: one request in flight to lm-1
    assert list(window.ready()) == []
    later = window.batch_for("lm-1", LAUNCH)
    assert later is not first and not later.sent
    window.validate()


def test_an_answer_lets_the_next_request_out_in_the_order_made() -> None:
    window = RequestWindow("gm-1", epoch=0, window=1)
    first = window.batch_for("lm-1", LAUNCH)
    list(window.ready())
    repartition = window.batch_for("lm-1", REPARTITION)
    preempt = window.single("lm-1", LAUNCH)
    assert window.finished(first.request_id) is first
    assert [r.request_id for r in window.ready()] == [repartition.request_id]
    assert window.finished(repartition.request_id) is repartition
    assert [r.request_id for r in window.ready()] == [preempt.request_id]
    assert window.finished("gm-1.0.99") is None  # unknown: a late or repeated answer
    window.validate()


def test_each_lm_has_its_own_window_and_a_wider_window_lets_more_out() -> None:
    window = RequestWindow("gm-1", epoch=0, window=2)
    for lm in ("lm-1", "lm-2"):
        window.batch_for(lm, LAUNCH)
        window.batch_for(lm, REPARTITION)
        window.single(lm, LAUNCH)
    sent = list(window.ready())
    assert sorted((r.lm, r.kind, r.preempt) for r in sent) == [
        ("lm-1", LAUNCH, False), ("lm-1", REPARTITION, False),
        ("lm-2", LAUNCH, False), ("lm-2", REPARTITION, False)]
    assert window.in_flight == {"lm-1": 2, "lm-2": 2}
    assert window.queued == 2
    window.validate()


def test_requests_leave_in_the_order_their_lms_were_first_asked() -> None:
    """Only LMs with room are visited, in the order each LM first had a request: as a scan
    of every LM would send them (the GM's commands, and so its log, keep that order)."""
    window = RequestWindow("gm-1", epoch=0, window=1)
    for lm in ("lm-3", "lm-1", "lm-2"):
        window.batch_for(lm, LAUNCH)
    first = {r.lm: r for r in window.ready()}
    assert list(first) == ["lm-3", "lm-1", "lm-2"]
    # a request behind each full window; then lm-2's and lm-3's answers come, lm-2's first
    behind = {lm: window.batch_for(lm, LAUNCH) for lm in ("lm-2", "lm-1", "lm-3")}
    assert list(window.ready()) == []
    window.finished(first["lm-2"].request_id)
    window.finished(first["lm-3"].request_id)
    window.validate()
    assert [r.request_id for r in window.ready()] == [behind["lm-3"].request_id,
                                                       behind["lm-2"].request_id]
    # a request handed out and finished at once (its task ended meanwhile) frees its LM's
    # window for the next one in the same pass over the window
    window.finished(first["lm-1"].request_id)
    after = window.batch_for("lm-1", REPARTITION)
    sent = []
    for request in window.ready():
        sent.append(request.request_id)
        if request is behind["lm-1"]:
            window.finished(request.request_id)
    assert sent == [behind["lm-1"].request_id, after.request_id]
    window.validate()


def test_an_unsent_request_is_not_finished_by_a_stray_answer() -> None:
    window = RequestWindow("gm-1", epoch=0, window=1)
    window.batch_for("lm-1", LAUNCH)
    list(window.ready())
    queued = window.batch_for("lm-1", LAUNCH)
    assert window.finished(queued.request_id) is None
    assert queued.request_id in window and not queued.sent
    window.validate()


def test_validate_catches_a_miscount() -> None:
    window = RequestWindow("gm-1", epoch=0, window=1)
    window.batch_for("lm-1", LAUNCH)
    list(window.ready())
    window.in_flight["lm-1"] += 1
    with pytest.raises(InvariantViolated, match="in-flight"):
        window.validate()


def test_a_window_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RequestWindow("gm-1", epoch=0, window=0)


# -- on a federation ---------------------------------------------------------------------------


def test_jobs_placed_while_a_request_is_out_share_the_next_one() -> None:
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=8, constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    fed.submit("gm-1", job("a", 2))
    assert [len(r.placements) for r in requests_to(fed, "lm-1")] == [2]
    # three more jobs while the first request is out: no new request, one open batch
    for name in ("b", "c", "d"):
        fed.submit("gm-1", job(name, 2))
    assert [len(r.placements) for r in requests_to(fed, "lm-1")] == [2]
    fed.deliver(0)  # lm-1 takes the first request and answers
    while not any(isinstance(m.event, LMReplied) for m in fed.network[:1]):
        fed.deliver(0)
    fed.deliver(0)  # the answer reaches gm-1, which sends the open batch
    batches = [len(r.placements) for r in requests_to(fed, "lm-1")]
    assert batches == [6], batches
    fed.drain()
    assert sorted(j.job_id for j in fed.ended_jobs) == ["a", "b", "c", "d"]


def test_a_batch_whose_tasks_ended_while_it_waited_is_not_sent() -> None:
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=8, constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("a", 1))
    fed.submit("gm-1", job("b", 1))  # its task waits in the open batch
    task = gm._tasks["b/0"]
    gm._fail_job(task.job, "cancelled by the test", Step("test", fed.now))
    fed.deliver(0)
    while fed.network and not isinstance(fed.network[0].event, LMReplied):
        fed.deliver(0)
    fed.deliver(0)  # the answer frees the window: the open batch holds only b's failed task
    assert not any(isinstance(m.event, LaunchRequested) for m in fed.network)
    assert gm.view.inflight == {}  # its reservation is released, not left behind
    gm.validate()
