"""The LM with local queues: a busy node takes launches into its worker's queue up to the
depth, the queued attempts hold no resources until their start is reported, and the LM never
over-commits a node however its worker's reports are ordered."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.commands import StartOnWorker
from common.events import (
    PreemptRequested,
    WorkerHeartbeat,
    WorkerTaskFinished,
    WorkerTaskStarted,
    WorkerTaskSuspended,
)
from common.lm import LocalMaster
from common.messages import RequestKind
from common.reasons import Reason
from tests.unit.test_lm import item, launch, reasons, reply, topology


def busy_lm(depth: int = 2) -> LocalMaster:
    """n0 (gm-1's, 4000 cpu) full with a0 running."""
    lm = LocalMaster(topology(), queue_depth=depth)
    assert reasons(launch(lm, item("a0#1", "n0", cpu=4000))) == [Reason.LAUNCHED]
    lm.handle(WorkerTaskStarted("s", "w0", "a0#1", 0.0), 0.0)
    return lm


def test_a_busy_node_queues_up_to_the_depth_and_no_further() -> None:
    lm = busy_lm(depth=2)
    commands = launch(lm, item("q1#1", "n0"), item("q2#1", "n0"), item("q3#1", "n0"))
    assert reasons(commands) == [Reason.QUEUED, Reason.QUEUED, Reason.QUEUE_FULL]
    # queued attempts go to the worker at once: it keeps the queue and its order
    assert [c.placement.attempt_id for c in commands if isinstance(c, StartOnWorker)] == [
        "q1#1", "q2#1"]
    assert lm.queued_on("n0") == 2
    snapshot = reply(commands).snapshot
    assert snapshot.free_cpu[0] == 0 and not snapshot.queue_room[0]
    assert snapshot.queue_room[1]  # n1 is idle; its queue has room too


def test_depth_zero_is_megha_a_busy_node_refuses() -> None:
    lm = busy_lm(depth=0)
    assert reasons(launch(lm, item("q1#1", "n0"))) == [Reason.STALE_VIEW]
    assert lm.snapshot().queue_room is None


def test_only_the_owner_queues_a_repartition_needs_room_now() -> None:
    lm = LocalMaster(topology(), queue_depth=2)
    launch(lm, item("b0#1", "n2", gm="gm-2", cpu=4000), gm="gm-2")
    refused = launch(lm, item("x#1", "n2", gm="gm-1"), kind=RequestKind.REPARTITION)
    assert reasons(refused) == [Reason.STALE_VIEW]


def test_a_queued_attempt_takes_its_resources_when_it_starts() -> None:
    lm = busy_lm()
    launch(lm, item("q1#1", "n0", cpu=3000))
    assert lm.state.free_cpu[0] == 0
    lm.handle(WorkerTaskFinished("s", "w0", "a0#1", 1.0), 1.0)
    lm.validate()
    # freed, but the node still has a queued attempt: GMs see no room there
    assert lm.state.free_cpu[0] == 4000 and lm.snapshot().free_cpu[0] == 0
    lm.handle(WorkerTaskStarted("s", "w0", "q1#1", 1.0), 1.0)
    lm.validate()
    assert lm.state.free_cpu[0] == 1000 and lm.queued_on("n0") == 0
    assert lm.snapshot().free_cpu[0] == 1000
    assert not lm.running["q1#1"].queued


def test_a_node_with_a_queue_starts_nothing_else_at_once() -> None:
    lm = busy_lm()
    launch(lm, item("q1#1", "n0", cpu=3000))
    lm.handle(WorkerTaskFinished("s", "w0", "a0#1", 1.0), 1.0)
    # 4000 free in truth, yet a small task queues behind q1: what a finish frees is the
    # queue's, in the worker's order
    assert reasons(launch(lm, item("s#1", "n0", cpu=500))) == [Reason.QUEUED]


def test_a_start_reported_before_the_end_that_made_room_waits_for_it() -> None:
    lm = busy_lm()
    launch(lm, item("q1#1", "n0", cpu=3000))
    # the worker finished a0 and started q1, but the start overtook the finish
    lm.handle(WorkerTaskStarted("s", "w0", "q1#1", 1.0), 1.0)
    lm.validate()
    assert lm.running["q1#1"].queued and lm.state.free_cpu[0] == 0
    lm.handle(WorkerTaskFinished("s", "w0", "a0#1", 1.0), 1.1)
    lm.validate()
    assert not lm.running["q1#1"].queued and lm.state.free_cpu[0] == 1000


def test_a_queued_attempt_that_ends_unstarted_frees_its_place_in_the_queue() -> None:
    lm = busy_lm(depth=1)
    launch(lm, item("q1#1", "n0"))
    assert reasons(launch(lm, item("q2#1", "n0"))) == [Reason.QUEUE_FULL]
    from common.events import CancelRequested
    lm.handle(CancelRequested("s", "gm-1", "q1#1"), 1.0)
    lm.validate()
    assert lm.queued_on("n0") == 0 and lm.state.free_cpu[0] == 0
    assert reasons(launch(lm, item("q2#1", "n0"))) == [Reason.QUEUED]


def test_preemption_never_names_queued_victims_nor_lands_on_a_queue() -> None:
    lm = busy_lm()
    launch(lm, item("q1#1", "n0", user="u2"))
    victim_queued = lm.handle(PreemptRequested("s", "gm-1", "p1", item("x#1", "n0"),
                                               ("q1#1",)), 1.0)
    assert reasons(victim_queued) == [Reason.QUEUE_FULL]
    lm.validate()


def test_a_suspended_attempt_gives_back_its_resources_and_waits_again() -> None:
    lm = busy_lm()
    launch(lm, item("short#1", "n0", cpu=1000))
    lm.handle(WorkerTaskSuspended("s", "w0", "a0#1", 2.0), 2.0)
    lm.validate()
    assert lm.running["a0#1"].queued and lm.queued_on("n0") == 2
    lm.handle(WorkerTaskStarted("s", "w0", "short#1", 2.0), 2.0)
    # the first start of a0, delivered again after its suspension, changes nothing
    lm.handle(WorkerTaskStarted("s", "w0", "a0#1", 0.0), 2.1)
    lm.validate()
    assert lm.running["a0#1"].queued
    lm.handle(WorkerTaskFinished("s", "w0", "short#1", 1.0), 3.0)
    lm.handle(WorkerTaskStarted("s", "w0", "a0#1", 3.0), 3.0)
    lm.validate()
    assert not lm.running["a0#1"].queued and lm.state.free_cpu[0] == 0


def test_a_restarted_lm_adopts_queued_attempts_without_their_resources() -> None:
    before = busy_lm()
    launch(before, item("q1#1", "n0"))
    placements = tuple(a.placement for a in before.running.values()
                       if before.topology.workers[a.node_index] == "w0")
    after = LocalMaster(topology(), queue_depth=2, recovering=True)
    after.handle(WorkerHeartbeat("h", "w0", placements, frozenset({"q1#1"})), 0.5)
    after.handle(WorkerHeartbeat("h", "w1", ()), 0.6)
    after.validate()
    assert after.queued_on("n0") == 1 and after.state.free_cpu[0] == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["launch", "start", "finish", "suspend"]),
                          st.integers(0, 7), st.sampled_from([1000, 2500, 4000])),
                max_size=60))
def test_no_order_of_reports_over_commits_a_node(ops) -> None:
    """Launches, starts, finishes and suspensions of one node's attempts in any order (as
    reordered, repeated reports would bring them): the truth stays within capacity, the
    queue within its depth plus the suspended, and the books agree (validate)."""
    lm = LocalMaster(topology(), queue_depth=3)
    now = 0.0
    for op, k, cpu in ops:
        now += 0.1
        attempt = f"t{k}#1"
        if op == "launch":
            launch(lm, item(attempt, "n0", cpu=cpu), now=now)
        elif op == "start":
            lm.handle(WorkerTaskStarted("s", "w0", attempt, now), now)
        elif op == "finish":
            lm.handle(WorkerTaskFinished("s", "w0", attempt, 1.0), now)
        else:
            lm.handle(WorkerTaskSuspended("s", "w0", attempt, now), now)
        lm.validate()
        suspended = sum(1 for a in lm.running.values() if a.suspended_at is not None)
        assert lm.queued_on("n0") <= 3 + suspended


def test_a_start_reported_twice_while_waiting_for_room_takes_it_once() -> None:
    """Found by the property above: a start repeated while it waited for room was filed to
    wait twice, so the end that made room handed the attempt its resources twice, the second
    time after it had ended (its listing came back to life)."""
    lm = LocalMaster(topology(), queue_depth=3)
    launch(lm, item("t0#1", "n0", cpu=1000))
    launch(lm, item("t1#1", "n0", cpu=4000))
    lm.handle(WorkerTaskStarted("s", "w0", "t1#1", 0.1), 0.1)
    lm.handle(WorkerTaskStarted("s", "w0", "t1#1", 0.2), 0.2)
    lm.validate()
    lm.handle(WorkerTaskFinished("s", "w0", "t0#1", 1.0), 0.3)
    lm.validate()
    lm.handle(WorkerTaskFinished("s", "w0", "t1#1", 1.0), 0.4)
    lm.validate()
    assert lm.state.free_cpu[0] == 4000 and lm.queued_on("n0") == 0 and not lm.running
