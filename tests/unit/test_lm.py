"""The LM as the judge of GM decisions: event in, commands out, truth never over-committed."""

from __future__ import annotations

import pytest

from common.cluster import ClusterTopology
from common.commands import (
    Log,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    StartOnWorker,
    StopOnWorker,
)
from common.errors import IllegalTransition, InvariantViolated
from common.events import (
    CancelRequested,
    DispatchFailed,
    LaunchRequested,
    PreemptRequested,
    TaskEventBacklog,
    Tick,
    WorkerHeartbeat,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.lm import LocalMaster
from common.lm_attempts import ATTEMPT_TRANSITIONS, AttemptState, LMAttemptBook, RunningAttempt
from common.messages import Placement, RequestKind
from common.models import NodeSpec, TaskSpec
from common.reasons import Reason
from common.resources import Resources
from common.step import Step
from common.story import TransitionLog

GMS = ["gm-1", "gm-2"]


def topology(nodes: int = 4, cpu: int = 4000, mem: int = 4096) -> ClusterTopology:
    """Nodes n0..n{k}; the first half is gm-1's partition, the second gm-2's.
    Odd nodes carry constraint 3; workers w0 (even nodes) and w1 (odd nodes)."""
    specs = [
        NodeSpec(f"n{i}", "lm-1", f"w{i % 2}", Resources(cpu, mem),
                 frozenset({3}) if i % 2 else frozenset())
        for i in range(nodes)
    ]
    return ClusterTopology("lm-1", specs, GMS)


def item(attempt: str, node: str, gm: str = "gm-1", cpu: int = 1000, mem: int = 1024,
         constraints: frozenset[int] = frozenset(), user: str = "u1") -> Placement:
    task_id = attempt.split("#")[0]
    task = TaskSpec(task_id, task_id.split("/")[0], Resources(cpu, mem), constraints, 5.0)
    return Placement(attempt, task, node, gm, user)


def launch(lm: LocalMaster, *items: Placement, gm: str = "gm-1",
           kind: RequestKind = RequestKind.LAUNCH, now: float = 0.0) -> list:
    commands = lm.handle(LaunchRequested("s", gm, "r1", kind, items), now)
    lm.validate()
    return commands


def reply(commands: list) -> ReplyToGM:
    [answer] = [c for c in commands if isinstance(c, ReplyToGM)]
    return answer


def reasons(commands: list) -> list[Reason]:
    return [r.reason for r in reply(commands).results]


def test_launch_into_own_partition_starts_on_the_hosting_worker() -> None:
    lm = LocalMaster(topology())
    commands = launch(lm, item("j/0#0.1", "n0"))
    assert reasons(commands) == [Reason.LAUNCHED]
    [start] = [c for c in commands if isinstance(c, StartOnWorker)]
    assert start.worker == "w0" and start.placement.attempt_id == "j/0#0.1"
    assert reply(commands).snapshot.free_cpu[0] == 3000
    assert reply(commands).snapshot.running is None  # replies leave the running list out


def test_never_over_commits_whatever_the_gm_asks() -> None:
    lm = LocalMaster(topology())
    items = [item(f"j/{k}#0.1", "n0", cpu=1500) for k in range(4)]
    assert reasons(launch(lm, *items)) == [Reason.LAUNCHED, Reason.LAUNCHED,
                                           Reason.STALE_VIEW, Reason.STALE_VIEW]
    assert lm.state.free_cpu[0] == 1000


def test_each_check_has_its_reason() -> None:
    lm = LocalMaster(topology())
    commands = launch(
        lm,
        item("a/0#0.1", "n3"),  # gm-2's node, asked as an internal launch
        item("a/1#0.1", "nowhere"),
        item("a/2#0.1", "n0", constraints=frozenset({3})),  # n0 lacks constraint 3
        item("a/3#0.1", "n0", cpu=5000),
    )
    assert reasons(commands) == [Reason.NOT_OWNER, Reason.UNKNOWN_NODE,
                                 Reason.CONSTRAINT_MISMATCH, Reason.STALE_VIEW]
    assert not [c for c in commands if isinstance(c, StartOnWorker)]
    assert lm.running == {}


def test_launch_ids_are_idempotent() -> None:
    lm = LocalMaster(topology())
    first = launch(lm, item("j/0#0.1", "n0"))
    again = launch(lm, item("j/0#0.1", "n0"))
    elsewhere = launch(lm, item("j/0#0.1", "n1"))
    assert reasons(first) == [Reason.LAUNCHED]
    assert reasons(again) == [Reason.ALREADY_RUNNING]  # a retried request: not run twice
    assert reasons(elsewhere) == [Reason.DUPLICATE]
    assert not [c for c in again + elsewhere if isinstance(c, StartOnWorker)]
    lm.handle(WorkerTaskFinished("f", "w0", "j/0#0.1", 5.0), 1.0)
    assert reasons(launch(lm, item("j/0#0.1", "n0"))) == [Reason.DUPLICATE]


def test_repartition_moves_exactly_the_requested_resources_and_gives_them_back() -> None:
    lm = LocalMaster(topology())
    commands = launch(lm, item("j/0#0.1", "n3", gm="gm-1", cpu=1500, mem=512), gm="gm-1",
                      kind=RequestKind.REPARTITION)
    assert reasons(commands) == [Reason.LAUNCHED]
    assert lm.running["j/0#0.1"].logical
    assert (lm.state.free_cpu[3], lm.state.free_mem[3]) == (2500, 3584)
    assert any(isinstance(c, Log) and c.event == "repartition" and c.fields["from_gm"] == "gm-2"
               for c in commands)
    # a repartition into the requester's own node is refused: it should be a plain launch
    own = launch(lm, item("j/1#0.1", "n0"), kind=RequestKind.REPARTITION)
    assert reasons(own) == [Reason.OWNED_BY_REQUESTER]
    done = lm.handle(WorkerTaskFinished("f", "w1", "j/0#0.1", 5.0), 2.0)
    lm.validate()
    assert (lm.state.free_cpu[3], lm.state.free_mem[3]) == (4000, 4096)
    [event] = [c for c in done if isinstance(c, PublishTaskEvent)]
    assert event.gm == "gm-1" and event.event.kind is Reason.FINISHED


def test_preemption_is_verified_against_the_truth() -> None:
    lm = LocalMaster(topology())
    launch(lm, item("big/0#0.1", "n2", gm="gm-2", cpu=4000, user="u2"), gm="gm-2")
    gone = lm.handle(PreemptRequested("p", "gm-1", "r2", item("x/0#0.1", "n2", cpu=2000),
                                      ("nope#0.1",)), 1.0)
    assert reasons(gone) == [Reason.VICTIM_GONE]
    assert "big/0#0.1" in lm.running
    too_big = lm.handle(PreemptRequested("p", "gm-1", "r3", item("x/0#0.1", "n0", cpu=2000),
                                         ("big/0#0.1",)), 1.0)
    assert reasons(too_big) == [Reason.VICTIM_GONE]  # the victim runs on n2, not n0
    ok = lm.handle(PreemptRequested("p", "gm-1", "r4", item("x/0#0.1", "n2", cpu=2000),
                                    ("big/0#0.1",)), 1.0)
    lm.validate()
    assert reasons(ok) == [Reason.LAUNCHED]
    assert lm.running["x/0#0.1"].logical  # n2 belongs to gm-2
    [stop] = [c for c in ok if isinstance(c, StopOnWorker)]
    assert stop.attempt_id == "big/0#0.1" and stop.reason is Reason.PREEMPTED
    [told] = [c for c in ok if isinstance(c, PublishTaskEvent)]
    assert told.gm == "gm-2" and told.event.kind is Reason.PREEMPTED


def test_preemption_refused_when_victims_would_not_make_room() -> None:
    lm = LocalMaster(topology())
    launch(lm, item("a/0#0.1", "n2", gm="gm-2", cpu=1000), item("b/0#0.1", "n2", gm="gm-2",
                                                                 cpu=3000), gm="gm-2")
    answer = lm.handle(PreemptRequested("p", "gm-1", "r", item("x/0#0.1", "n2", cpu=3000),
                                        ("a/0#0.1",)), 1.0)
    assert reasons(answer) == [Reason.VICTIMS_INSUFFICIENT]
    assert set(lm.running) == {"a/0#0.1", "b/0#0.1"}


def test_silent_worker_marks_its_nodes_down_and_reports_tasks_lost() -> None:
    lm = LocalMaster(topology(), worker_timeout=3.0)
    launch(lm, item("j/0#0.1", "n0"), item("j/1#0.1", "n1"))
    lm.handle(WorkerHeartbeat("h", "w1", tuple(a.placement for a in lm.running.values()
                                                if a.placement.node_id == "n1")), 2.0)
    commands = lm.handle(Tick("t"), 3.5)
    lm.validate()
    lost = [c.event for c in commands if isinstance(c, PublishTaskEvent)]
    assert [e.attempt_id for e in lost] == ["j/0#0.1"] and lost[0].kind is Reason.LOST
    assert not lm.state.up[0] and not lm.state.up[2] and lm.state.up[1]
    assert reasons(launch(lm, item("k/0#0.1", "n0"), now=3.5)) == [Reason.NODE_DOWN]
    lm.handle(WorkerHeartbeat("h", "w0", ()), 4.0)
    assert lm.state.up[0]
    assert reasons(launch(lm, item("k/1#0.1", "n0"), now=4.0)) == [Reason.LAUNCHED]


def test_a_restarted_lm_recovers_running_tasks_from_its_workers() -> None:
    before = LocalMaster(topology())
    launch(before, item("j/0#0.1", "n0", cpu=3000), item("j/1#0.1", "n3", gm="gm-2"),
           gm="gm-1")
    running_w0 = tuple(a.placement for a in before.running.values()
                       if a.placement.node_id == "n0")
    after = LocalMaster(topology(), epoch=1, recovering=True, worker_timeout=3.0)
    assert reasons(launch(after, item("k/0#0.1", "n0"))) == [Reason.LM_RECOVERING]
    after.handle(WorkerHeartbeat("h", "w0", running_w0), 0.5)
    after.handle(WorkerHeartbeat("h", "w1", ()), 0.6)
    after.validate()
    assert not after.recovering and "j/0#0.1" in after.running
    assert reasons(launch(after, item("k/0#0.1", "n0", cpu=2000), now=1.0)) == [
        Reason.STALE_VIEW]  # the adopted task still holds 3000 of n0's 4000


def test_heartbeats_fall_due_and_versions_only_grow() -> None:
    lm = LocalMaster(topology(), heartbeat_interval=1.0)
    first = [c for c in lm.handle(Tick("t"), 0.0) if isinstance(c, PublishHeartbeat)]
    assert len(first) == 1 and first[0].snapshot.running == ()
    assert not [c for c in lm.handle(Tick("t"), 0.5) if isinstance(c, PublishHeartbeat)]
    answer = reply(launch(lm, item("j/0#0.1", "n0"), now=0.6)).snapshot
    [second] = [c for c in lm.handle(Tick("t"), 1.0) if isinstance(c, PublishHeartbeat)]
    assert first[0].snapshot.version < answer.version < second.snapshot.version
    assert [r.attempt_id for r in second.snapshot.running] == ["j/0#0.1"]


@pytest.mark.parametrize("report_ends", [False, True])
def test_an_lm_that_reports_ends_publishes_its_state_after_a_step_that_ended_one(
        report_ends: bool) -> None:
    """`[timing] report_ends`: the room an end frees reaches the GMs in that step, not at the
    next heartbeat; a step that ended nothing publishes nothing."""
    lm = LocalMaster(topology(), heartbeat_interval=10.0, report_ends=report_ends)
    lm.handle(Tick("t"), 0.0)  # the first heartbeat
    launch(lm, item("j/0#0.1", "n0"), item("j/1#0.1", "n0"), now=0.1)
    started = lm.handle(WorkerTaskStarted("s", "w0", "j/0#0.1", 0.2), 0.2)
    assert not [c for c in started if isinstance(c, PublishHeartbeat)]
    ended = [c for c in lm.handle(WorkerTaskFinished("f", "w0", "j/0#0.1", 1.0), 1.0)
             if isinstance(c, PublishHeartbeat)]
    if not report_ends:
        assert not ended
        return
    [published] = ended
    assert [r.attempt_id for r in published.snapshot.running] == ["j/1#0.1"]
    assert published.snapshot.free_cpu[0] == 3000  # n0's 4000 less j/1's 1000
    assert not [c for c in lm.handle(Tick("t"), 2.0) if isinstance(c, PublishHeartbeat)]


def test_cancel_by_the_owner_stops_the_attempt() -> None:
    lm = LocalMaster(topology())
    launch(lm, item("j/0#0.1", "n0"))
    lm.handle(WorkerTaskStarted("s", "w0", "j/0#0.1"), 0.1)
    assert lm.handle(CancelRequested("c", "gm-2", "j/0#0.1"), 0.2)[0].event == "cancel_ignored"
    commands = lm.handle(CancelRequested("c", "gm-1", "j/0#0.1"), 0.2)
    lm.validate()
    assert any(isinstance(c, StopOnWorker) for c in commands) and lm.running == {}
    assert [(e["old"], e["new"]) for e in lm.story("j/0#0.1")] == [
        ("new", "launched"), ("launched", "running"), ("running", "cancelled")]


@pytest.mark.parametrize("field,value", [("cpu_m", 0), ("mem_mib", -1)])
def test_topology_refuses_bad_nodes(field: str, value: int) -> None:
    from common.errors import InvalidInput

    capacity = {"cpu_m": 1000, "mem_mib": 1000, field: value}
    with pytest.raises(InvalidInput, match=field):
        ClusterTopology("lm", [NodeSpec("n0", "lm", "w", Resources(**capacity))], GMS)


def test_reports_from_strangers_and_repeated_starts_change_nothing() -> None:
    lm = LocalMaster(topology(), worker_timeout=3.0)
    launch(lm, item("j/0#0.1", "n0"))
    first = lm.handle(WorkerTaskStarted("s", "w0", "j/0#0.1"), 0.5)
    again = lm.handle(WorkerTaskStarted("s", "w0", "j/0#0.1"), 0.6)
    assert len([c for c in first if isinstance(c, PublishTaskEvent)]) == 1
    assert not [c for c in again if isinstance(c, PublishTaskEvent)]
    lm.handle(WorkerTaskStarted("s", "intruder", "j/0#0.1"), 0.7)
    assert [e["new"] for e in lm.story("j/0#0.1")] == ["launched", "running"]
    lm.handle(Tick("t"), 10.0)  # used to raise KeyError for the unknown worker
    lm.validate()


def test_a_dispatch_that_never_arrived_is_lost_at_once_and_slow_ones_get_time() -> None:
    lm = LocalMaster(topology(), worker_timeout=1.0, dispatch_timeout=5.0)
    launch(lm, item("j/0#0.1", "n0"), item("j/1#0.1", "n0"))
    lost = lm.handle(DispatchFailed("d", "w0", "j/0#0.1", "connection refused"), 0.5)
    assert [c.event.kind for c in lost if isinstance(c, PublishTaskEvent)] == [Reason.LOST]
    # j/1 was never acknowledged by w0: a heartbeat without it is no proof before 5 s
    lm.handle(WorkerHeartbeat("h", "w0", ()), 2.0)
    assert "j/1#0.1" in lm.running
    lm.handle(WorkerHeartbeat("h", "w0", ()), 5.5)
    assert "j/1#0.1" not in lm.running
    lm.validate()


def heartbeats_between(lm: LocalMaster, start: float, end: float, step: float = 0.25) -> list:
    published = []
    now = start
    while now <= end + 1e-9:
        published += [(now, c.snapshot) for c in lm.handle(Tick("t"), now)
                      if isinstance(c, PublishHeartbeat)]
        now += step
    return published


def test_an_idle_lm_repeats_its_heartbeat_only_at_the_keepalive() -> None:
    lm = LocalMaster(topology(), heartbeat_interval=1.0, heartbeat_keepalive=3.0,
                     worker_timeout=100.0)  # workers stay "alive" without heartbeats here
    lm.handle(WorkerHeartbeat("h", "w0", ()), 0.0)
    lm.handle(WorkerHeartbeat("h", "w1", ()), 0.0)
    idle = heartbeats_between(lm, 0.0, 9.0)
    assert [t for t, _ in idle] == [0.0, 3.0, 6.0, 9.0]
    assert len({id(s) for _, s in idle}) == 1  # the same unchanged snapshot, repeated
    launch(lm, item("a/0#1", "n0"), now=9.1)  # a change: the next beat carries it
    busy = heartbeats_between(lm, 9.25, 12.0)
    assert [t for t, _ in busy] == [10.0]
    assert busy[0][1].version > idle[-1][1].version
    assert [r.attempt_id for r in busy[0][1].running] == ["a/0#1"]


def test_heartbeats_keep_their_beat_between_coarse_ticks() -> None:
    lm = LocalMaster(topology(), heartbeat_interval=1.0)
    times = [t for t, _ in heartbeats_between(lm, 0.0, 10.0, step=0.4)]
    # ticks every 0.4 s: a beat is never skipped, and never more than a tick late
    assert len(times) == 11
    assert all(abs(t - k) < 0.4 for k, t in enumerate(times))


def test_a_backlogged_lm_takes_nothing_new_and_shows_its_nodes_unavailable() -> None:
    lm = LocalMaster(topology())
    launch(lm, item("a/0#1", "n0"))
    commands = lm.handle(TaskEventBacklog("b", full=True, size=100), 1.0)
    assert [c.event for c in commands if isinstance(c, Log)] == ["lm_backlogged"]
    answer = reply(launch(lm, item("b/0#1", "n1")))
    assert [r.reason for r in answer.results] == [Reason.LM_BACKLOGGED]
    assert not answer.snapshot.up.any()
    # what runs goes on: its end is still taken and reported
    finished = lm.handle(WorkerTaskFinished("f", "w0", "a/0#1", 1.0), 2.0)
    assert any(isinstance(c, PublishTaskEvent) for c in finished)
    # drained: the refused attempt, asked again, is taken, and the nodes show up again
    lm.handle(TaskEventBacklog("b", full=False, size=10), 3.0)
    answer = reply(launch(lm, item("b/0#1", "n1")))
    assert [r.reason for r in answer.results] == [Reason.LAUNCHED]
    assert answer.snapshot.up.all()


# -- the attempt lifecycle -------------------------------------------------------------------


def ended_before_starting(lm: LocalMaster, how: str) -> None:
    """End the launched (never started) attempt j/0#0.1 on n0 of gm-1 the way `how` says."""
    if how == "cancelled":
        lm.handle(CancelRequested("c", "gm-1", "j/0#0.1"), 0.5)
    elif how == "preempted":
        lm.handle(PreemptRequested("p", "gm-2", "r2", item("x/0#0.1", "n0", gm="gm-2",
                                                              cpu=4000), ("j/0#0.1",)), 0.5)
    elif how == "lost":
        lm.handle(DispatchFailed("d", "w0", "j/0#0.1", "connection refused"), 0.5)
    else:
        lm.handle(WorkerHeartbeat("h", "w0", ()), 10.0)  # w0 dropped it: lost after a while


@pytest.mark.parametrize("how", ["cancelled", "preempted", "lost", "dropped"])
def test_an_attempt_ended_before_it_started_says_so_in_its_story(how: str) -> None:
    lm = LocalMaster(topology(), worker_timeout=100.0, dispatch_timeout=5.0)
    launch(lm, item("j/0#0.1", "n0"))
    ended_before_starting(lm, how)
    lm.validate()
    assert "j/0#0.1" not in lm.running
    *_, last = lm.story("j/0#0.1")
    new = "lost" if how == "dropped" else how
    assert (last["old"], last["new"]) == ("launched", new)


def test_an_adopted_attempt_ends_from_adopted_and_its_start_report_is_a_repeat() -> None:
    lm = LocalMaster(topology(), recovering=True)
    lm.handle(WorkerHeartbeat("h", "w0", (item("j/0#0.1", "n0"),)), 0.1)
    assert [c.event for c in lm.handle(WorkerTaskStarted("s", "w0", "j/0#0.1"), 0.2)
            if isinstance(c, Log)] == ["worker_report_repeated"]
    lm.handle(WorkerTaskFinished("f", "w0", "j/0#0.1", 1.0), 0.3)
    lm.validate()
    assert [(e["old"], e["new"], e["detail"]) for e in lm.story("j/0#0.1")] == [
        ("new", "adopted", "w0"), ("adopted", "finished", "")]


def test_every_attempt_state_has_its_moves_and_ends_are_final() -> None:
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptState)
    for end in (AttemptState.FINISHED, AttemptState.FAILED, AttemptState.LOST,
                AttemptState.PREEMPTED, AttemptState.CANCELLED):
        assert ATTEMPT_TRANSITIONS[end] == frozenset()
        assert end in ATTEMPT_TRANSITIONS[AttemptState.LAUNCHED]


def test_an_illegal_attempt_transition_is_refused_with_the_attempt_story() -> None:
    log = TransitionLog()
    book = LMAttemptBook("lm-1", log, ended_memory=10)
    attempt = RunningAttempt(item("j/0#0.1", "n0"), 0, False, 0.0)
    book.add(Step("launch-1", 0.0), attempt, "n0")
    book.start(Step("started-1", 1.0), attempt)
    with pytest.raises(IllegalTransition) as refused:
        book.start(Step("started-again", 2.0), attempt)  # a start reported twice
    assert (refused.value.old, refused.value.new) == ("running", "running")
    assert [e["stimulus_id"] for e in refused.value.story] == ["launch-1", "started-1"]
    book.end(Step("finished-1", 3.0), "j/0#0.1", Reason.FINISHED, "")
    with pytest.raises(IllegalTransition):
        book.add(Step("launch-again", 4.0), RunningAttempt(item("j/0#0.1", "n0"), 0, False, 4.0,
                                                           AttemptState.RUNNING), "n0")
    assert len(log) == 3  # a refused move is not recorded
    book.validate()


def test_validate_catches_an_attempt_whose_state_drifted() -> None:
    lm = LocalMaster(topology())
    launch(lm, item("j/0#0.1", "n0"))
    lm.running["j/0#0.1"].state = AttemptState.FINISHED  # corrupt on purpose
    with pytest.raises(InvariantViolated, match="j/0#0.1"):
        lm.validate()


def test_every_event_carries_the_stimulus_id_its_step_is_made_from() -> None:
    from dataclasses import fields, is_dataclass

    from common import events

    kinds = [kind for kind in vars(events).values()
             if is_dataclass(kind) and kind.__module__ == events.__name__]
    assert len(kinds) > 10
    for kind in kinds:
        assert fields(kind)[0].name == "stimulus_id", kind.__name__


def test_a_snapshot_copies_the_state_anew_only_after_a_change() -> None:
    """Snapshots share their copies of free resources and liveness while the LM's change
    journal noted nothing since; after a change they show the state as it is."""
    lm = LocalMaster(topology())
    reply = lm.reply_snapshot()
    heartbeat = lm.snapshot()
    assert heartbeat.seq > reply.seq and heartbeat.free_cpu is reply.free_cpu
    assert heartbeat.up is reply.up
    launch(lm, item("j/0#0", "n0"))
    after = lm.snapshot()
    assert after.free_cpu is not reply.free_cpu
    assert (after.free_cpu, after.free_mem) == (tuple(lm.state.free_cpu),
                                                tuple(lm.state.free_mem))
    assert after.free_cpu[0] == reply.free_cpu[0] - 1000
