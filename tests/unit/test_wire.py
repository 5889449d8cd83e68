"""Wire schemas: every converter round-trips through JSON, and bad input names its field."""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

import pytest
from bitarray import frozenbitarray
from pydantic import BaseModel, ValidationError

from common.cluster import ClusterTopology, LMSnapshot, RunningInfo
from common.commands import (
    CheckpointOnWorker,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
    StartOnWorker,
    StopOnWorker,
)
from common.errors import InvalidInput
from common.events import (
    LaunchRequested,
    PreemptRequested,
    ReprioritizeRequested,
    WorkerHeartbeat,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.models import JobSpec, NodeSpec, TaskSpec, validate_job
from common.reasons import Reason
from common.resources import Resources
from common.wire import (
    JOB_NAME_MAX,
    JobSubmission,
    LaunchRequest,
    LMReply,
    LMSnapshotWire,
    LMStateWire,
    PlacementWire,
    PreemptRequest,
    ReprioritizeRequest,
    StopWire,
    TaskEventBatchWire,
    TaskEventWire,
    TopologyCache,
    WorkerBatchWire,
    WorkerHeartbeatWire,
    WorkerReport,
    WorkerReportBatch,
    heartbeat_from_wire,
    job_from_wire,
    job_to_wire,
    launch_request_to_wire,
    launch_requested_from_wire,
    lm_replied_from_wire,
    placement_from_wire,
    placement_to_wire,
    preempt_request_to_wire,
    preempt_requested_from_wire,
    reply_to_wire,
    report_to_wire,
    reprioritize_request_to_wire,
    reprioritize_requested_from_wire,
    snapshot_from_wire,
    snapshot_to_wire,
    task_event_from_wire,
    task_event_to_wire,
    worker_batch_to_wire,
    worker_heartbeat_from_wire,
    worker_heartbeat_to_wire,
    worker_report_to_event,
)
from services.store import GMStore

M = TypeVar("M", bound=BaseModel)



WIRE_MODELS = {  # every wire model, by the sample that round-trips through it
    "job": JobSubmission,
    "launch_request": LaunchRequest,
    "preempt_request": PreemptRequest,
    "lm_reply": LMReply,
    "snapshot": LMSnapshotWire,
    "lm_state": LMStateWire,
    "task_event": TaskEventWire,
    "task_events": TaskEventBatchWire,
    "worker_report": WorkerReport,
    "worker_reports": WorkerReportBatch,
    "worker_batch": WorkerBatchWire,
    "worker_heartbeat": WorkerHeartbeatWire,
}

def through_json(model: M) -> M:
    """What the receiving side parses: the model serialised to JSON text and validated back."""
    return type(model).model_validate_json(model.model_dump_json())


def loc_of(error: ValidationError) -> list[tuple]:
    return [tuple(e["loc"]) for e in error.errors()]


# --- fixtures ------------------------------------------------------------------------------------


def make_job() -> JobSpec:
    return JobSpec(
        job_id="j1",
        user="alice",
        tasks=(
            TaskSpec("j1/0", "j1", Resources(500, 256), frozenset({1, 4}), 2.5),
            TaskSpec("j1/map-1", "j1", Resources(1000, 1024), frozenset(), None),
        ),
        arrival=12.0,
        weight=2.0,
        estimated_task_duration=3.0,
    )


def make_placement(attempt: int = 1, priority: float = 7.5) -> Placement:
    task = TaskSpec("j1/0", "j1", Resources(500, 256), frozenset({1, 4}), 2.5)
    return Placement(
        attempt_id=f"j1/0#{attempt}",
        task=task,
        node_id="lm-1/n2",
        gm="gm-1",
        user="alice",
        priority=priority,
        pilot=True,
    )


def make_topology(lm: str = "lm-1", size: int = 6) -> ClusterTopology:
    nodes = [
        NodeSpec(
            node_id=f"{lm}/n{i}",
            lm=lm,
            worker=f"w{i // 3}",
            capacity=Resources(4000 + 1000 * i, 8192),
            constraints=frozenset({i % 3, 20}) if i % 2 else frozenset(),
        )
        for i in range(size)
    ]
    return ClusterTopology(lm, nodes, ["gm-1", "gm-2"])


def make_snapshot(topology: ClusterTopology | None = None, seq: int = 9) -> LMSnapshot:
    topology = topology or make_topology()
    size = len(topology)
    up = frozenbitarray([i != 2 and i % 5 != 4 for i in range(size)])
    return LMSnapshot(
        lm=topology.lm,
        epoch=3,
        seq=seq,
        topology=topology,
        free_cpu=tuple(topology.cap_cpu[i] - 100 * i for i in range(size)),
        free_mem=tuple(topology.cap_mem),
        up=up,
        running=tuple(
            r
            for r in (
                RunningInfo("j1/0#1", 1, "gm-1", "alice", 100, 64, False),
                RunningInfo("j2/3#2", 4, "gm-2", "bob", 400, 128, True),
            )
            if r.node_index < size  # small clusters lack the nodes these run on
        ),
    )


def snapshot_wire_dict(**changes: object) -> dict:
    data = snapshot_to_wire(make_snapshot()).model_dump(mode="json")
    data.update(changes)
    return data


def assert_same_topology(a: ClusterTopology, b: ClusterTopology) -> None:
    assert a.lm == b.lm
    assert a.gms == b.gms
    assert a.num_constraints == b.num_constraints
    assert a.node_ids == b.node_ids
    assert a.workers == b.workers
    assert a.cap_cpu == b.cap_cpu
    assert a.cap_mem == b.cap_mem
    assert a.constraint_vectors == b.constraint_vectors
    assert a.owned == b.owned
    assert a.nodes == b.nodes


def assert_same_snapshot(a: LMSnapshot, b: LMSnapshot) -> None:
    assert (a.lm, a.epoch, a.seq) == (b.lm, b.epoch, b.seq)
    assert a.free_cpu == b.free_cpu
    assert a.free_mem == b.free_mem
    assert a.up == b.up
    assert isinstance(b.up, frozenbitarray)
    assert a.running == b.running
    assert_same_topology(a.topology, b.topology)


# --- job submission ------------------------------------------------------------------------------


def test_job_round_trip() -> None:
    job = make_job()
    wire = through_json(job_to_wire(job))
    assert [t.task_id for t in wire.tasks] == ["0", "map-1"]
    assert job_from_wire(wire, job_id="unused", arrival=job.arrival) == job


def test_job_defaults_ids_and_fields() -> None:
    sub = JobSubmission.model_validate_json(
        '{"user": "bob", "tasks": [{"cpu_m": 100, "mem_mib": 64}, '
        '{"cpu_m": 200, "mem_mib": 64, "constraints": [3]}]}'
    )
    job = job_from_wire(sub, job_id="gm-1-17", arrival=5.0)
    assert job.job_id == "gm-1-17"
    assert job.weight == 1.0
    assert job.estimated_task_duration is None
    assert [t.task_id for t in job.tasks] == ["gm-1-17/0", "gm-1-17/1"]
    assert job.tasks[0].constraints == frozenset()
    assert job.tasks[1].constraints == frozenset({3})
    assert all(t.job_id == "gm-1-17" for t in job.tasks)


def test_client_chosen_job_id_wins() -> None:
    sub = JobSubmission(job_id="mine", user="bob", tasks=[{"cpu_m": 1, "mem_mib": 1}])
    assert job_from_wire(sub, job_id="fallback", arrival=0.0).job_id == "mine"


def test_a_job_name_survives_the_wire_and_a_gm_restart(tmp_path) -> None:
    job = dataclasses.replace(make_job(), name="nightly-etl")
    wire = through_json(job_to_wire(job))
    assert wire.name == "nightly-etl"
    assert job_from_wire(wire, job_id="unused", arrival=job.arrival) == job
    # the GM stores the submission as accepted and rebuilds the job from it after a restart
    store = GMStore(tmp_path / "gm.sqlite")
    store.add_job(job.job_id, job.user, wire.model_dump_json(), job.arrival)
    store.close()
    (stored,) = GMStore(tmp_path / "gm.sqlite").unfinished()
    again = job_from_wire(JobSubmission.model_validate_json(stored.body), stored.job_id,
                          stored.arrival)
    assert again.name == "nightly-etl" and again == job
    # a submission without a name (and one stored before names existed) has none
    unnamed = JobSubmission.model_validate({"user": "a", "tasks": [{"cpu_m": 1, "mem_mib": 1}]})
    assert job_from_wire(unnamed, job_id="j", arrival=0.0).name is None


@pytest.mark.parametrize("name", ["", "x" * (JOB_NAME_MAX + 1), 7, ["a"]])
def test_a_bad_job_name_is_refused_by_field(name: object) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSubmission.model_validate({"user": "a", "name": name,
                                      "tasks": [{"cpu_m": 1, "mem_mib": 1}]})
    assert loc_of(caught.value) == [("name",)]
    JobSubmission.model_validate({"user": "a", "name": "x" * JOB_NAME_MAX,
                                  "tasks": [{"cpu_m": 1, "mem_mib": 1}]})


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"tasks": [{"cpu_m": 1, "mem_mib": 1}]}, ("user",)),
        ({"user": "", "tasks": [{"cpu_m": 1, "mem_mib": 1}]}, ("user",)),
        ({"user": "a", "tasks": []}, ("tasks",)),
        ({"user": "a", "tasks": [{"cpu_m": 0, "mem_mib": 1}]}, ("tasks", 0, "cpu_m")),
        ({"user": "a", "tasks": [{"cpu_m": 1, "mem_mib": -5}]}, ("tasks", 0, "mem_mib")),
        ({"user": "a", "tasks": [{"cpu_m": "1", "mem_mib": 1}]}, ("tasks", 0, "cpu_m")),
        ({"user": "a", "weight": 0, "tasks": [{"cpu_m": 1, "mem_mib": 1}]}, ("weight",)),
        (
            {"user": "a", "tasks": [{"cpu_m": 1, "mem_mib": 1, "constraints": [-1]}]},
            ("tasks", 0, "constraints", 0),
        ),
        (
            {"user": "a", "tasks": [{"cpu_m": 1, "mem_mib": 1, "duration": -1}]},
            ("tasks", 0, "duration"),
        ),
        ({"user": "a", "usr": "b", "tasks": [{"cpu_m": 1, "mem_mib": 1}]}, ("usr",)),
        ({"user": "a", "tasks": [{"cpu_m": 1, "mem_mib": 1, "cpus": 2}]}, ("tasks", 0, "cpus")),
        ({"job_id": "a/b", "user": "a", "tasks": [{"cpu_m": 1, "mem_mib": 1}]}, ("job_id",)),
    ],
)
def test_bad_submission_names_the_field(body: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSubmission.model_validate(body)
    assert loc in loc_of(caught.value)


def test_unknown_field_error_names_it() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSubmission.model_validate_json('{"user": "a", "wieght": 2, "tasks": []}')
    errors = {tuple(e["loc"]): e["type"] for e in caught.value.errors()}
    assert errors[("wieght",)] == "extra_forbidden"


@pytest.mark.parametrize(
    "tasks",
    [
        [{"task_id": "x", "cpu_m": 1, "mem_mib": 1}, {"task_id": "x", "cpu_m": 1, "mem_mib": 1}],
        # an explicit id that equals the second task's default id (its index)
        [{"task_id": "1", "cpu_m": 1, "mem_mib": 1}, {"cpu_m": 1, "mem_mib": 1}],
    ],
)
def test_duplicate_task_ids_rejected(tasks: list[dict]) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSubmission.model_validate({"user": "a", "tasks": tasks})
    (error,) = caught.value.errors()
    assert error["loc"] == ("tasks",)
    assert "tasks[1].task_id" in error["msg"]
    assert "duplicate" in error["msg"]


def test_unknown_constraint_id_names_the_task() -> None:
    sub = JobSubmission.model_validate(
        {
            "user": "a",
            "tasks": [
                {"cpu_m": 1, "mem_mib": 1, "constraints": [20]},
                {"cpu_m": 1, "mem_mib": 1, "constraints": [2, 21]},
            ],
        }
    )
    job = job_from_wire(sub, job_id="j", arrival=0.0)  # the core judges constraint ids
    with pytest.raises(InvalidInput) as caught:
        validate_job(job)
    assert caught.value.field == "tasks[1].constraints"
    validate_job(job, num_constraints=22)  # with more constraint ids configured, it is fine


def test_job_to_wire_refuses_ids_it_cannot_round_trip() -> None:
    job = make_job()
    bad = JobSpec(job.job_id, job.user, (TaskSpec("other/0", "j1", Resources(1, 1)),), 0.0)
    with pytest.raises(InvalidInput) as caught:
        job_to_wire(bad)
    assert caught.value.field == "tasks[0].task_id"


# --- placements and requests ---------------------------------------------------------------------


@pytest.mark.parametrize("priority", [7.5, 0.0, math.inf])
def test_placement_round_trip(priority: float) -> None:
    placement = make_placement(priority=priority)
    assert placement_from_wire(through_json(placement_to_wire(placement))) == placement


def test_placement_rejects_bad_task() -> None:
    body = placement_to_wire(make_placement()).model_dump(mode="json")
    body["task"]["cpu_m"] = 0
    with pytest.raises(ValidationError) as caught:
        PlacementWire.model_validate(body)
    assert ("task", "cpu_m") in loc_of(caught.value)


@pytest.mark.parametrize("kind", list(RequestKind))
def test_launch_request_round_trip(kind: RequestKind) -> None:
    placements = (make_placement(1), make_placement(2))
    send = SendLaunch(lm="lm-1", request_id="gm-1:42", kind=kind, placements=placements)
    wire = through_json(launch_request_to_wire(send, gm="gm-1"))
    assert launch_requested_from_wire(wire, stimulus_id="s1") == LaunchRequested(
        stimulus_id="s1", gm="gm-1", request_id="gm-1:42", kind=kind, placements=placements
    )


def test_launch_request_rejects_unknown_kind() -> None:
    body = launch_request_to_wire(
        SendLaunch("lm-1", "r", RequestKind.LAUNCH, (make_placement(),)), "gm-1"
    ).model_dump(mode="json")
    body["kind"] = "steal"
    with pytest.raises(ValidationError) as caught:
        LaunchRequest.model_validate(body)
    assert ("kind",) in loc_of(caught.value)


def test_preempt_request_round_trip() -> None:
    send = SendPreempt(
        lm="lm-1", request_id="gm-1:43", placement=make_placement(), victims=("j9/1#1", "j9/2#1")
    )
    wire = through_json(preempt_request_to_wire(send, gm="gm-1"))
    assert isinstance(wire, PreemptRequest)
    assert preempt_requested_from_wire(wire, stimulus_id="s2") == PreemptRequested(
        stimulus_id="s2",
        gm="gm-1",
        request_id="gm-1:43",
        placement=send.placement,
        victims=send.victims,
    )


@pytest.mark.parametrize("priority", [12.5, 0.0, math.inf])
def test_reprioritize_request_round_trip(priority: float) -> None:
    wire = through_json(reprioritize_request_to_wire(SendReprioritize("lm-1", "j", priority),
                                                     gm="gm-1"))
    assert isinstance(wire, ReprioritizeRequest)
    assert reprioritize_requested_from_wire(wire, "s3") == ReprioritizeRequested(
        "s3", "gm-1", "j", priority)


def test_a_nan_priority_is_refused_and_a_worker_takes_only_finite_ones() -> None:
    with pytest.raises(ValidationError) as caught:
        ReprioritizeRequest.model_validate_json('{"gm": "gm-1", "job_id": "j", "priority": NaN}')
    assert ("priority",) in loc_of(caught.value)
    with pytest.raises(ValidationError) as caught:
        WorkerBatchWire.model_validate_json(
            '{"reprioritize": [{"job_id": "j", "priority": "Infinity"}]}')
    assert ("reprioritize", 0, "priority") in loc_of(caught.value)
    batch = WorkerBatchWire.model_validate_json(
        '{"reprioritize": [{"job_id": "j", "priority": 3}]}')
    assert [(r.job_id, r.priority) for r in batch.reprioritize] == [("j", 3.0)]


def test_a_worker_batch_holds_each_kind_in_its_list_in_the_order_queued() -> None:
    first, second = make_placement(1), make_placement(2, priority=math.inf)
    batch = through_json(worker_batch_to_wire([
        StopOnWorker("w0", "j1/0#9", Reason.PREEMPTED), StartOnWorker("w0", first),
        CheckpointOnWorker("w0", ("a", "b")), ReprioritizeOnWorker("w0", "j1", 2.0),
        StartOnWorker("w0", second), RestoreOnWorker("w0", "a", 1.5),
        StopOnWorker("w0", "j1/0#8", Reason.CANCELLED), CheckpointOnWorker("w0", ("c",))]))
    assert [placement_from_wire(p) for p in batch.start] == [first, second]
    assert batch.stop == [StopWire(attempt_id="j1/0#9", reason="preempted"),
                          StopWire(attempt_id="j1/0#8", reason="cancelled")]
    assert batch.checkpoint == ["a", "b", "c"]
    assert [(r.job_id, r.priority) for r in batch.reprioritize] == [("j1", 2.0)]
    assert [(r.attempt_id, r.work) for r in batch.restore] == [("a", 1.5)]
    assert worker_batch_to_wire([]) == WorkerBatchWire()


# --- snapshots and the topology cache ------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 4, 6, 13])
def test_snapshot_round_trip(size: int) -> None:
    # 4 nodes fill the hex digits exactly; 1, 6 and 13 leave padding bits
    snapshot = make_snapshot(make_topology(size=size))
    wire = through_json(snapshot_to_wire(snapshot))
    assert len(wire.up) == math.ceil(size / 4)
    assert_same_snapshot(snapshot, snapshot_from_wire(wire, TopologyCache()))


def test_topology_cache_reuses_unchanged_static_part() -> None:
    cache = TopologyCache()
    first = snapshot_from_wire(through_json(snapshot_to_wire(make_snapshot(seq=1))), cache)
    second = snapshot_from_wire(through_json(snapshot_to_wire(make_snapshot(seq=2))), cache)
    assert second.topology is first.topology
    assert cache.builds == 1
    assert second.seq == 2


def test_topology_cache_rebuilds_on_change_and_keeps_lms_apart() -> None:
    cache = TopologyCache()
    one = snapshot_from_wire(snapshot_to_wire(make_snapshot(make_topology("lm-1"))), cache)
    other = snapshot_from_wire(snapshot_to_wire(make_snapshot(make_topology("lm-2"))), cache)
    assert other.topology is not one.topology
    # lm-1 comes back with another node list (restarted with more nodes): rebuilt
    grown = snapshot_from_wire(snapshot_to_wire(make_snapshot(make_topology(size=7))), cache)
    assert grown.topology is not one.topology
    assert len(grown.topology) == 7
    # a changed constraint alone is a change too
    wire = snapshot_to_wire(make_snapshot(make_topology(size=7)))
    wire.nodes[0].constraints = [5]
    changed = snapshot_from_wire(wire, cache)
    assert changed.topology is not grown.topology
    assert changed.topology.constraint_vectors[5][0] == 1
    # lm-2 was unaffected by lm-1's changes
    again = snapshot_from_wire(snapshot_to_wire(make_snapshot(make_topology("lm-2"))), cache)
    assert again.topology is other.topology
    assert cache.builds == 4


def test_heartbeat_from_wire() -> None:
    snapshot = make_snapshot()
    event = heartbeat_from_wire(snapshot_to_wire(snapshot), "hb-1", TopologyCache())
    assert event.stimulus_id == "hb-1"
    assert_same_snapshot(snapshot, event.snapshot)


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"free_cpu": [1, 2, 3]}, ("free_cpu",)),
        ({"free_mem": [1] * 7}, ("free_mem",)),
        ({"up": "fff"}, ("up",)),
        ({"up": "zz"}, ("up",)),
        ({"running": [{"attempt_id": "a#1", "node_index": 6, "gm": "gm-1", "user": "u",
                       "cpu_m": 1, "mem_mib": 1}]}, ("running",)),
        ({"nodes": []}, ("nodes",)),
        ({"epoch": -1}, ("epoch",)),
        ({"seqq": 1}, ("seqq",)),
    ],
)  # fmt: skip
def test_bad_snapshot_names_the_field(changes: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as caught:
        LMSnapshotWire.model_validate(snapshot_wire_dict(**changes))
    assert loc in loc_of(caught.value)


def test_mismatched_lengths_message_is_clear() -> None:
    with pytest.raises(ValidationError) as caught:
        LMSnapshotWire.model_validate(snapshot_wire_dict(free_cpu=[1, 2, 3]))
    (error,) = caught.value.errors()
    assert "3 entries for 6 nodes" in error["msg"]


# --- replies -------------------------------------------------------------------------------------


def test_lm_reply_round_trip() -> None:
    results = (
        LaunchResult("j1/0#1", "j1/0", "lm-1/n2", Reason.LAUNCHED),
        LaunchResult("j1/1#1", "j1/1", "lm-1/n3", Reason.STALE_VIEW),
    )
    snapshot = make_snapshot()
    reply = ReplyToGM(gm="gm-1", request_id="gm-1:42", results=results, snapshot=snapshot)
    wire = through_json(reply_to_wire(reply, lm="lm-1"))
    assert wire.model_dump(mode="json")["results"][1]["reason"] == "stale_view"
    event = lm_replied_from_wire(wire, stimulus_id="r1", topologies=TopologyCache())
    assert (event.stimulus_id, event.lm, event.request_id) == ("r1", "lm-1", "gm-1:42")
    assert event.results == results
    assert all(isinstance(r.reason, Reason) for r in event.results)
    assert_same_snapshot(snapshot, event.snapshot)


def test_a_reply_leaves_out_the_nodes_of_the_epoch_the_gm_holds() -> None:
    """A GM that holds the LM's nodes (from a heartbeat) gets replies without them, and
    decodes them into the same snapshot as a reply with them."""
    snapshot = make_snapshot()
    results = (LaunchResult("j1/0#1", "j1/0", "lm-1/n2", Reason.LAUNCHED),)
    reply = ReplyToGM(gm="gm-1", request_id="gm-1:7", results=results, snapshot=snapshot)
    topologies = TopologyCache()
    heartbeat = through_json(snapshot_to_wire(snapshot))
    topologies.topology_for(heartbeat)
    assert topologies.known_epoch("lm-1") == snapshot.epoch

    lean = through_json(reply_to_wire(reply, "lm-1", known_epoch=topologies.known_epoch("lm-1")))
    assert lean.snapshot is None and lean.state is not None
    assert "nodes" not in lean.model_dump_json()
    event = lm_replied_from_wire(lean, stimulus_id="r1", topologies=topologies)
    assert event.results == results
    assert event.snapshot.running is None
    full = dataclasses.replace(snapshot, running=None)
    assert_same_snapshot(full, event.snapshot)
    assert event.snapshot.topology is topologies.at_epoch("lm-1", snapshot.epoch)

    # another epoch (the LM restarted) or no epoch known: the nodes come along
    assert reply_to_wire(reply, "lm-1", known_epoch=snapshot.epoch + 1).snapshot is not None
    assert reply_to_wire(reply, "lm-1").snapshot is not None


def test_a_reply_without_nodes_of_an_unknown_epoch_is_refused() -> None:
    reply = ReplyToGM("gm-1", "r", (), make_snapshot())
    lean = through_json(reply_to_wire(reply, "lm-1", known_epoch=3))
    with pytest.raises(InvalidInput, match="no nodes of 'lm-1' at epoch 3"):
        lm_replied_from_wire(lean, stimulus_id="r1", topologies=TopologyCache())
    other = TopologyCache()
    small = make_snapshot(make_topology(size=4))
    other.topology_for(through_json(snapshot_to_wire(small)))
    with pytest.raises(InvalidInput, match="entries for 4 nodes"):
        lm_replied_from_wire(lean, stimulus_id="r1", topologies=other)


def test_a_reply_carries_exactly_one_snapshot() -> None:
    body = reply_to_wire(ReplyToGM("gm-1", "r", (), make_snapshot()), "lm-1").model_dump(
        mode="json")
    both = dict(body, state=reply_to_wire(ReplyToGM("gm-1", "r", (), make_snapshot()), "lm-1",
                                          known_epoch=3).state.model_dump(mode="json"))
    for bad in (both, {k: v for k, v in body.items() if k != "snapshot"}):
        with pytest.raises(ValidationError, match="exactly one of snapshot"):
            LMReply.model_validate(bad)
    state = both["state"]
    with pytest.raises(ValidationError, match="free_mem has 2 entries"):
        LMStateWire.model_validate(dict(state, free_mem=[1, 2]))


def test_lm_reply_rejects_unknown_reason() -> None:
    body = reply_to_wire(
        ReplyToGM("gm-1", "r", (LaunchResult("a#1", "a", "n", Reason.LAUNCHED),), make_snapshot()),
        lm="lm-1",
    ).model_dump(mode="json")
    body["results"][0]["reason"] = "because"
    with pytest.raises(ValidationError) as caught:
        LMReply.model_validate(body)
    assert ("results", 0, "reason") in loc_of(caught.value)


# --- task events ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        TaskEvent(Reason.FINISHED, "j1/0#1", "j1/0", "j1", "gm-1", "lm-1", "lm-1/n2", 2.4),
        TaskEvent(Reason.PREEMPTED, "j1/0#2", "j1/0", "j1", "gm-1", "lm-1", "n", detail="by gm-2"),
        TaskEvent(Reason.STARTED, "j1/0#1", "j1/0", "j1", "gm-1", "lm-1", "n", at=1795343264.5),
    ],
)
def test_task_event_round_trip(event: TaskEvent) -> None:
    wire = through_json(task_event_to_wire(event))
    assert isinstance(wire, TaskEventWire)
    assert task_event_from_wire(wire) == event


# --- worker agent -> LM --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (ReportToLM(Reason.STARTED, "a#1"), WorkerTaskStarted("s", "w0", "a#1")),
        (ReportToLM(Reason.FINISHED, "a#1", 3.25), WorkerTaskFinished("s", "w0", "a#1", 3.25)),
        (
            ReportToLM(Reason.FAILED, "a#1", detail="exit 1"),
            WorkerTaskFailed("s", "w0", "a#1", "exit 1"),
        ),
        (
            ReportToLM(Reason.CANCELLED, "a#1", detail="superseded"),
            WorkerTaskFailed("s", "w0", "a#1", "cancelled: superseded"),
        ),
        (ReportToLM(Reason.CANCELLED, "a#1"), WorkerTaskFailed("s", "w0", "a#1", "cancelled")),
    ],
)
def test_worker_report_to_event(report: ReportToLM, expected: object) -> None:
    wire = through_json(report_to_wire(report, worker="w0"))
    assert wire.kind == report.kind.value
    assert worker_report_to_event(wire, stimulus_id="s") == expected


def test_finished_report_needs_runtime() -> None:
    with pytest.raises(ValidationError) as caught:
        WorkerReport.model_validate({"worker": "w0", "kind": "finished", "attempt_id": "a#1"})
    assert loc_of(caught.value) == [("runtime",)]


def test_worker_report_rejects_unknown_kind() -> None:
    with pytest.raises(ValidationError) as caught:
        WorkerReport.model_validate({"worker": "w0", "kind": "exploded", "attempt_id": "a#1"})
    assert ("kind",) in loc_of(caught.value)


def test_worker_heartbeat_round_trip() -> None:
    running = (make_placement(1), make_placement(2, priority=math.inf))
    wire = through_json(worker_heartbeat_to_wire("w0", running))
    assert isinstance(wire, WorkerHeartbeatWire)
    assert worker_heartbeat_from_wire(wire, stimulus_id="h") == WorkerHeartbeat(
        stimulus_id="h", worker="w0", running=running
    )


# --- routing -------------------------------------------------------------------------------------


def test_message_kinds_route_every_message() -> None:
    samples = {
        "job": job_to_wire(make_job()),
        "launch_request": launch_request_to_wire(
            SendLaunch("lm-1", "r", RequestKind.LAUNCH, (make_placement(),)), "gm-1"
        ),
        "preempt_request": preempt_request_to_wire(
            SendPreempt("lm-1", "r", make_placement(), ("v#1",)), "gm-1"
        ),
        "lm_reply": reply_to_wire(ReplyToGM("gm-1", "r", (), make_snapshot()), "lm-1"),
        "snapshot": snapshot_to_wire(make_snapshot()),
        "lm_state": reply_to_wire(ReplyToGM("gm-1", "r", (), make_snapshot()), "lm-1",
                                  known_epoch=3).state,
        "task_event": task_event_to_wire(
            TaskEvent(Reason.STARTED, "a#1", "a", "j", "gm-1", "lm-1", "n")
        ),
        "worker_report": report_to_wire(ReportToLM(Reason.STARTED, "a#1"), "w0"),
        "worker_heartbeat": worker_heartbeat_to_wire("w0", ()),
    }
    samples["task_events"] = TaskEventBatchWire(events=[samples["task_event"]] * 2)
    samples["worker_reports"] = WorkerReportBatch(reports=[samples["worker_report"]])
    samples["worker_batch"] = WorkerBatchWire(start=[placement_to_wire(make_placement())],
                                              stop=[StopWire(attempt_id="v#1",
                                                             reason="preempted")])
    assert set(samples) == set(WIRE_MODELS)
    for kind, message in samples.items():
        model = WIRE_MODELS[kind]
        assert isinstance(message, model)
        assert model.model_validate_json(message.model_dump_json()) == message
