"""Local run-queue policies: order, aging, re-keying, removal and the registry by name."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidInput
from common.messages import Placement
from common.models import TaskSpec
from common.policies.local_queue import (
    LOCAL_QUEUE_POLICIES,
    FifoLocalQueue,
    LocalQueueOptions,
    SrptLocalQueue,
)
from common.resources import Resources


def placement(
    attempt: str, priority: float = 0.0, pilot: bool = False, job: str = "j"
) -> Placement:
    task = TaskSpec(task_id=attempt.split("#")[0], job_id=job, demand=Resources(100, 100))
    return Placement(f"{attempt}", task, "n1", "gm-1", "alice", priority=priority, pilot=pilot)


def order(queue) -> list[str]:
    return [p.attempt_id for p in queue]


def test_registry_names_the_policies() -> None:
    assert LOCAL_QUEUE_POLICIES.names() == ("fifo", "srpt")
    assert LOCAL_QUEUE_POLICIES.get("srpt") is SrptLocalQueue
    assert LOCAL_QUEUE_POLICIES.get("fifo") is FifoLocalQueue


def test_unknown_policy_lists_known_names() -> None:
    with pytest.raises(InvalidInput) as caught:
        LOCAL_QUEUE_POLICIES.get("lifo")
    assert caught.value.field == "queue_policy"
    assert "fifo" in caught.value.message and "srpt" in caught.value.message


def test_srpt_orders_pilots_then_priority_then_arrival() -> None:
    queue = SrptLocalQueue()
    queue.push(placement("a#1", priority=5.0), 1, 0.0)
    queue.push(placement("b#1", priority=1.0), 2, 0.0)
    queue.push(placement("c#1", priority=9.0, pilot=True), 3, 0.0)
    queue.push(placement("d#1", priority=1.0), 4, 0.0)
    queue.push(placement("e#1", priority=0.5, pilot=True), 5, 0.0)
    assert order(queue) == ["e#1", "c#1", "b#1", "d#1", "a#1"]
    assert len(queue) == 5


def test_fifo_orders_by_arrival_only() -> None:
    queue = FifoLocalQueue()
    queue.push(placement("a#1", priority=5.0), 1, 0.0)
    queue.push(placement("b#1", priority=1.0, pilot=True), 2, 0.0)
    queue.push(placement("c#1", priority=0.0), 3, 0.0)
    assert order(queue) == ["a#1", "b#1", "c#1"]


@pytest.mark.parametrize("policy", LOCAL_QUEUE_POLICIES.names())
def test_remove_keeps_order_and_reports_absence(policy: str) -> None:
    queue = LOCAL_QUEUE_POLICIES.get(policy)()
    for seq, name in enumerate(["a", "b", "c"]):
        queue.push(placement(f"{name}#1", priority=float(seq)), seq, float(seq))
    removed = queue.remove("b#1")
    assert removed is not None and removed.attempt_id == "b#1"
    assert queue.remove("b#1") is None
    assert "b#1" not in queue and "a#1" in queue
    assert order(queue) == ["a#1", "c#1"]
    assert queue.get("c#1") is not None and queue.get("b#1") is None


def test_equal_keys_do_not_compare_placements() -> None:
    queue = SrptLocalQueue()
    queue.push(placement("a#1"), 1, 0.0)
    queue.push(placement("b#1"), 1, 0.0)  # a reused seq ties on the whole key
    assert order(queue) == ["a#1", "b#1"]


def test_duplicate_push_is_refused() -> None:
    queue = FifoLocalQueue()
    queue.push(placement("a#1"), 1, 0.0)
    with pytest.raises(InvalidInput):
        queue.push(placement("a#1"), 2, 0.0)
    assert len(queue) == 1


# --- aging -----------------------------------------------------------------------------------


@pytest.mark.parametrize("aging", [-0.5, math.nan, math.inf])
def test_the_options_refuse_a_bad_aging_naming_the_field(aging: float) -> None:
    """Every policy of the family is made with these options, so none sees a bad aging."""
    with pytest.raises(InvalidInput) as caught:
        LocalQueueOptions(aging=aging)
    assert caught.value.field == "aging"


def test_aging_lets_a_long_wait_beat_a_shorter_estimate_and_pilots_still_go_first() -> None:
    queue = SrptLocalQueue(LocalQueueOptions(aging=1.0))
    queue.push(placement("old#1", priority=10.0), 1, 0.0)  # static key 10
    queue.push(placement("soon#1", priority=1.0), 2, 5.0)  # 6: within 10 s, it overtakes
    queue.push(placement("late#1", priority=1.0), 3, 20.0)  # 21: 20 s later, it does not
    queue.push(placement("pilot#1", priority=50.0, pilot=True), 4, 30.0)
    assert order(queue) == ["pilot#1", "soon#1", "old#1", "late#1"]
    plain = SrptLocalQueue()  # aging 0: plain SRPT, whatever the times
    plain.push(placement("old#1", priority=10.0), 1, 0.0)
    plain.push(placement("late#1", priority=1.0), 2, 20.0)
    assert order(plain) == ["late#1", "old#1"]


def test_fifo_accepts_aging_and_ignores_it() -> None:
    queue = FifoLocalQueue(LocalQueueOptions(aging=3.0))
    queue.push(placement("a#1", priority=9.0), 1, 0.0)
    queue.push(placement("b#1", priority=0.0), 2, 100.0)
    assert order(queue) == ["a#1", "b#1"]


# integers and halves: the keys are exact in floating point, so equalities hold exactly
_arrivals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 5), st.booleans()),  # estimate, gap, pilot
    min_size=1, max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(arrivals=_arrivals, aging=st.sampled_from([0.0, 0.5, 1.0, 2.0]), later=st.integers(0, 50))
def test_the_static_key_orders_as_the_effective_key_at_any_time(
    arrivals: list[tuple[int, int, bool]], aging: float, later: int
) -> None:
    queue = SrptLocalQueue(LocalQueueOptions(aging=aging))
    now, entries = 0.0, []
    for seq, (estimate, gap, pilot) in enumerate(arrivals):
        now += gap
        queue.push(placement(f"t{seq}#1", float(estimate), pilot), seq, now)
        entries.append((f"t{seq}#1", float(estimate), pilot, now, seq))
    at = now + later

    def effective(entry: tuple) -> tuple:
        _attempt, estimate, pilot, enqueued_at, seq = entry
        return (0 if pilot else 1, estimate - aging * (at - enqueued_at), seq)

    assert order(queue) == [entry[0] for entry in sorted(entries, key=effective)]


@settings(max_examples=300, deadline=None)
@given(arrivals=_arrivals, aging=st.sampled_from([0.5, 1.0, 2.0]))
def test_an_entry_is_overtaken_only_by_arrivals_within_its_estimate_over_aging(
    arrivals: list[tuple[int, int, bool]], aging: float
) -> None:
    queue = SrptLocalQueue(LocalQueueOptions(aging=aging))
    now, entries = 0.0, []
    for seq, (estimate, gap, pilot) in enumerate(arrivals):
        now += gap
        queue.push(placement(f"t{seq}#1", float(estimate), pilot), seq, now)
        entries.append((f"t{seq}#1", float(estimate), pilot, now))
    position = {attempt: index for index, attempt in enumerate(order(queue))}
    for index, (first, estimate, pilot, at) in enumerate(entries):
        for later, _estimate, later_pilot, later_at in entries[index + 1:]:
            if not later_pilot and not pilot and later_at - at >= estimate / aging:
                assert position[first] < position[later], (first, later)


# --- re-keying a job whose estimate changed ---------------------------------------------------


def test_reprioritize_rekeys_the_jobs_entries_and_keeps_the_arrival_tiebreak() -> None:
    queue = SrptLocalQueue()
    queue.push(placement("a1#1", priority=5.0, job="a"), 1, 0.0)
    queue.push(placement("b1#1", priority=3.0, job="b"), 2, 0.0)
    queue.push(placement("a2#1", priority=5.0, job="a"), 3, 0.0)
    queue.push(placement("c1#1", priority=3.0, job="c"), 4, 0.0)
    assert order(queue) == ["b1#1", "c1#1", "a1#1", "a2#1"]
    assert queue.reprioritize("a", 3.0) == 2
    # equal priorities now: arrival order decides, as if they had been pushed with it
    assert order(queue) == ["a1#1", "b1#1", "a2#1", "c1#1"]
    assert queue.get("a1#1").priority == 3.0
    assert queue.reprioritize("a", 3.0) == 0  # nothing changed
    assert queue.reprioritize("nobody", 1.0) == 0


def test_reprioritize_keeps_the_aging_credit() -> None:
    queue = SrptLocalQueue(LocalQueueOptions(aging=1.0))
    queue.push(placement("old#1", priority=10.0, job="old"), 1, 0.0)
    queue.push(placement("new#1", priority=8.0, job="new"), 2, 5.0)  # key 13 against 10
    assert order(queue) == ["old#1", "new#1"]
    queue.reprioritize("old", 14.0)  # 14 + 0: its wait since 0 still counts
    assert order(queue) == ["new#1", "old#1"]
    queue.reprioritize("old", 12.0)
    assert order(queue) == ["old#1", "new#1"]


@pytest.mark.parametrize("policy", LOCAL_QUEUE_POLICIES.names())
def test_reprioritize_replaces_placements_instead_of_mutating_them(policy: str) -> None:
    queue = LOCAL_QUEUE_POLICIES.get(policy)()
    shared = placement("a#1", priority=5.0)
    queue.push(shared, 1, 0.0)
    assert queue.reprioritize("j", 1.0) == 1
    assert shared.priority == 5.0  # another role may hold the same object
    assert queue.get("a#1") is not shared and queue.get("a#1").priority == 1.0
    assert [p.priority for p in queue] == [1.0]


def test_the_job_index_follows_removals() -> None:
    queue = SrptLocalQueue()
    queue.push(placement("a1#1", priority=5.0, job="a"), 1, 0.0)
    queue.push(placement("a2#1", priority=5.0, job="a"), 2, 0.0)
    queue.remove("a1#1")
    assert queue.reprioritize("a", 1.0) == 1
    queue.remove("a2#1")
    assert queue.reprioritize("a", 2.0) == 0
    queue.push(placement("a1#1", priority=5.0, job="a"), 3, 0.0)  # pushed again: indexed again
    assert queue.reprioritize("a", 2.0) == 1
