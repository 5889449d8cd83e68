"""The LM's redundant copies (common/lm_copies.py, docs/redundancy.md): copies only on idle
nodes, one a node; they yield to any GM's task; the first attempt to finish wins and the task
completes once; checkpoints carry the best progress to every copy."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.commands import (
    CheckpointOnWorker,
    Log,
    PublishTaskEvent,
    RestoreOnWorker,
    StartOnWorker,
    StopOnWorker,
)
from common.events import (
    CancelRequested,
    LaunchRequested,
    PreemptRequested,
    TaskEventBacklog,
    Tick,
    WorkerHeartbeat,
    WorkerTaskCheckpointed,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.lm import LocalMaster
from common.messages import RequestKind
from common.reasons import Reason
from tests.unit.test_lm import item, launch, reasons, topology


def copying_lm(policy: str = "srpt+r", max_copies: int = 0, **kwargs) -> LocalMaster:
    return LocalMaster(topology(), redundancy=policy, max_copies=max_copies, **kwargs)


def handle(lm: LocalMaster, event, now: float = 1.0) -> list:
    commands = lm.handle(event, now)
    lm.validate()
    return commands


def started(lm: LocalMaster, attempt: str, node: str, now: float = 0.5, **kwargs) -> list:
    """Launch `attempt` on `node` (a gm-1 launch, or gm-2's for n2/n3) and report its start."""
    gm = "gm-1" if node in ("n0", "n1") else "gm-2"
    commands = launch(lm, item(attempt, node, gm=gm, **kwargs), gm=gm)
    worker = lm.topology.workers[lm.topology.index[node]]
    return commands + handle(lm, WorkerTaskStarted("s", worker, attempt, now), now)


def of(commands: list, kind: type) -> list:
    return [c for c in commands if isinstance(c, kind)]


def logs(commands: list, name: str) -> list[dict]:
    return [c.fields for c in commands if isinstance(c, Log) and c.event == name]


def finishes(commands: list) -> list[str]:
    return [c.event.attempt_id for c in of(commands, PublishTaskEvent)
            if c.event.kind is Reason.FINISHED]


def copy_on(lm: LocalMaster, node: str) -> str:
    return lm.copies.on_node[lm.topology.index[node]]


def test_a_running_task_gets_a_copy_on_every_idle_node_and_gms_see_them_free() -> None:
    lm = copying_lm()
    launched = launch(lm, item("a#1", "n0"))
    assert not of(launched, StartOnWorker)[1:]  # launched, not started: no copies yet
    commands = started(lm, "a#1", "n0")[len(launched):]
    copies = [c.placement for c in of(commands, StartOnWorker)]
    assert [(p.node_id, p.copy_of, p.start_work) for p in copies] == [
        ("n1", "a#1", 0.0), ("n2", "a#1", 0.0), ("n3", "a#1", 0.0)]
    # the original's progress is asked for: a copy launched later starts from it
    assert of(commands, CheckpointOnWorker) == [CheckpointOnWorker("w0", ("a#1",))]
    assert [f["node"] for f in logs(commands, "copy_launched")] == ["n1", "n2", "n3"]
    # copies hold nothing: GMs see every node but n0 wholly free, and no copy is listed
    snapshot = lm.snapshot()
    assert snapshot.free_cpu == (3000, 4000, 4000, 4000)
    assert [info.attempt_id for info in snapshot.running] == ["a#1"]
    # the copy's start is no news to the GMs
    assert not of(handle(lm, WorkerTaskStarted("s", "w1", copies[0].attempt_id, 1.0)),
                  PublishTaskEvent)


def test_a_gms_launch_on_a_copys_node_stops_the_copy_first() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    copy = copy_on(lm, "n1")
    commands = launch(lm, item("b#1", "n1"))
    assert reasons(commands) == [Reason.LAUNCHED]
    stop = of(commands, StopOnWorker)
    start = of(commands, StartOnWorker)
    assert stop == [StopOnWorker("w1", copy, Reason.CANCELLED)]
    assert start[0].placement.attempt_id == "b#1"
    assert commands.index(stop[0]) < commands.index(start[0])  # the worker frees it first
    assert [f["why"] for f in logs(commands, "copy_cancelled")] == ["node_taken"]
    assert copy not in lm.copies.copies and len(lm.copies.copies) == 2


def test_a_preemption_onto_a_copys_node_sees_it_free_and_stops_it() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    copy = copy_on(lm, "n2")
    commands = handle(lm, PreemptRequested("s", "gm-2", "p1", item("x#1", "n2", gm="gm-2"), ()))
    assert reasons(commands) == [Reason.LAUNCHED]
    assert StopOnWorker("w0", copy, Reason.CANCELLED) in commands


def test_a_copy_that_finishes_first_wins_and_the_task_completes_once() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    winner, loser = copy_on(lm, "n1"), copy_on(lm, "n2")
    commands = handle(lm, WorkerTaskFinished("s", "w1", winner, 2.0), 3.0)
    assert finishes(commands) == ["a#1"]
    [event] = of(commands, PublishTaskEvent)
    assert event.gm == "gm-1" and winner in event.event.detail
    assert event.event.runtime == 2.5  # from the original's start (0.5) to the win (3.0)
    stops = {c.attempt_id for c in of(commands, StopOnWorker)}
    assert stops == {"a#1", loser, copy_on_none(lm, "n3", commands)}
    [won] = logs(commands, "copy_won")
    assert won["winner"] == winner and won["by_copy"] and won["node"] == "n1"
    assert not lm.running and not lm.copies.copies
    assert lm.snapshot().free_cpu == (4000,) * 4
    # the original's own end, and a loser's, arrive later: neither completes it again
    later = handle(lm, WorkerTaskFinished("s", "w0", "a#1", 2.6), 3.1)
    later += handle(lm, WorkerTaskFinished("s", "w0", loser, 2.6), 3.2)
    assert not finishes(later)
    assert [f["attempt"] for f in logs(later, "copy_finished_late")] == [loser]


def copy_on_none(lm: LocalMaster, node: str, commands: list) -> str:
    """The copy that was on `node` before `commands` cancelled it."""
    [fields] = [f for f in logs(commands, "copy_cancelled") if f["node"] == node]
    return fields["attempt"]


def test_the_original_finishing_first_cancels_its_copies() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    copies = set(lm.copies.copies)
    commands = handle(lm, WorkerTaskFinished("s", "w0", "a#1", 1.0), 2.0)
    assert finishes(commands) == ["a#1"]
    assert {c.attempt_id for c in of(commands, StopOnWorker)} == copies
    assert {f["why"] for f in logs(commands, "copy_cancelled")} == {"sibling_won"}
    assert logs(commands, "copy_won")[0]["by_copy"] is False


def test_copies_end_with_an_original_that_ends_otherwise() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    commands = handle(lm, CancelRequested("s", "gm-1", "a#1"))
    assert not finishes(commands) and not lm.copies.copies
    assert {f["why"] for f in logs(commands, "copy_cancelled")} == {"original_ended"}


def test_a_copy_cancelled_before_its_finish_arrives_completes_nothing() -> None:
    """The race of a finishing copy and a cancel: the copy ran to its end at its worker
    while the LM's stop was on its way (a GM's task took its node)."""
    lm = copying_lm()
    started(lm, "a#1", "n0")
    copy = copy_on(lm, "n1")
    launch(lm, item("b#1", "n1"))  # the copy is cancelled for it
    commands = handle(lm, WorkerTaskFinished("s", "w1", copy, 1.0), 2.0)
    assert not finishes(commands) and "a#1" in lm.running
    assert logs(commands, "copy_finished_late")[0]["original"] == "a#1"


def test_a_checkpoint_ahead_of_the_best_moves_every_other_copy_there() -> None:
    lm = copying_lm()
    started(lm, "a#1", "n0")
    copies = sorted(lm.copies.copies)
    commands = handle(lm, WorkerTaskCheckpointed("s", "w0", "a#1", 2.5))
    assert sorted((c.attempt_id, c.work) for c in of(commands, RestoreOnWorker)) == [
        (copy, 2.5) for copy in copies]
    assert not of(handle(lm, WorkerTaskCheckpointed("s", "w1", copies[0], 1.0)),
                  RestoreOnWorker)  # behind the best: nothing to share
    # a cancelled copy's last progress is a checkpoint too (the checkpoint at a departure)
    launch(lm, item("b#1", "n1"))
    cancelled = next(c for c in copies if c not in lm.copies.copies)
    commands = handle(lm, WorkerTaskFailed("s", "w1", cancelled, "cancelled", work=3.0))
    restored = {c.attempt_id: c.work for c in of(commands, RestoreOnWorker)}
    assert restored == {"a#1": 3.0, **{c: 3.0 for c in lm.copies.copies}}
    # and a copy launched now (n1 is idle again) starts from there
    commands = handle(lm, WorkerTaskFinished("s", "w1", "b#1", 1.0))
    [new] = [c.placement for c in of(commands, StartOnWorker)]
    assert new.node_id == "n1" and new.copy_of == "a#1" and new.start_work == 3.0


def test_copies_only_where_the_task_may_run_and_never_more_than_the_cap() -> None:
    lm = copying_lm(max_copies=2)
    commands = started(lm, "c#1", "n1", constraints=frozenset({3}))
    assert [c.placement.node_id for c in of(commands, StartOnWorker)][1:] == ["n3"]
    lm = copying_lm(max_copies=1)
    assert len(of(started(lm, "c#1", "n1"), StartOnWorker)) == 1


def test_a_node_lost_loses_its_copies_and_a_backlogged_lm_keeps_none() -> None:
    lm = copying_lm(worker_timeout=3.0)
    started(lm, "a#1", "n0")
    handle(lm, WorkerHeartbeat("h", "w0", (item("a#1", "n0"),)), 3.0)
    commands = handle(lm, Tick("t"), 3.5)  # w1 silent since 0: its nodes go down
    assert {f["why"] for f in logs(commands, "copy_cancelled")} == {"node_down"}
    assert not any(c.worker == "w1" for c in of(commands, StopOnWorker))
    assert set(lm.copies.on_node) == {2}  # only n2 (w0's) still has one
    commands = handle(lm, TaskEventBacklog("b", True, 100), 3.6)
    assert not lm.copies.copies and logs(commands, "copy_cancelled")
    handle(lm, TaskEventBacklog("b", False, 0), 3.7)
    assert set(lm.copies.on_node) == {2}  # taking work again: copies again


def test_a_restarted_lm_stops_the_copies_its_workers_still_run() -> None:
    before = copying_lm()
    started(before, "a#1", "n0")
    copy = before.copies.copies[copy_on(before, "n1")].placement
    after = copying_lm(recovering=True, epoch=1)
    commands = handle(after, WorkerHeartbeat("h", "w1", (copy,)), 0.1)
    assert StopOnWorker("w1", copy.attempt_id, Reason.CANCELLED) in commands
    assert copy.attempt_id not in after.running


OPS = st.lists(st.tuples(
    st.sampled_from(["launch", "start", "finish", "finish_copy", "fail_copy", "checkpoint",
                     "cancel", "tick"]),
    st.integers(0, 5), st.integers(0, 3)), max_size=50)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from(["srpt+r", "fair+r", "laps+r"]), st.integers(0, 3))
def test_no_order_of_reports_completes_a_task_twice_or_copies_past_the_idle_nodes(
        ops, policy, max_copies) -> None:
    """Launches, starts, finishes of originals and copies (including finishes of copies
    already cancelled), refused copies, checkpoints and GM cancels, in any order: after
    every event copies sit only on idle nodes, one a node (validate), and no task's finish
    is published twice."""
    lm = copying_lm(policy, max_copies)
    published: dict[str, int] = {}
    seen_copies: list[str] = []
    now = 0.0
    for op, k, n in ops:
        now += 0.1
        attempt, node = f"t{k}#1", f"n{n}"
        gm = "gm-1" if n < 2 else "gm-2"
        worker = f"w{n % 2}"
        if op == "launch":
            commands = handle(lm, LaunchRequested("s", gm, "r", RequestKind.LAUNCH,
                                                  (item(attempt, node, gm=gm, cpu=2000),)), now)
        elif op == "start":
            commands = handle(lm, WorkerTaskStarted("s", worker, attempt, now), now)
        elif op == "finish":
            commands = handle(lm, WorkerTaskFinished("s", worker, attempt, 1.0), now)
        elif op in ("finish_copy", "fail_copy") and seen_copies:
            copy = seen_copies[k % len(seen_copies)]
            event = (WorkerTaskFinished("s", worker, copy, 1.0) if op == "finish_copy"
                     else WorkerTaskFailed("s", worker, copy, "cancelled", work=0.5))
            commands = handle(lm, event, now)
        elif op == "checkpoint":
            commands = handle(lm, WorkerTaskCheckpointed("s", worker, attempt, 0.1 * n), now)
        elif op == "cancel":
            commands = handle(lm, CancelRequested("s", gm, attempt), now)
        else:
            commands = handle(lm, Tick("t"), now)
        seen_copies += [c.placement.attempt_id for c in of(commands, StartOnWorker)
                        if c.placement.copy_of]
        for task in finishes(commands):
            published[task] = published.get(task, 0) + 1
            assert published[task] == 1, f"{task} finished twice"
        assert len(lm.copies.copies) <= lm.copies.idle.count()


def test_a_cancelled_copy_still_listed_is_stopped_again_once_its_stop_should_have_come() -> None:
    lm = copying_lm(worker_timeout=3.0)
    started(lm, "a#1", "n0")
    copy = lm.copies.copies[copy_on(lm, "n1")].placement
    launch(lm, item("b#1", "n1"), now=1.0)  # the copy is cancelled for b
    listing = (item("a#1", "n0"), item("b#1", "n1"), copy)
    soon = handle(lm, WorkerHeartbeat("h", "w1", listing), 2.0)
    assert not [c for c in of(soon, StopOnWorker) if c.attempt_id == copy.attempt_id]
    late = handle(lm, WorkerHeartbeat("h", "w1", listing), 4.5)  # the stop was lost
    assert StopOnWorker("w1", copy.attempt_id, Reason.CANCELLED) in late
