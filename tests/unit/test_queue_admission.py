"""The GM's gate (services/admission.py): per-queue parts of the backlog, and job ids owned
by their queue."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.admission import (
    AcceptedJob,
    Backpressure,
    IdConflict,
    QueueAdmission,
    backlog_parts,
    body_digest,
    check_reuse,
)

QUEUES = {"a": 0.5, "b": 0.3, "c": 0.2}
LIMIT = 100
MAX_JOB = 30


def test_parts_follow_the_shares() -> None:
    assert backlog_parts(100, QUEUES) == {"a": 50, "b": 30, "c": 20}
    assert backlog_parts(90, {"x": 0.0, "y": 0.0, "z": 0.0}) == {"x": 30, "y": 30, "z": 30}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(QUEUES)), st.integers(1, MAX_JOB),
                          st.booleans()), max_size=60))
def test_a_queue_below_its_part_is_never_refused(steps) -> None:
    """Whatever the others submitted, a queue holding less than its part is admitted, one at
    or over it refused; and the backlog never passes the bound by more than one job per
    queue."""
    events: list[tuple[str, dict]] = []
    gate = QueueAdmission("gm-1", LIMIT, QUEUES, emit=lambda name, fields: events.append(
        (name, fields)))
    for number, (queue, tasks, consumed) in enumerate(steps):
        held = gate.accepted_tasks[queue]
        try:
            gate.admit(queue, {}, 0, placed=lambda: 0, now=float(number))
        except Backpressure as refused:
            assert held >= gate.parts[queue], (queue, held, gate.parts)
            assert refused.retry_after >= 1
            assert refused.retry_after >= 1 and f"queue {queue!r}" in refused.detail
            continue
        assert held < gate.parts[queue]
        gate.accept(f"j{number}", AcceptedJob(queue, tasks, "d"))
        if consumed:  # taken out of the broker: no longer the GM's to bound here
            gate.taken(f"j{number}")
        assert gate.total(0) <= LIMIT + len(QUEUES) * MAX_JOB
    assert {name for name, _ in events} <= {"backlog_full", "backlog_open"}


def test_a_part_is_reserved_never_lent() -> None:
    gate = QueueAdmission("gm-1", LIMIT, QUEUES, emit=lambda *_: None)
    accepted = 0
    with pytest.raises(Backpressure, match="at or over its part of 50"):
        while True:
            gate.admit("a", {}, 0, placed=lambda: 0, now=0.0)
            gate.accept(f"j{accepted}", AcceptedJob("a", 10, "d"))
            accepted += 1
    # b and c keep their 50 tasks of room, idle as they are: a stops at its part
    assert gate.accepted_tasks["a"] == 50
    gate.admit("b", {}, 0, placed=lambda: 0, now=0.0)  # below its part: admitted
    # the core's waiting tasks count as the queue's too
    with pytest.raises(Backpressure):
        gate.admit("c", {"c": 25}, 25, placed=lambda: 0, now=0.0)


def test_the_episodes_of_refusals_are_logged_per_queue() -> None:
    events: list[tuple[str, dict]] = []
    gate = QueueAdmission("gm-1", LIMIT, QUEUES, emit=lambda *e: events.append(e))
    gate.accept("big", AcceptedJob("a", 60, "d"))
    for now in (0.0, 1.0):
        with pytest.raises(Backpressure):
            gate.admit("a", {}, 0, placed=lambda: 0, now=now)
    gate.taken("big")
    gate.admit("a", {}, 0, placed=lambda: 60, now=2.0)
    assert [name for name, _ in events] == ["backlog_full", "backlog_open"]
    assert events[0][1]["queue"] == "a" and events[1][1]["refused"] == 2


def test_an_id_is_its_queues_with_its_body() -> None:
    digest = body_digest('{"user":"a"}')
    assert check_reuse("j", "a", digest, None) is False  # new
    assert check_reuse("j", "a", digest, ("a", digest)) is True  # the same job again
    with pytest.raises(IdConflict, match="taken by another queue's job") as other:
        check_reuse("j", "b", digest, ("a", digest))
    assert "'a'" not in str(other.value)  # the owner is not named
    with pytest.raises(IdConflict, match="accepted before with a different body"):
        check_reuse("j", "a", body_digest('{"user":"a","weight":2}'), ("a", digest))
