"""The GM: validation at submission, placement flows, policies, recovery. Real cores wired
by the in-process harness (tests/harness.py); deliveries are explicit where order matters."""

from __future__ import annotations

import pytest
from harness import DEFAULT_CAPACITY, Federation, Message, make_topologies

from common.cluster import ClusterTopology
from common.commands import SendLaunch
from common.errors import InvalidInput
from common.events import (
    JobSubmitted,
    LaunchRequested,
    LMRequestFailed,
    PreemptRequested,
    ReprioritizeRequested,
    TaskEventReceived,
)
from common.gm import GlobalMaster, GMConfig
from common.lifecycle import TaskState
from common.messages import RequestKind
from common.models import JobSpec, NodeSpec, TaskSpec
from common.policies.fairness import UserQueue
from common.policies.placement import PLACEMENT_POLICIES
from common.reasons import Reason
from common.resources import Resources

NO_CONSTRAINTS = frozenset()


def job(job_id: str, user: str, width: int, cpu: int = 1000, mem: int = 1024,
        constraints: frozenset[int] = NO_CONSTRAINTS, duration: float = 1.0) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(cpu, mem), constraints, duration)
                  for i in range(width))
    return JobSpec(job_id, user, tasks, 0.0)


def started(fed: Federation) -> Federation:
    fed.tick()
    fed.run_until_quiet()
    return fed


def events(fed: Federation, name: str) -> list[dict]:
    return [log.fields for _, log in fed.logs if log.event == name]


# -- submission ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,field",
    [
        (job("j", "u1", 1, constraints=frozenset({21})), "tasks[0].constraints"),
        (job("j", "u1", 1, constraints={1}), "tasks[0].constraints"),  # a set: unhashable
        (job("j", "u1", 1, constraints=(1,)), "tasks[0].constraints"),  # hashable, not a set
        (job("j", "u1", 1, cpu=0), "tasks[0].demand.cpu_m"),
        (job("j", "u1", 1, mem=-5), "tasks[0].demand.mem_mib"),
        (job("j", "u1", 1, cpu=10**6), "tasks[0]"),  # larger than every node
        (job("j", "u9", 1), "user"),  # a queue this GM does not serve
        (JobSpec("j", "u1", (TaskSpec("j/0", "j", Resources(1, 1)),) * 2, 0.0),
         "tasks[1].task_id"),
        (JobSpec("j", "u1", (), 0.0), "tasks"),
    ],
)
def test_bad_jobs_are_refused_naming_the_field_and_change_nothing(bad, field) -> None:
    fed = started(Federation.simple(constraints=NO_CONSTRAINTS))
    gm = fed.gms["gm-1"]
    with pytest.raises(InvalidInput) as error:
        fed.submit("gm-1", bad)
    assert error.value.field == field
    assert gm.jobs == {} and not fed.network and gm.waiting == 0


def test_unsatisfiable_constraints_are_refused_with_a_reason() -> None:
    fed = started(Federation.simple(constraints=frozenset({1})))
    with pytest.raises(InvalidInput, match=r"no node in the federation satisfies constraints"):
        fed.submit("gm-1", job("j", "u1", 1, constraints=frozenset({1, 2})))


def test_submission_is_idempotent_on_the_job_id() -> None:
    fed = started(Federation.simple(constraints=NO_CONSTRAINTS))
    fed.submit("gm-1", job("j", "u1", 2))
    launches = len(fed.network)
    fed.submit("gm-1", job("j", "u1", 2))
    assert len(fed.network) == launches
    assert events(fed, "job_duplicate") == [{"job": "j", "user": "u1"}]


def test_a_task_id_of_another_job_is_refused() -> None:
    fed = started(Federation.simple(constraints=NO_CONSTRAINTS))
    fed.submit("gm-1", job("j", "u1", 1))
    other = JobSpec("k", "u1", (TaskSpec("j/0", "k", Resources(1, 1)),), 0.0)
    with pytest.raises(InvalidInput, match="already belongs to job 'j'"):
        fed.submit("gm-1", other)


@pytest.mark.parametrize("clash, infeasible, field", [
    (2, 1, "tasks[1]"), (1, 2, "tasks[1].task_id"), (1, 1, "tasks[1].task_id")],
    ids=["shape-first", "id-first", "same-task-id-first"])
def test_of_several_bad_tasks_the_first_is_named_and_in_one_its_id_first(
        clash: int, infeasible: int, field: str) -> None:
    """Admission checks each shape once and known ids at once, and still names the first
    task with something wrong, its id before its shape."""
    fed = started(Federation.simple(constraints=frozenset({1})))
    fed.submit("gm-1", job("j", "u1", 3, constraints=frozenset({1})))
    tasks = tuple(TaskSpec("j/0" if i == clash else f"k/{i}", "k", Resources(1, 1),
                           frozenset({1, 2}) if i == infeasible else frozenset({1}))
                  for i in range(3))
    with pytest.raises(InvalidInput) as error:
        fed.submit("gm-1", JobSpec("k", "u1", tasks, 0.0))
    assert error.value.field == field


def test_a_task_start_is_timed_by_the_worker_clock_not_by_when_the_gm_hears_it() -> None:
    fed = started(Federation.simple(constraints=NO_CONSTRAINTS))
    fed.now = 10.0
    fed.submit("gm-1", job("j", "u1", 1))
    while not any(isinstance(m.event, TaskEventReceived) for m in fed.network):
        fed.deliver(0)  # launch, start on the worker, the worker's report: all at t = 10
    fed.now = 12.5  # the LM's task event reaches the GM late
    fed.run_until_quiet()
    task = fed.gms["gm-1"].job_status("j")["tasks"][0]
    assert task["state"] == "running" and task["started_at"] == 10.0


# -- placement -------------------------------------------------------------------------------


def test_internal_partitions_are_searched_round_robin_across_lms() -> None:
    fed = started(Federation.simple(num_lms=3, nodes_per_lm=4, constraints=NO_CONSTRAINTS))
    fed.submit("gm-1", job("j", "u1", 6))
    sent = [m.event for m in fed.network]
    assert sorted(e.gm for e in sent) == ["gm-1"] * 3
    assert sorted(len(e.placements) for e in sent) == [2, 2, 2]  # batched per LM
    assert all(e.kind is RequestKind.LAUNCH for e in sent)
    fed.drain()
    assert [(e.job_id, e.state) for e in fed.ended_jobs] == [("j", "done")]


def test_external_partitions_are_used_through_repartition_when_internal_is_full() -> None:
    # one LM, 2 nodes: n0 is gm-1's, n1 is gm-2's; each node takes one 4000m task
    fed = started(Federation.simple(num_lms=1, nodes_per_lm=2, constraints=NO_CONSTRAINTS,
                                    capacity=Resources(4000, 4096)))
    fed.submit("gm-1", job("j", "u1", 2, cpu=4000))
    # one request in flight per LM: the repartition leaves when the launch is answered
    assert [str(m.event.kind) for m in fed.network] == ["launch"]
    kinds = []
    while fed.network:
        if isinstance(fed.network[0].event, LaunchRequested):
            kinds.append(str(fed.network[0].event.kind))
        fed.deliver(0)
    assert kinds == ["launch", "repartition"]
    lm = fed.lms["lm-1"]
    assert sorted(a.logical for a in lm.running.values()) == [False, True]
    assert events(fed, "repartition")[0]["from_gm"] == "gm-2"


def test_a_stale_launch_is_refused_requeued_in_front_and_placed_from_the_fresh_view() -> None:
    fed = started(Federation.simple(num_lms=1, nodes_per_lm=2, constraints=NO_CONSTRAINTS,
                                    capacity=Resources(4000, 4096)))
    # both GMs believe n1 (gm-2's) is free: gm-1 repartitions into it, gm-2 launches there
    fed.submit("gm-2", job("b", "u2", 1, cpu=4000))
    fed.submit("gm-1", job("a", "u1", 2, cpu=4000))  # n0 internal + n1 external
    order = [m.event.gm for m in fed.network]
    fed.deliver(order.index("gm-1"))  # gm-1's requests reach the LM first
    fed.run_until_quiet()
    refused = events(fed, "launch_refused")
    assert [r["reason"] for r in refused] == ["stale_view"]
    requeued = events(fed, "task_requeued")
    assert requeued[0]["reason"] == "stale_view"
    loser = fed.gms[refused[0]["gm"]]
    task = loser._tasks[refused[0]["task"]]
    assert task.state is TaskState.PENDING and task.reason is Reason.NO_CAPACITY
    fed.drain()
    assert sorted(e.job_id for e in fed.ended_jobs) == ["a", "b"]


def test_request_failure_requeues_and_a_late_finish_of_the_old_attempt_wins() -> None:
    fed = started(Federation.simple(num_lms=2, nodes_per_lm=2, constraints=NO_CONSTRAINTS))
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("j", "u1", 1))
    [message] = fed.network
    fed.deliver(0)  # the LM launches it ...
    reply = fed.network.pop(next(i for i, m in enumerate(fed.network) if m.role == "gm"))
    del reply  # ... but its answer is lost: the driver reports the request failed
    commands = gm.handle(LMRequestFailed("lost", message.target, message.event.request_id),
                         fed.now)
    relaunch = [c for c in commands if isinstance(c, SendLaunch)]
    assert relaunch and relaunch[0].placements[0].attempt_id.endswith(".2")
    for c in commands:
        fed._route("gm", "gm-1", c)
    fed.run_until_quiet()
    first = message.event.placements[0].attempt_id
    fed.finish(first)  # the first attempt finishes first: it completes the task
    fed.run_until_quiet()
    assert [f["attempt"] for f in events(fed, "task_done")] == [first]
    assert any(log.event == "task_cancelled" for _, log in fed.logs)  # the copy was stopped
    fed.drain()
    assert [e.job_id for e in fed.ended_jobs] == ["j"]
    assert len(events(fed, "task_done")) == 1


def test_best_fit_packs_onto_the_fullest_node() -> None:
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=3, constraints=NO_CONSTRAINTS)
    gm = fed.gms["gm-1"]
    gm.placer.placement = PLACEMENT_POLICIES.make("best_fit")
    started(fed)
    fed.submit("gm-1", job("a", "u1", 1, cpu=3000))
    fed.run_until_quiet()
    fed.submit("gm-1", job("b", "u1", 1, cpu=1000))
    placed = events(fed, "task_placed")
    assert placed[0]["node"] == placed[1]["node"]


# -- why is it pending ------------------------------------------------------------------------


def test_explain_counts_what_filters_the_nodes() -> None:
    fed = started(Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=4,
                                    constraints=NO_CONSTRAINTS))
    fed.submit("gm-1", job("big", "u1", 4, cpu=4000))
    fed.run_until_quiet()
    fed.submit("gm-1", job("late", "u1", 1, cpu=1000))
    gm = fed.gms["gm-1"]
    task = gm._tasks["late/0"]
    assert task.state is TaskState.PENDING and task.reason is Reason.NO_CAPACITY
    why = gm.explain("late/0")
    assert why["nodes"] == 4 and why["nodes_satisfying_constraints"] == 4
    assert why["with_enough_cpu"] == 0
    assert gm.job_status("late")["tasks"][0]["reason"] == "no_capacity"
    story = gm.story("late/0")
    assert story[0]["entity"] == "late/0"


# -- slearn --------------------------------------------------------------------------------------


def test_slearn_runs_pilots_first_then_orders_by_estimated_remaining_work() -> None:
    fed = started(Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=2, job_policy="slearn",
                                    constraints=NO_CONSTRAINTS))
    gm = fed.gms["gm-1"]
    object.__setattr__(gm.config, "work_conserving", False)
    fed.submit("gm-1", job("wide", "u1", 40))
    progress = gm.jobs["wide"].progress
    assert len(progress.pilots) == 1  # 3% of 40, at least one
    placed = events(fed, "task_placed")
    assert len(placed) == 1 and int(placed[0]["task"].split("/")[1]) in progress.pilots
    [message] = fed.network
    assert message.event.placements[0].pilot
    fed.run_until_quiet()
    fed.finish(placed[0]["attempt"], runtime=2.5)
    fed.run_until_quiet()
    assert progress.estimated_task_duration == 2.5
    assert gm.job_status("wide")["estimated_remaining_work"] == pytest.approx(2.5 * 39)
    fed.drain()
    assert [e.job_id for e in fed.ended_jobs] == ["wide"]


def test_slearn_thin_jobs_go_first_and_work_conservation_runs_held_tasks() -> None:
    fed = started(Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=4, job_policy="slearn",
                                    constraints=NO_CONSTRAINTS))
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("wide", "u1", 10, cpu=2000))
    placed = events(fed, "task_placed")
    assert len(placed) == 8  # 1 pilot, then held tasks fill the idle nodes (2 per node)
    fed.submit("gm-1", job("thin", "u1", 2))
    assert gm.jobs["thin"].key < gm.jobs["wide"].key


# -- fairness -------------------------------------------------------------------------------------


def test_a_queue_below_its_share_preempts_the_queue_furthest_above_its_share() -> None:
    queues = [UserQueue("u1", 0.5, "gm-1"), UserQueue("u2", 0.5, "gm-2")]
    fed = started(Federation.simple(num_lms=1, nodes_per_lm=2, constraints=NO_CONSTRAINTS,
                                    queues=queues, capacity=Resources(4000, 4096)))
    fed.submit("gm-2", job("hog", "u2", 2, cpu=4000))
    fed.run_until_quiet()
    fed.tick(1.0)
    fed.run_until_quiet()  # heartbeats tell gm-1 what runs where
    assert max(fed.gms["gm-1"].placer.usage()["u2"]) == 1.0  # cpu dominates
    fed.submit("gm-1", job("fair", "u1", 1, cpu=4000))
    [request] = [m.event for m in fed.network if isinstance(m.event, PreemptRequested)]
    assert len(request.victims) == 1
    fed.run_until_quiet()
    preempted = [log.fields["attempt"] for _, log in fed.logs if log.event == "task_preempted"]
    assert preempted == list(request.victims)
    fed.drain()
    assert sorted(e.job_id for e in fed.ended_jobs) == ["fair", "hog"]


def test_a_queue_at_its_share_waits_instead_of_preempting() -> None:
    queues = [UserQueue("u1", 0.5, "gm-1"), UserQueue("u2", 0.5, "gm-2")]
    fed = started(Federation.simple(num_lms=1, nodes_per_lm=2, constraints=NO_CONSTRAINTS,
                                    queues=queues, capacity=Resources(4000, 4096)))
    fed.submit("gm-1", job("mine", "u1", 1, cpu=4000))
    fed.submit("gm-2", job("theirs", "u2", 1, cpu=4000))
    fed.run_until_quiet()
    fed.tick(1.0)
    fed.run_until_quiet()
    fed.submit("gm-1", job("more", "u1", 1, cpu=4000))
    assert not [m for m in fed.network if isinstance(m.event, PreemptRequested)]
    assert not events(fed, "preemption_requested")
    assert fed.gms["gm-1"]._tasks["more/0"].reason is Reason.NO_CAPACITY


# -- recovery --------------------------------------------------------------------------------------


def test_a_restarted_gm_rebuilds_its_view_and_adopts_running_tasks() -> None:
    fed = started(Federation.simple(num_lms=2, nodes_per_lm=2, constraints=NO_CONSTRAINTS))
    spec = job("j", "u1", 3)
    fed.submit("gm-1", spec)
    fed.run_until_quiet()
    running = set(fed.executing)
    assert len(running) == 3
    # gm-1 dies; a new incarnation starts with no state, replays the durable job ...
    config = fed.gm_configs[0]
    fresh = GlobalMaster(GMConfig(config.gm_id, config.queues, epoch=1),
                         topologies=fed.topologies)
    fed.gms["gm-1"] = fresh
    fed.tick(1.0)
    fed.run_until_quiet()  # ... its view comes from heartbeats
    assert set(fresh.view.slots) == {"lm-1", "lm-2"}
    commands = fresh.handle(JobSubmitted("replay", spec), fed.now)
    assert not [c for c in commands if isinstance(c, SendLaunch)]  # nothing launched twice
    assert all(t.state is TaskState.LAUNCHED for t in fresh.jobs["j"].tasks)
    fed.drain()
    assert [e.job_id for e in fed.ended_jobs] == ["j"]
    assert len(fed.finished_reports) == 3


def test_only_a_gm_that_may_have_an_earlier_incarnation_seeks_its_orphans() -> None:
    """The search costs a lookup per listed attempt on every heartbeat; the simulator turns it
    off (its GMs never restart). A GM told so takes a restart's running attempts for none of
    its own, and launches the replayed job again: services must keep the default."""
    assert GMConfig("gm-1", ()).earlier_incarnations
    fed = started(Federation.simple(num_lms=2, nodes_per_lm=4, constraints=NO_CONSTRAINTS))
    spec = job("j", "u1", 3)
    fed.submit("gm-1", spec)
    fed.run_until_quiet()
    config = fed.gm_configs[0]
    fresh = GlobalMaster(GMConfig(config.gm_id, config.queues, epoch=1,
                                  earlier_incarnations=False), topologies=fed.topologies)
    fed.gms["gm-1"] = fresh
    fed.tick(1.0)
    fed.run_until_quiet()
    assert set(fresh.view.slots) == {"lm-1", "lm-2"}
    commands = fresh.handle(JobSubmitted("replay", spec), fed.now)
    assert sum(len(c.placements) for c in commands if isinstance(c, SendLaunch)) == 3


def test_a_replayed_job_never_reruns_the_tasks_its_store_says_are_done() -> None:
    fed = started(Federation.simple(num_lms=1, nodes_per_lm=2, constraints=NO_CONSTRAINTS))
    gm = fed.gms["gm-1"]
    commands = gm.handle(JobSubmitted("replay", job("j", "u1", 3), (("j/0", 2.0), ("j/2", 1.0))),
                         0.0)
    launched = [p.task.task_id for c in commands if isinstance(c, SendLaunch)
                for p in c.placements]
    assert launched == ["j/1"]
    assert gm.job_status("j")["tasks_done"] == 2
    everything_done = gm.handle(
        JobSubmitted("replay", job("k", "u1", 1), (("k/0", 1.0),)), 0.0)
    assert [c.job_id for c in everything_done if type(c).__name__ == "JobEnded"] == ["k"]


# -- reprioritization -----------------------------------------------------------------------------

ONLY_ON_TWO = frozenset({1})  # lm-1 and lm-2 carry it, lm-3 does not


def two_of_three_lms(reprioritize: bool = True) -> Federation:
    """gm-1 (slearn) and three LMs of one 4000-cpu node each, local queues two deep; only
    the nodes of lm-1 and lm-2 satisfy `ONLY_ON_TWO`."""
    topologies = make_topologies(2, 1, ["gm-1"], constraints=ONLY_ON_TWO)
    topologies.append(ClusterTopology("lm-3", [NodeSpec("lm-3/n0", "lm-3", "lm-3/w0",
                                                        DEFAULT_CAPACITY, frozenset())],
                                      ["gm-1"]))
    config = GMConfig("gm-1", (UserQueue("u1", 1.0, "gm-1"),), job_policy="slearn",
                      reprioritize=reprioritize)
    return started(Federation(topologies, [config], queue_depth=2))


def deliver_all(fed: Federation) -> list[Message]:
    """`run_until_quiet`, returning every message it delivered."""
    delivered = []
    while fed.network:
        delivered.append(fed.network[0])
        fed.deliver(0)
    return delivered


def reprioritizations(delivered: list[Message]) -> list[tuple[str, str, float]]:
    return [(m.target, m.event.job_id, m.event.priority) for m in delivered
            if isinstance(m.event, ReprioritizeRequested)]


def finish_one(fed: Federation) -> list[Message]:
    """A running task finishes after 2 s; what that delivered."""
    fed.finish(min(fed.executing), runtime=2.0)
    return deliver_all(fed)


def drain_all(fed: Federation) -> list[Message]:
    """`drain`, returning every message it delivered."""
    delivered = deliver_all(fed)
    for _ in range(100):
        if not fed.executing:
            fed.tick(fed.heartbeat_interval)  # the GM learns of the room its tasks left
            delivered += deliver_all(fed)
            if not fed.executing:
                break
        delivered += finish_one(fed)
    return delivered


def test_an_estimate_is_sent_to_every_lm_holding_the_jobs_tasks_and_only_there() -> None:
    fed = two_of_three_lms()
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("w", "u1", 10, cpu=2000, constraints=ONLY_ON_TWO))
    deliver_all(fed)
    record = gm.jobs["w"]
    [pilot] = record.progress.pilots
    # while the pilot runs, work conservation launches held tasks on lm-1 and lm-2 (running,
    # or queued at their workers), all carrying the sampling priority 0
    launched = {t.lm for t in record.tasks if t.state in (TaskState.LAUNCHED, TaskState.RUNNING)}
    assert launched == {"lm-1", "lm-2"}
    pilot_attempt = record.tasks[pilot].live
    fed.finish(pilot_attempt, runtime=2.0)
    delivered = deliver_all(fed)
    assert record.progress.estimated_task_duration == 2.0
    assert sorted(reprioritizations(delivered)) == [("lm-1", "w", 18.0), ("lm-2", "w", 18.0)]
    assert events(fed, "job_reprioritized") == [
        {"job": "w", "gm": "gm-1", "priority": 18.0, "previous": 0.0, "lms": ["lm-1", "lm-2"]}]
    # the workers re-keyed what waits in their queues
    for worker in ("lm-1/w0", "lm-2/w0"):
        agent = fed.workers[worker]
        queued = [p for p in agent.running_placements() if p.attempt_id in agent.queued_ids()]
        assert queued and {p.priority for p in queued} == {18.0}


def test_a_finish_sends_the_priority_again_only_once_it_halved() -> None:
    fed = two_of_three_lms()
    fed.submit("gm-1", job("w", "u1", 10, cpu=2000, constraints=ONLY_ON_TWO))
    deliver_all(fed)
    record = fed.gms["gm-1"].jobs["w"]
    [pilot] = record.progress.pilots
    fed.finish(record.tasks[pilot].live, runtime=2.0)
    assert reprioritizations(deliver_all(fed))  # 18: 9 tasks of 2 s left
    for left in (8, 7, 6, 5):  # 16 .. 10: within a factor of 2 of 18
        assert not reprioritizations(finish_one(fed)), left
    delivered = finish_one(fed)  # 4 left, 8: below half of 18
    sent = reprioritizations(delivered)
    assert {priority for _, _, priority in sent} == {8.0}
    holding = {t.lm for t in record.tasks if t.state in (TaskState.LAUNCHED, TaskState.RUNNING)}
    assert {lm for lm, _, _ in sent} == holding
    assert events(fed, "job_reprioritized")[-1]["previous"] == 18.0


def test_without_reprioritize_a_gm_never_sends_one() -> None:
    fed = two_of_three_lms(reprioritize=False)
    fed.submit("gm-1", job("w", "u1", 10, cpu=2000, constraints=ONLY_ON_TWO))
    delivered = drain_all(fed)
    assert [e.job_id for e in fed.ended_jobs] == ["w"]
    assert not reprioritizations(delivered) and not events(fed, "job_reprioritized")
