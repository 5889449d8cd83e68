"""Placement sets (`TaskSpec.nodes`): a task may run only on the nodes its set names.

The GM narrows its candidates with one more static bit-vector, the set's nodes (cached per set,
`ClusterTopology.placement_mask`), so no search ever returns a node outside the set; a set
whose nodes are busy waits (blocked, woken only when one of its nodes gains room) and its
explanation says so; a set of unknown nodes, or an empty one, is refused at submission with the
field named; the job file, the HTTP submission and the simulator carry it.
"""

from __future__ import annotations

import random

import pytest
from bitarray import bitarray
from harness import Federation
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from common.blocked import BlockedDemands
from common.cluster import ClusterState, ClusterTopology
from common.commands import SendLaunch, SendPreempt
from common.errors import InvalidInput
from common.lm import LocalMaster
from common.messages import Placement, RequestKind
from common.models import JobSpec, NodeSpec, TaskSpec, validate_job
from common.placer import placement_set_summary
from common.policies.fairness import UserQueue
from common.policies.placement import PLACEMENT_POLICIES
from common.reasons import Reason
from common.resources import Resources
from common.view import FederationView
from common.wire import (
    JobSubmission,
    TaskWire,
    job_from_wire,
    job_to_wire,
    placement_from_wire,
    placement_to_wire,
)
from loadgen.jobfile import job_from_line, job_to_line, read_jobs, write_jobs
from loadgen.workload import ReplayJob, ReplayTask
from simulator.cluster import shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation, job_specs

NODE = Resources(1000, 1024)  # one task of this size fills a node
GMS = ["gm-1", "gm-2"]


def topologies(num_lms: int = 2, per_lm: int = 4, capacity: Resources = NODE,
               constraints: list[frozenset[int]] | None = None) -> list[ClusterTopology]:
    """LMs `lm-1..`, nodes `lm-k/n0..`, one worker per node; with 2 GMs each LM's first half
    is gm-1's partition, its second half gm-2's."""
    result = []
    for k in range(1, num_lms + 1):
        lm = f"lm-{k}"
        nodes = [NodeSpec(f"{lm}/n{i}", lm, f"{lm}/w{i}", capacity,
                          constraints[i] if constraints else frozenset())
                 for i in range(per_lm)]
        result.append(ClusterTopology(lm, nodes, GMS))
    return result


def task(job_id: str, i: int, nodes=None, constraints: frozenset[int] = frozenset(),
         demand: Resources = NODE) -> TaskSpec:
    return TaskSpec(f"{job_id}/{i}", job_id, demand, constraints, 1.0,
                    None if nodes is None else frozenset(nodes))


def job(job_id: str, width: int, nodes=None, user: str = "u1", **kwargs) -> JobSpec:
    return JobSpec(job_id, user, tuple(task(job_id, i, nodes, **kwargs) for i in range(width)),
                   0.0)


# -- the bit-vectors ------------------------------------------------------------------------------


def test_the_placement_mask_is_the_sets_nodes_cached_per_set() -> None:
    t = topologies(num_lms=1)[0]
    allowed = frozenset({"lm-1/n1", "lm-1/n3", "lm-9/n0"})  # a node of another LM is left out
    mask = t.placement_mask(allowed)
    assert list(mask.search(1)) == [1, 3]
    assert t.placement_mask(frozenset(allowed)) is mask  # built once per distinct set
    assert t.unknown_nodes(allowed) == ["lm-9/n0"]
    assert list(t.partition_mask(frozenset(), 0, True, allowed).search(1)) == [1]  # gm-1: n0, n1
    assert list(t.partition_mask(frozenset(), 0, False, allowed).search(1)) == [3]
    assert t.can_ever_run(frozenset(), 1000, 1024, allowed)
    assert not t.can_ever_run(frozenset(), 2000, 1024, allowed)
    assert not t.can_ever_run(frozenset(), 1, 1, frozenset({"lm-9/n0"}))


def view_of(tops: list[ClusterTopology], gm: str = "gm-1") -> FederationView:
    view = FederationView(gm)
    for topology in tops:
        view.apply(LocalMaster(topology, heartbeat_interval=1.0,
                               worker_timeout=3.0).snapshot(), 0.0)
    view.expect_demand(1, 1)
    return view


NODE_IDS = [f"lm-{k}/n{i}" for k in (1, 2) for i in range(4)]


@settings(max_examples=150, deadline=None)
@given(st.sets(st.sampled_from(NODE_IDS), min_size=1),
       st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1024)), min_size=8, max_size=8),
       st.integers(1, 1000), st.integers(1, 1024), st.booleans(), st.integers(0, 3),
       st.sampled_from(["first_fit", "best_fit"]))
def test_find_never_returns_a_node_outside_the_set(allowed, used, cpu, mem, internal, start,
                                                   policy) -> None:
    tops = topologies()
    view = view_of(tops)
    for gi, (used_cpu, used_mem) in enumerate(used):  # random free capacities
        view.state.take(gi, used_cpu, used_mem)
    allowed = frozenset(allowed)
    k, i = view.find(frozenset(), cpu, mem, internal, start, PLACEMENT_POLICIES.make(policy),
                     allowed)
    owner = 0 if internal else 1  # gm-1's nodes, or the others'
    fitting = {NODE_IDS[gi] for gi in range(8)
               if NODE_IDS[gi] in allowed and tops[gi // 4].owner[gi % 4] == owner
               and view.state.fits(gi, cpu, mem)}
    if k < 0:
        assert not fitting  # nothing of the set in these partitions has room
    else:
        node = view.order[k].topology.node_ids[i]
        assert node in allowed and node in fitting
    # the same search without a set may go anywhere; with a set it is cached per set
    assert view.eligible(frozenset(), internal, allowed) is view.eligible(frozenset(), internal,
                                                                          frozenset(allowed))


def test_a_new_layout_drops_the_cached_masks() -> None:
    tops = topologies()
    view = view_of(tops[:1])
    allowed = frozenset({"lm-2/n0"})
    assert not view.eligible(frozenset(), True, allowed).any()  # lm-2 not heard of yet
    view.apply(LocalMaster(tops[1], heartbeat_interval=1.0, worker_timeout=3.0).snapshot(), 0.0)
    k, i = view.find(frozenset(), 1000, 1024, True, 0, nodes=allowed)
    assert view.order[k].topology.node_ids[i] == "lm-2/n0"


@pytest.mark.parametrize("size", [4, 12])  # a few nodes checked one by one; many by vector
def test_blocked_demands_with_a_set_wake_only_for_their_nodes(size) -> None:
    topology = topologies(num_lms=1, per_lm=size)[0]
    state = ClusterState(topology)
    for i in range(size):
        state.take(i, NODE.cpu_m, NODE.mem_mib)
    on_n1 = ("u1", (frozenset(), 1000, 1024, frozenset({"lm-1/n1"})))
    anywhere = ("u1", (frozenset(), 1000, 1024, None))
    memo = BlockedDemands()
    for demand in (on_n1, anywhere):
        memo.block(demand, Reason.NO_CAPACITY)
    outside = [i for i in range(size) if i != 1]
    for i in outside:  # every node but n1 frees
        state.give(i, NODE.cpu_m, NODE.mem_mib)
    gained = bitarray(size)
    gained.setall(1)
    assert memo.wake_by_capacity(gained, topology, state, None) == [anywhere]
    assert on_n1 in memo
    state.give(1, NODE.cpu_m, NODE.mem_mib)
    gained = bitarray(size)
    gained.setall(0)
    gained[1] = 1
    assert memo.wake_by_capacity(gained, topology, state, None) == [on_n1]


def test_the_per_node_index_follows_blocks_and_wakes() -> None:
    topology = topologies(num_lms=1)[0]
    state = ClusterState(topology)  # every node free
    a = ("u1", (frozenset(), 1000, 1024, frozenset({"lm-1/n0", "lm-1/n1"})))
    b = ("u2", (frozenset(), 1000, 1024, frozenset({"lm-1/n1"})))
    c = ("u2", (frozenset(), 1000, 1024, None))
    memo = BlockedDemands()
    for demand in (a, b, c):
        memo.block(demand, Reason.NO_CAPACITY)
    memo.block(a, Reason.PLACEMENT_SET_BUSY)  # blocked again: filed once, the reason updated
    assert memo.reason(a) is Reason.PLACEMENT_SET_BUSY
    assert memo.wake_users(["u2"]) == [b, c]
    n3 = bitarray("0001")
    assert memo.wake_by_capacity(n3, topology, state, None) == []  # not a node of a's set
    assert memo.wake_by_capacity(bitarray("0100"), topology, state, None) == [a]
    assert len(memo) == 0 and not memo._by_node and not memo._anywhere
    for demand in (a, b, c):
        memo.block(demand, Reason.NO_CAPACITY)
    assert memo.wake_all() == [a, b, c] and not memo._by_node and not memo._anywhere


# -- the GM --------------------------------------------------------------------------------------


class Recording(Federation):
    """The harness, noting every launch and preemption a GM sends."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sent: list[tuple[str, Placement]] = []  # (request kind, placement)

    def _route(self, role, source, command, cause=None) -> None:
        if isinstance(command, SendLaunch):
            self.sent.extend((str(command.kind), p) for p in command.placements)
        elif isinstance(command, SendPreempt):
            self.sent.append(("preempt", command.placement))
        super()._route(role, source, command, cause)


def federation(tops: list[ClusterTopology] | None = None, fairness: str = "none",
               **kwargs) -> Recording:
    from common.gm import GMConfig

    queues = (UserQueue("u1", 0.5, "gm-1"), UserQueue("u2", 0.5, "gm-2"))
    fed = Recording(tops or topologies(),
                    [GMConfig(gm, queues, fairness=fairness) for gm in GMS], **kwargs)
    fed.tick()
    fed.run_until_quiet()
    return fed


def assert_inside_sets(fed: Recording) -> None:
    assert fed.sent
    for kind, placement in fed.sent:
        allowed = placement.task.nodes
        assert allowed is None or placement.node_id in allowed, (kind, placement)


def running_nodes(fed: Recording) -> dict[str, str]:
    """task id -> node of what runs now, from the LMs' truth."""
    return {a.placement.task.task_id: a.placement.node_id
            for lm in fed.lms.values() for a in lm.running.values()}


def finish_and_heartbeat(fed: Recording, prefix: str) -> None:
    """The attempt of a task whose id starts with `prefix` ends; the LMs' next heartbeats."""
    fed.finish(next(a for a in fed.executing if a.startswith(prefix)))
    fed.run_until_quiet()
    fed.heartbeat_workers()
    fed.tick(1.0)
    fed.run_until_quiet()


def test_every_launch_targets_a_node_of_its_tasks_set() -> None:
    fed = federation()
    rng = random.Random(7)
    for k in range(8):
        allowed = rng.sample(NODE_IDS, rng.randint(1, 3))
        fed.submit("gm-1", job(f"j{k}", rng.randint(1, 3), allowed))
        fed.submit("gm-2", job(f"k{k}", 1, None, user="u2"))
    fed.drain()
    assert_inside_sets(fed)
    gm1, gm2 = fed.gms["gm-1"], fed.gms["gm-2"]
    assert all(gm1.job_status(f"j{k}")["state"] == "done" for k in range(8))
    assert all(gm2.job_status(f"k{k}")["state"] == "done" for k in range(8))
    # gm-1's tasks whose sets lie in gm-2's partitions were launched by repartition
    assert any(kind == str(RequestKind.REPARTITION) for kind, p in fed.sent
               if p.task.nodes is not None)


def test_a_task_whose_set_is_busy_waits_says_so_and_runs_when_a_node_of_its_set_frees() -> None:
    fed = federation()
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("fill", 2, ["lm-1/n0", "lm-1/n1"]))  # gm-1's two nodes of lm-1
    fed.run_until_quiet()
    fed.submit("gm-1", job("late", 1, ["lm-1/n0", "lm-1/n1"]))
    fed.run_until_quiet()
    status = gm.job_status("late")["tasks"][0]
    assert status["state"] == "pending" and status["reason"] == "placement_set_busy"
    why = gm.explain("late/0")
    assert why["placement_set"]["summary"] == "placement set: 2 nodes, all busy"
    assert why["in_placement_set"] == 2 and why["with_enough_cpu_and_memory"] == 0
    assert why["steps"] == {"internal": None, "external": None, "queue": None, "preempt": None}

    # six other nodes are idle, heartbeats repeat: the task is not searched for again
    decisions = gm.counters["decisions_total"]
    for _ in range(5):
        fed.heartbeat_workers()
        fed.tick(1.0)
        fed.run_until_quiet()
    assert gm.counters["decisions_total"] == decisions
    assert "late/0" not in running_nodes(fed)

    # a node of another job frees outside the set: still waiting, still not searched
    fed.submit("gm-1", job("other", 1, ["lm-2/n0"]))
    fed.run_until_quiet()
    finish_and_heartbeat(fed, "other/")
    assert "late/0" not in running_nodes(fed)
    assert gm.counters["decisions_total"] == decisions + 1  # the other job's one

    # a node of its set frees: it runs there
    node = running_nodes(fed)["fill/0"]
    finish_and_heartbeat(fed, "fill/0")
    assert running_nodes(fed)["late/0"] == node
    assert_inside_sets(fed)
    fed.drain()
    assert gm.job_status("late")["state"] == "done"


def test_a_set_in_another_gms_partition_borrows_or_waits_without_spinning() -> None:
    fed = federation()
    gm1, gm2 = fed.gms["gm-1"], fed.gms["gm-2"]
    theirs = ["lm-2/n2", "lm-2/n3"]  # gm-2's partition of lm-2
    fed.submit("gm-2", job("own", 2, theirs, user="u2"))
    fed.run_until_quiet()
    fed.submit("gm-1", job("borrow", 1, theirs))
    fed.run_until_quiet()
    assert gm1.job_status("borrow")["tasks"][0]["reason"] == "placement_set_busy"
    assert gm1.explain("borrow/0")["placement_set"]["summary"] == (
        "placement set: 2 nodes, all busy")
    decisions = gm1.counters["decisions_total"]
    for _ in range(5):
        fed.heartbeat_workers()
        fed.tick(1.0)
        fed.run_until_quiet()
    assert gm1.counters["decisions_total"] == decisions
    finish_and_heartbeat(fed, "own/1")
    assert running_nodes(fed)["borrow/0"] in theirs
    kinds = {kind for kind, p in fed.sent if p.task.task_id == "borrow/0"}
    assert kinds == {str(RequestKind.REPARTITION)}
    fed.drain()
    assert gm1.job_status("borrow")["state"] == "done"
    assert gm2.job_status("own")["state"] == "done"


def test_preemption_for_a_task_with_a_set_looks_only_inside_it() -> None:
    fed = federation(fairness="fair_share")
    gm1 = fed.gms["gm-1"]
    # u2 (gm-2) fills every node; gm-1's queue is under its share and may take from u2
    fed.submit("gm-2", job("hog", 8, None, user="u2"))
    fed.run_until_quiet()
    fed.heartbeat_workers()
    fed.tick(1.0)  # heartbeats: gm-1 sees what u2 runs where
    fed.run_until_quiet()
    assert len(running_nodes(fed)) == 8
    fed.submit("gm-1", job("mine", 1, ["lm-2/n3"]))
    fed.run_until_quiet()
    preempts = [p for kind, p in fed.sent if kind == "preempt"]
    assert preempts and all(p.node_id == "lm-2/n3" for p in preempts)
    fed.drain()
    assert gm1.job_status("mine")["state"] == "done"
    assert_inside_sets(fed)


# -- submission -----------------------------------------------------------------------------------


def test_an_empty_or_malformed_set_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as error:
        validate_job(JobSpec("a", "u1", (task("a", 0), task("a", 1, [])), 0.0))
    assert error.value.field == "tasks[1].nodes" and "at least one node" in error.value.message
    with pytest.raises(InvalidInput) as error:
        validate_job(JobSpec("a", "u1", (task("a", 0, ["lm-1/n0", ""]),), 0.0))
    assert error.value.field == "tasks[0].nodes" and "non-empty strings" in error.value.message
    validate_job(job("a", 2, ["lm-1/n0"]))  # a set of ids is fine here: nodes are the GM's


def test_a_job_naming_an_unknown_node_is_refused_and_nothing_of_it_is_kept() -> None:
    fed = federation()
    gm = fed.gms["gm-1"]
    bad = JobSpec("bad", "u1", (task("bad", 0, ["lm-1/n0"]),
                                task("bad", 1, ["lm-1/n1", "lm-7/n0", "nowhere"])), 0.0)
    with pytest.raises(InvalidInput) as error:
        fed.submit("gm-1", bad)
    assert error.value.field == "tasks[1].nodes"
    assert "'lm-7/n0'" in error.value.message and "'nowhere'" in error.value.message
    assert "bad" not in gm.jobs and gm.waiting == 0 and not fed.network
    # a set no node of which is ever big enough is refused as an infeasible task is
    with pytest.raises(InvalidInput) as error:
        fed.submit("gm-1", job("big", 1, ["lm-1/n0"], demand=Resources(2000, 1024)))
    assert error.value.field == "tasks[0]" and "placement set" in error.value.message
    assert "big" not in gm.jobs
    # and one whose nodes lack its constraints
    tops = topologies(constraints=[frozenset({3}), frozenset(), frozenset(), frozenset()])
    fed = federation(tops)
    with pytest.raises(InvalidInput) as error:
        fed.submit("gm-1", job("red", 1, ["lm-1/n1"], constraints=frozenset({3})))
    assert error.value.field == "tasks[0]" and "constraints [3]" in error.value.message


def test_the_wire_carries_the_set_and_refuses_an_empty_one() -> None:
    sub = JobSubmission.model_validate({"job_id": "w", "user": "u1", "tasks": [
        {"cpu_m": 10, "mem_mib": 10, "nodes": ["lm-1/n2", "lm-1/n0", "lm-1/n2"]},
        {"cpu_m": 10, "mem_mib": 10}]})
    spec = job_from_wire(sub, "ignored", 0.0)
    assert spec.tasks[0].nodes == frozenset({"lm-1/n0", "lm-1/n2"})
    assert spec.tasks[1].nodes is None
    again = job_from_wire(JobSubmission.model_validate_json(job_to_wire(spec).model_dump_json()),
                          "ignored", 0.0)
    assert again.tasks == spec.tasks
    for nodes in ([], [""], "lm-1/n0", [3]):
        with pytest.raises(ValidationError) as error:
            JobSubmission.model_validate({"user": "u1", "tasks": [
                {"cpu_m": 10, "mem_mib": 10, "nodes": nodes}]})
        assert error.value.errors()[0]["loc"][:3] == ("tasks", 0, "nodes")
    # a placement carries it to the LM (whose redundant copies must stay inside it)
    placement = Placement("w/0#1.1", spec.tasks[0], "lm-1/n0", "gm-1", "u1")
    assert placement_from_wire(placement_to_wire(placement)) == placement
    assert TaskWire.model_validate({"task_id": "t", "job_id": "j", "cpu_m": 1,
                                    "mem_mib": 1}).nodes is None


# -- workloads -------------------------------------------------------------------------------------


def test_a_job_file_round_trips_placement_sets(tmp_path) -> None:
    jobs = [ReplayJob("a", "u1", 0.0, (ReplayTask(500, 512, 2.0, (4,), nodes=("lm-1/n0",
                                                                               "lm-2/n1")),
                                       ReplayTask(500, 512, 1.0))),
            ReplayJob("b", "u2", 1.0, (ReplayTask(100, 128, 3.0, nodes=("lm-1/n3",)),))]
    path = tmp_path / "jobs.jsonl"
    write_jobs(path, jobs)
    read, skipped, _ = read_jobs(path)
    assert read == jobs and skipped == 0
    assert '"nodes"' not in job_to_line(ReplayJob("c", "u1", 0.0, (ReplayTask(1, 1, 1.0),)))
    # the replay's HTTP body carries the set, and the GM's wire model takes it
    body = jobs[0].submission()
    assert body["tasks"][0]["nodes"] == ["lm-1/n0", "lm-2/n1"] and "nodes" not in body["tasks"][1]
    spec = job_from_wire(JobSubmission.model_validate(body), "a", 0.0)
    assert spec.tasks[0].nodes == frozenset({"lm-1/n0", "lm-2/n1"})
    with pytest.raises(InvalidInput) as error:
        job_from_line('{"job_id": "x", "user": "u", "arrival": 0, "tasks": [{"cpu_m": 1, '
                      '"mem_mib": 1, "duration": 1, "nodes": []}]}', "jobs.jsonl:3")
    assert "jobs.jsonl:3" in str(error.value) and "tasks.0.nodes" in str(error.value)


class PlacedLog(SimLog):
    """A simulation's log that keeps where each task was placed."""

    def __init__(self) -> None:
        super().__init__("megha")
        self.placed: list[tuple[str, str]] = []

    def emit(self, ts, svc, event, fields=None, handle_s=None) -> None:
        if event in ("task_placed", "preemption_requested"):
            self.placed.append((fields["task"], fields["node"]))
        super().emit(ts, svc, event, fields, handle_s)


def test_the_simulator_replays_a_job_file_placing_only_inside_the_sets(tmp_path) -> None:
    federation = shaped_federation(16, 2, 2, slots=True, heartbeat_interval=1.0)
    node_ids = [n for t in federation.topologies() for n in t.node_ids]
    rng = random.Random(3)
    slot = federation.topologies()[0].nodes[0].capacity
    replay, allowed = [], {}
    for k in range(30):
        tasks = []
        for i in range(rng.randint(1, 4)):
            nodes = tuple(sorted(rng.sample(node_ids, rng.randint(1, 3))))
            allowed[f"j{k}/{i}"] = frozenset(nodes)
            tasks.append(ReplayTask(slot.cpu_m, slot.mem_mib, rng.uniform(0.5, 3.0), (),
                                    nodes=nodes))
        replay.append(ReplayJob(f"j{k}", f"q{1 + k % 2}", k * 0.3, tuple(tasks)))
    write_jobs(tmp_path / "jobs.jsonl", replay)
    jobs = job_specs(read_jobs(tmp_path / "jobs.jsonl")[0])
    assert {t.task_id: t.nodes for job in jobs for t in job.tasks} == allowed
    log = PlacedLog()
    sim = FederatedSimulation(federation, jobs, log)
    outcome = sim.run()
    sim.check_invariants()
    assert outcome.ended == {job.job_id: "done" for job in jobs}
    assert {task for task, _ in log.placed} == set(allowed)
    assert all(node in allowed[task] for task, node in log.placed), log.placed[:5]


def test_the_summary_line() -> None:
    assert placement_set_summary(3, 3, 3, 0, 0) == "placement set: 3 nodes, all busy"
    assert placement_set_summary(3, 2, 2, 0, 0) == "placement set: 3 nodes, 1 down, the others busy"
    assert placement_set_summary(1, 0, 0, 0, 0) == "placement set: 1 node, none up"
    assert placement_set_summary(2, 0, 0, 0, 0, known=0) == (
        "placement set: 2 nodes, none reported by its LM yet")
    assert placement_set_summary(2, 2, 2, 1, 0).endswith("all in other GMs' partitions "
                                                         "(a repartition is asked)")
    assert placement_set_summary(2, 2, 2, 2, 1) == (
        "placement set: 2 nodes, 2 with room (1 in this GM's partitions)")
