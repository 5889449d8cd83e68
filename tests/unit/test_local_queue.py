"""Local run-queue policies: order, removal and the registry by name."""

from __future__ import annotations

import pytest

from common.errors import InvalidInput
from common.messages import Placement
from common.models import TaskSpec
from common.policies.local_queue import (
    LOCAL_QUEUE_POLICIES,
    FifoLocalQueue,
    SrptLocalQueue,
)
from common.resources import Resources


def placement(attempt: str, priority: float = 0.0, pilot: bool = False) -> Placement:
    task = TaskSpec(task_id=attempt.split("#")[0], job_id="j", demand=Resources(100, 100))
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
    queue.push(placement("a#1", priority=5.0), 1)
    queue.push(placement("b#1", priority=1.0), 2)
    queue.push(placement("c#1", priority=9.0, pilot=True), 3)
    queue.push(placement("d#1", priority=1.0), 4)
    queue.push(placement("e#1", priority=0.5, pilot=True), 5)
    assert order(queue) == ["e#1", "c#1", "b#1", "d#1", "a#1"]
    assert len(queue) == 5


def test_fifo_orders_by_arrival_only() -> None:
    queue = FifoLocalQueue()
    queue.push(placement("a#1", priority=5.0), 1)
    queue.push(placement("b#1", priority=1.0, pilot=True), 2)
    queue.push(placement("c#1", priority=0.0), 3)
    assert order(queue) == ["a#1", "b#1", "c#1"]


@pytest.mark.parametrize("policy", LOCAL_QUEUE_POLICIES.names())
def test_remove_keeps_order_and_reports_absence(policy: str) -> None:
    queue = LOCAL_QUEUE_POLICIES.get(policy)()
    for seq, name in enumerate(["a", "b", "c"]):
        queue.push(placement(f"{name}#1", priority=float(seq)), seq)
    removed = queue.remove("b#1")
    assert removed is not None and removed.attempt_id == "b#1"
    assert queue.remove("b#1") is None
    assert "b#1" not in queue and "a#1" in queue
    assert order(queue) == ["a#1", "c#1"]
    assert queue.get("c#1") is not None and queue.get("b#1") is None


def test_equal_keys_do_not_compare_placements() -> None:
    queue = SrptLocalQueue()
    queue.push(placement("a#1"), 1)
    queue.push(placement("b#1"), 1)  # a reused seq ties on the whole key
    assert order(queue) == ["a#1", "b#1"]


def test_duplicate_push_is_refused() -> None:
    queue = FifoLocalQueue()
    queue.push(placement("a#1"), 1)
    with pytest.raises(InvalidInput):
        queue.push(placement("a#1"), 2)
    assert len(queue) == 1
