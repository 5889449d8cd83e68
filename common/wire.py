"""Wire schemas: the pydantic models of every message that crosses a process boundary.

HTTP bodies (client -> GM, GM -> LM, LM -> worker) and RabbitMQ payloads (heartbeats, task
events) are validated here, at the edge, and converted to and from the core's frozen
dataclasses by the small functions below (docs/architecture.md, Code style). The core never
sees a pydantic model, and nothing here does I/O.

Conventions:

- Every model forbids unknown fields, so a misspelt field is an error that names it.
- Integers (resources, constraint ids, indices) are strict: `"100"` or `true` is not a cpu.
- A model is suffixed `Wire` exactly where the core has a record of the same name
  (`PlacementWire` vs `common.messages.Placement`); the others keep the protocol's name.
- Floats that may legitimately be infinite (a placement's priority) travel as the JSON
  string `"Infinity"`, which stays valid JSON and parses back.
- A snapshot's `up` vector is the hex of the big-endian bitarray, zero-padded to a multiple of
  four bits: one character per four nodes (12,500 characters for 50,000 nodes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from bitarray import bitarray, frozenbitarray
from bitarray.util import ba2hex, hex2ba
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.cluster import ClusterTopology, LMSnapshot, RunningInfo
from common.commands import (
    CheckpointOnWorker,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
    SendCancel,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
    StartOnWorker,
    StopOnWorker,
)
from common.errors import InvalidInput
from common.events import (
    CancelRequested,
    HeartbeatReceived,
    JobReprioritized,
    LaunchRequested,
    LMReplied,
    PreemptRequested,
    ReprioritizeRequested,
    TaskCheckpointRequested,
    TaskRestored,
    WorkerHeartbeat,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.models import DEFAULT_NUM_CONSTRAINTS, JobSpec, NodeSpec, TaskSpec
from common.reasons import Reason
from common.resources import Resources
from common.routing import worker_report_event

# --- field types ---------------------------------------------------------------------------------

PositiveInt = Annotated[int, Field(strict=True, gt=0)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]
ConstraintId = Annotated[int, Field(strict=True, ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _not_nan(value: float) -> float:
    if math.isnan(value):
        raise ValueError("must be a number (infinite allowed), not NaN")
    return value


# A job's priority as a GM sends it (its estimated remaining work): infinite when unknown,
# never NaN. A worker keys its queue by finite ones only.
Priority = Annotated[float, AfterValidator(_not_nan)]
FinitePriority = Annotated[float, Field(allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1)]
# A job's template (JobSpec.name): runs of one recurring job share it; printable text.
JOB_NAME_MAX = 200
JobName = Annotated[str, Field(min_length=1, max_length=JOB_NAME_MAX,
                               pattern=r"^[^\x00-\x1f\x7f]+$")]

# --- what a client may submit: bounded, because every field is copied into log lines,
# heartbeats and attempt ids (a 1 MB id would be copied thousands of times) and a float
# like 1e308 as a duration or a weight breaks the arithmetic of every policy.
ID_MAX = 128  # characters of a job, task, queue or node id in a submission
# Letters, digits and ._:@+~- ; a node id may also hold '/'. A job id may not: core task ids
# are `job_id/local_id`, and the split must be unambiguous (job `a` task `b/c` and job `a/b`
# task `c` would otherwise collide).
SubmittedId = Annotated[str, Field(min_length=1, max_length=ID_MAX,
                                   pattern=r"^[A-Za-z0-9._:@+~-]+$")]
SubmittedNodeId = Annotated[str, Field(min_length=1, max_length=ID_MAX,
                                       pattern=r"^[A-Za-z0-9._:@+~/-]+$")]
MAX_DURATION_S = 1e8  # about three years: longer than any trace's task
MAX_WEIGHT = 1e6
MAX_RESOURCE = 1 << 40  # millicores or MiB of one task; feasibility is checked by the GM
MAX_CONSTRAINTS_PER_TASK = 256
MAX_CONSTRAINT_ID = 65535  # the federation's num_constraints is checked by the GM
MAX_PLACEMENT_SET = 10_000  # node ids in one task's placement set
SubmittedDuration = Annotated[float, Field(ge=0, le=MAX_DURATION_S, allow_inf_nan=False)]
SubmittedResource = Annotated[int, Field(strict=True, gt=0, le=MAX_RESOURCE)]
SubmittedConstraint = Annotated[int, Field(strict=True, ge=0, le=MAX_CONSTRAINT_ID)]

TASK_ID_SEPARATOR = "/"


def _placement_set(nodes: list[str] | None) -> list[str] | None:
    if nodes is not None and not nodes:
        raise ValueError("a placement set needs at least one node id (leave `nodes` out to "
                         "let the task run anywhere)")
    return nodes


# A task's placement set: the ids of the nodes it may run on (None: anywhere). Whether they are
# nodes of the federation the GM checks (common/admission.py).
PlacementSet = Annotated[list[Name] | None, AfterValidator(_placement_set)]
SubmittedPlacementSet = Annotated[
    list[SubmittedNodeId] | None, Field(max_length=MAX_PLACEMENT_SET),
    AfterValidator(_placement_set)]


class WireModel(BaseModel):
    """Base of every wire model: unknown fields are errors; infinities survive JSON."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


# --- job submission: client -> GM, `POST /v1/jobs` -----------------------------------------------


class TaskSubmission(WireModel):
    task_id: SubmittedId | None = None  # local to the job; defaults to the task's index
    cpu_m: SubmittedResource
    mem_mib: SubmittedResource
    constraints: list[SubmittedConstraint] = Field(default_factory=list,
                                                   max_length=MAX_CONSTRAINTS_PER_TASK)
    duration: SubmittedDuration | None = None
    nodes: SubmittedPlacementSet = None  # its placement set: the node ids it may run on


class JobSubmission(WireModel):
    # client-chosen for idempotent retries (unique within its queue); else the GM picks one
    job_id: SubmittedId | None = None
    user: SubmittedId
    weight: Annotated[float, Field(gt=0, le=MAX_WEIGHT, allow_inf_nan=False)] = 1.0
    estimated_task_duration: SubmittedDuration | None = None
    name: JobName | None = None  # the job's template, for history-based runtime predictors
    tasks: list[TaskSubmission] = Field(min_length=1)

    @field_validator("tasks")
    @classmethod
    def _unique_task_ids(cls, tasks: list[TaskSubmission]) -> list[TaskSubmission]:
        # Checked after defaulting, so an explicit "1" clashing with the second task's
        # default id is caught too.
        seen: set[str] = set()
        for index, local_id in enumerate(local_task_ids(tasks)):
            if local_id in seen:
                raise ValueError(f"tasks[{index}].task_id: duplicate task id {local_id!r}")
            seen.add(local_id)
        return tasks


def local_task_ids(tasks: Sequence[TaskSubmission]) -> list[str]:
    return [str(i) if task.task_id is None else task.task_id for i, task in enumerate(tasks)]


def job_from_wire(sub: JobSubmission, job_id: str, arrival: float) -> JobSpec:
    """The core job of a submission; `job_id` is used when the client chose none.

    Core task ids are `job_id/local_id`, unique across the federation. What only the
    federation can judge (constraint ids, feasibility, task ids of other jobs) is checked once,
    by the GM core (`GlobalMaster.check_job`, also run when the job is handled), not here.
    """
    effective_id = sub.job_id if sub.job_id is not None else job_id
    if TASK_ID_SEPARATOR in effective_id:
        raise InvalidInput("job_id", f"may not contain {TASK_ID_SEPARATOR!r}: {effective_id!r}")
    tasks = tuple(
        TaskSpec(
            task_id=f"{effective_id}{TASK_ID_SEPARATOR}{local_id}",
            job_id=effective_id,
            demand=Resources(task.cpu_m, task.mem_mib),
            constraints=frozenset(task.constraints),
            duration=task.duration,
            nodes=None if task.nodes is None else frozenset(task.nodes),
        )
        for local_id, task in zip(local_task_ids(sub.tasks), sub.tasks, strict=True)
    )
    job = JobSpec(
        job_id=effective_id,
        user=sub.user,
        tasks=tasks,
        arrival=arrival,
        weight=sub.weight,
        estimated_task_duration=sub.estimated_task_duration,
        name=sub.name,
    )
    return job


def job_to_wire(job: JobSpec) -> JobSubmission:
    """The submission that `job_from_wire` turns back into `job` (arrival aside)."""
    prefix = f"{job.job_id}{TASK_ID_SEPARATOR}"
    tasks = []
    for index, task in enumerate(job.tasks):
        if not task.task_id.startswith(prefix):
            # Without the prefix the round trip would silently rename the task.
            raise InvalidInput(f"tasks[{index}].task_id", f"{task.task_id!r} lacks {prefix!r}")
        tasks.append(
            TaskSubmission(
                task_id=task.task_id.removeprefix(prefix),
                cpu_m=task.demand.cpu_m,
                mem_mib=task.demand.mem_mib,
                constraints=sorted(task.constraints),
                duration=task.duration,
                nodes=None if task.nodes is None else sorted(task.nodes),
            )
        )
    return JobSubmission(
        job_id=job.job_id,
        user=job.user,
        weight=job.weight,
        estimated_task_duration=job.estimated_task_duration,
        name=job.name,
        tasks=tasks,
    )


# --- placements: GM -> LM launch items, LM -> worker ---------------------------------------------


class TaskWire(WireModel):
    task_id: Name
    job_id: Name
    cpu_m: PositiveInt
    mem_mib: PositiveInt
    constraints: list[ConstraintId] = Field(default_factory=list)
    duration: NonNegativeFloat | None = None
    # its placement set, carried to the LM and worker with the task (an LM's redundant copies
    # must stay inside it too)
    nodes: PlacementSet = None


class PlacementWire(WireModel):
    attempt_id: Name
    task: TaskWire
    node_id: Name
    gm: Name
    user: Name
    priority: float = 0.0  # may be infinite (unknown remaining work): travels as "Infinity"
    pilot: bool = False
    start_work: NonNegativeFloat = 0.0  # a redundant copy's checkpoint (docs/redundancy.md)
    copy_of: Name | None = None  # a redundant copy: the original attempt it copies


def task_to_wire(task: TaskSpec) -> TaskWire:
    return TaskWire(
        task_id=task.task_id,
        job_id=task.job_id,
        cpu_m=task.demand.cpu_m,
        mem_mib=task.demand.mem_mib,
        constraints=sorted(task.constraints),
        duration=task.duration,
        nodes=None if task.nodes is None else sorted(task.nodes),
    )


def task_from_wire(wire: TaskWire) -> TaskSpec:
    return TaskSpec(
        task_id=wire.task_id,
        job_id=wire.job_id,
        demand=Resources(wire.cpu_m, wire.mem_mib),
        constraints=frozenset(wire.constraints),
        duration=wire.duration,
        nodes=None if wire.nodes is None else frozenset(wire.nodes),
    )


def placement_to_wire(placement: Placement) -> PlacementWire:
    return PlacementWire(
        attempt_id=placement.attempt_id,
        task=task_to_wire(placement.task),
        node_id=placement.node_id,
        gm=placement.gm,
        user=placement.user,
        priority=placement.priority,
        pilot=placement.pilot,
        start_work=placement.start_work,
        copy_of=placement.copy_of,
    )


def placement_from_wire(wire: PlacementWire) -> Placement:
    return Placement(
        attempt_id=wire.attempt_id,
        task=task_from_wire(wire.task),
        node_id=wire.node_id,
        gm=wire.gm,
        user=wire.user,
        priority=wire.priority,
        pilot=wire.pilot,
        start_work=wire.start_work,
        copy_of=wire.copy_of,
    )


StopReason = Literal["cancelled", "preempted"]


class StopWire(WireModel):
    attempt_id: Name
    reason: StopReason = "cancelled"


class RestoreWire(WireModel):
    attempt_id: Name
    work: NonNegativeFloat  # continue from this much work done, if behind it


class ReprioritizeWire(WireModel):
    job_id: Name
    priority: FinitePriority  # the job's attempts here take it; queued ones are re-keyed


class WorkerBatchWire(WireModel):
    """LM -> worker agent: every start, stop, reprioritization, checkpoint request and
    restore queued while the previous batch was out. Starts are applied before stops: an
    attempt is only ever stopped after its start; then jobs' new priorities (re-keying what
    is queued, started or not); checkpoints and restores (of redundant copies' tasks) come
    last."""

    start: list[PlacementWire] = Field(default_factory=list)
    stop: list[StopWire] = Field(default_factory=list)
    reprioritize: list[ReprioritizeWire] = Field(default_factory=list)
    checkpoint: list[Name] = Field(default_factory=list)  # attempts whose progress to report
    restore: list[RestoreWire] = Field(default_factory=list)


WorkerCommand = (StartOnWorker | StopOnWorker | ReprioritizeOnWorker | CheckpointOnWorker
                 | RestoreOnWorker)


def stop_to_wire(command: StopOnWorker) -> StopWire:
    return StopWire(attempt_id=command.attempt_id, reason=str(command.reason))


def restore_to_wire(command: RestoreOnWorker) -> RestoreWire:
    return RestoreWire(attempt_id=command.attempt_id, work=command.work)


def worker_reprioritize_to_wire(command: ReprioritizeOnWorker) -> ReprioritizeWire:
    return ReprioritizeWire(job_id=command.job_id, priority=command.priority)


def worker_batch_to_wire(commands: Sequence[WorkerCommand]) -> WorkerBatchWire:
    """One request with the commands queued for a worker, each kind in its list in the order
    it was queued."""
    return WorkerBatchWire(
        start=[placement_to_wire(c.placement) for c in commands
               if isinstance(c, StartOnWorker)],
        stop=[stop_to_wire(c) for c in commands if isinstance(c, StopOnWorker)],
        reprioritize=[worker_reprioritize_to_wire(c) for c in commands
                      if isinstance(c, ReprioritizeOnWorker)],
        checkpoint=[a for c in commands if isinstance(c, CheckpointOnWorker)
                    for a in c.attempt_ids],
        restore=[restore_to_wire(c) for c in commands if isinstance(c, RestoreOnWorker)],
    )


def job_reprioritized_from_wire(wire: ReprioritizeWire, stimulus_id: str) -> JobReprioritized:
    return JobReprioritized(stimulus_id, wire.job_id, wire.priority)


def checkpoint_requested_from_wire(wire: WorkerBatchWire,
                                   stimulus_id: str) -> TaskCheckpointRequested:
    """The batch's checkpoint requests, as one event (the worker makes none of an empty list)."""
    return TaskCheckpointRequested(stimulus_id, tuple(wire.checkpoint))


def task_restored_from_wire(wire: RestoreWire, stimulus_id: str) -> TaskRestored:
    return TaskRestored(stimulus_id, wire.attempt_id, wire.work)


# --- requests: GM -> LM --------------------------------------------------------------------------


class LaunchRequest(WireModel):
    gm: Name
    request_id: Name
    kind: Literal["launch", "repartition"]
    placements: list[PlacementWire] = Field(min_length=1)
    # The LM epoch whose nodes the GM already holds (from a heartbeat): a reply from that
    # epoch leaves the nodes out (`LMReply.state`). None: send them.
    known_epoch: NonNegativeInt | None = None
    # The LM epoch the GM planned these placements on: a later incarnation of the LM refuses
    # them (`lm_restarted`), since it cannot know whether the earlier one ran them. None: no
    # check.
    lm_epoch: NonNegativeInt | None = None


class PreemptRequest(WireModel):
    gm: Name
    request_id: Name
    placement: PlacementWire
    victims: list[Name] = Field(min_length=1)  # attempt ids running on the placement's node
    known_epoch: NonNegativeInt | None = None  # as in LaunchRequest
    lm_epoch: NonNegativeInt | None = None  # as in LaunchRequest


class CancelRequest(WireModel):
    """`POST /v1/cancel`: the owning GM no longer wants this attempt (a superseded copy)."""

    gm: Name
    attempt_id: Name


class ReprioritizeRequest(WireModel):
    """`POST /v1/reprioritize`: the GM's job has a new priority (docs/local-queues.md,
    Estimates that change); infinite travels as the JSON string "Infinity"."""

    gm: Name
    job_id: Name
    priority: Priority


def cancel_request_to_wire(send: SendCancel, gm: str) -> CancelRequest:
    return CancelRequest(gm=gm, attempt_id=send.attempt_id)


def cancel_requested_from_wire(wire: CancelRequest, stimulus_id: str) -> CancelRequested:
    return CancelRequested(stimulus_id, wire.gm, wire.attempt_id)


def reprioritize_request_to_wire(send: SendReprioritize, gm: str) -> ReprioritizeRequest:
    return ReprioritizeRequest(gm=gm, job_id=send.job_id, priority=send.priority)


def reprioritize_requested_from_wire(wire: ReprioritizeRequest,
                                     stimulus_id: str) -> ReprioritizeRequested:
    return ReprioritizeRequested(stimulus_id, wire.gm, wire.job_id, wire.priority)


def launch_request_to_wire(send: SendLaunch, gm: str,
                           known_epoch: int | None = None) -> LaunchRequest:
    return LaunchRequest(
        gm=gm,
        request_id=send.request_id,
        kind=send.kind.value,
        placements=[placement_to_wire(p) for p in send.placements],
        known_epoch=known_epoch,
        lm_epoch=send.lm_epoch,
    )


def launch_requested_from_wire(wire: LaunchRequest, stimulus_id: str) -> LaunchRequested:
    return LaunchRequested(
        stimulus_id=stimulus_id,
        gm=wire.gm,
        request_id=wire.request_id,
        kind=RequestKind(wire.kind),
        placements=tuple(placement_from_wire(p) for p in wire.placements),
        lm_epoch=wire.lm_epoch,
    )


def preempt_request_to_wire(send: SendPreempt, gm: str,
                            known_epoch: int | None = None) -> PreemptRequest:
    return PreemptRequest(
        gm=gm,
        request_id=send.request_id,
        placement=placement_to_wire(send.placement),
        victims=list(send.victims),
        known_epoch=known_epoch,
        lm_epoch=send.lm_epoch,
    )


def preempt_requested_from_wire(wire: PreemptRequest, stimulus_id: str) -> PreemptRequested:
    return PreemptRequested(
        stimulus_id=stimulus_id,
        gm=wire.gm,
        request_id=wire.request_id,
        placement=placement_from_wire(wire.placement),
        victims=tuple(wire.victims),
        lm_epoch=wire.lm_epoch,
    )


# --- LM snapshots: heartbeats on the fanout exchange, and piggy-backed on replies ----------------


class NodeWire(WireModel):
    """The static part of a node; its LM is the snapshot's."""

    node_id: Name
    worker: Name
    cpu_m: PositiveInt
    mem_mib: PositiveInt
    constraints: list[ConstraintId] = Field(default_factory=list)


class RunningWire(WireModel):
    attempt_id: Name
    node_index: NonNegativeInt
    gm: Name
    user: Name
    cpu_m: PositiveInt
    mem_mib: PositiveInt
    logical: bool = False
    queued: bool = False  # waits in its node's local queue: holds no resources yet


def _node_count(info: ValidationInfo) -> int | None:
    """Nodes validated so far; None when `nodes` itself was invalid (already reported)."""
    nodes = info.data.get("nodes")
    return None if nodes is None else len(nodes)


class LMSnapshotWire(WireModel):
    lm: Name
    epoch: NonNegativeInt
    seq: NonNegativeInt
    gms: list[Name] = Field(min_length=1)
    num_constraints: PositiveInt = DEFAULT_NUM_CONSTRAINTS
    nodes: list[NodeWire] = Field(min_length=1)
    # Checked against `nodes` by the field validators below rather than one model validator,
    # so the error's `loc` names the offending field. Fields validate in declaration order,
    # which is why `nodes` comes first.
    free_cpu: list[Annotated[int, Field(strict=True)]]
    free_mem: list[Annotated[int, Field(strict=True)]]
    up: Annotated[str, Field(pattern=r"^[0-9a-f]*$")]  # hex, see the module docstring
    # None: this snapshot does not list running attempts (LM replies); heartbeats always do.
    running: list[RunningWire] | None = None
    # with local queues: the nodes whose queue has room, hex like `up`
    queue_room: Annotated[str, Field(pattern=r"^[0-9a-f]*$")] | None = None

    @field_validator("free_cpu", "free_mem")
    @classmethod
    def _one_per_node(cls, values: list[int], info: ValidationInfo) -> list[int]:
        count = _node_count(info)
        if count is not None and len(values) != count:
            raise ValueError(f"has {len(values)} entries for {count} nodes")
        return values

    @field_validator("up")
    @classmethod
    def _hex_digit_per_four_nodes(cls, up: str, info: ValidationInfo) -> str:
        count = _node_count(info)
        if count is not None and len(up) != math.ceil(count / 4):
            raise ValueError(
                f"has {len(up)} hex digits for {count} nodes (expected {math.ceil(count / 4)})"
            )
        return up

    @field_validator("running")
    @classmethod
    def _on_known_nodes(
        cls, running: list[RunningWire] | None, info: ValidationInfo
    ) -> list[RunningWire] | None:
        count = _node_count(info)
        if count is not None and running is not None:
            for index, item in enumerate(running):
                if item.node_index >= count:
                    raise ValueError(
                        f"running[{index}].node_index {item.node_index} is not below {count}"
                    )
        return running


def up_to_hex(up: bitarray) -> str:
    bits = bitarray(up, endian="big")
    bits.extend([0] * (-len(bits) % 4))
    return ba2hex(bits)


def up_from_hex(text: str, size: int) -> frozenbitarray:
    return frozenbitarray(hex2ba(text, endian="big")[:size])


def _static_key(wire: LMSnapshotWire) -> tuple:
    """Everything a `ClusterTopology` is built from, as a comparable value.

    Constraint lists are taken in the order sent (senders sort them): a reordering costs a
    needless rebuild, never a wrong topology, and sorting 50,000 lists per heartbeat would not.
    """
    nodes = tuple(
        (n.node_id, n.worker, n.cpu_m, n.mem_mib, tuple(n.constraints)) for n in wire.nodes
    )
    return (tuple(wire.gms), wire.num_constraints, nodes)


class TopologyCache:
    """Rebuilds an LM's `ClusterTopology` only when the static part of its snapshots changes.

    A GM receives one heartbeat per LM per second; building the constraint vectors each time
    would cost more than applying the heartbeat. One entry per LM: a changed static part
    (an LM restarted with other nodes) replaces it. The comparison is exact, not by hash,
    so a collision can never hand a GM another cluster's vectors.
    """

    EPOCHS_KEPT = 4  # per LM: a reply of a restarted LM's old process may still be on its way

    def __init__(self) -> None:
        self._by_lm: dict[str, tuple[tuple, ClusterTopology]] = {}
        # LM -> {epoch: its topology}, newest last: what a reply without nodes refers to
        self._by_epoch: dict[str, dict[int, ClusterTopology]] = {}
        self.builds = 0  # how many topologies were built: tests and metrics read it

    def topology_for(self, wire: LMSnapshotWire) -> ClusterTopology:
        topology = self._topology_for(wire)
        epochs = self._by_epoch.setdefault(wire.lm, {})
        if epochs.get(wire.epoch) is not topology:
            epochs.pop(wire.epoch, None)
            epochs[wire.epoch] = topology
            while len(epochs) > self.EPOCHS_KEPT:
                del epochs[next(iter(epochs))]
        return topology

    def known_epoch(self, lm: str) -> int | None:
        """The newest epoch of `lm` whose nodes this cache holds (None: none yet)."""
        epochs = self._by_epoch.get(lm)
        return next(reversed(epochs)) if epochs else None

    def at_epoch(self, lm: str, epoch: int) -> ClusterTopology | None:
        return self._by_epoch.get(lm, {}).get(epoch)

    def _topology_for(self, wire: LMSnapshotWire) -> ClusterTopology:
        key = _static_key(wire)
        cached = self._by_lm.get(wire.lm)
        if cached is not None and cached[0] == key:
            return cached[1]
        nodes = [
            NodeSpec(
                node_id=n.node_id,
                lm=wire.lm,
                worker=n.worker,
                capacity=Resources(n.cpu_m, n.mem_mib),
                constraints=frozenset(n.constraints),
            )
            for n in wire.nodes
        ]
        topology = ClusterTopology(wire.lm, nodes, wire.gms, wire.num_constraints)
        self._by_lm[wire.lm] = (key, topology)
        self.builds += 1
        return topology

    def forget(self, lm: str) -> None:
        self._by_lm.pop(lm, None)
        self._by_epoch.pop(lm, None)


def snapshot_to_wire(snapshot: LMSnapshot) -> LMSnapshotWire:
    topology = snapshot.topology
    return LMSnapshotWire(
        lm=snapshot.lm,
        epoch=snapshot.epoch,
        seq=snapshot.seq,
        gms=list(topology.gms),
        num_constraints=topology.num_constraints,
        nodes=[
            NodeWire(
                node_id=node.node_id,
                worker=node.worker,
                cpu_m=node.capacity.cpu_m,
                mem_mib=node.capacity.mem_mib,
                constraints=sorted(node.constraints),
            )
            for node in topology.nodes
        ],
        free_cpu=list(snapshot.free_cpu),
        free_mem=list(snapshot.free_mem),
        up=up_to_hex(snapshot.up),
        running=None
        if snapshot.running is None
        else [
            RunningWire(
                attempt_id=r.attempt_id,
                node_index=r.node_index,
                gm=r.gm,
                user=r.user,
                cpu_m=r.cpu_m,
                mem_mib=r.mem_mib,
                logical=r.logical,
                queued=r.queued,
            )
            for r in snapshot.running
        ],
        queue_room=None if snapshot.queue_room is None else up_to_hex(snapshot.queue_room),
    )


def snapshot_from_wire(wire: LMSnapshotWire, cache: TopologyCache) -> LMSnapshot:
    """Raises `InvalidInput` if the nodes are unfit for a topology (duplicate ids, ...)."""
    running = None if wire.running is None else tuple(
        RunningInfo(
            attempt_id=r.attempt_id,
            node_index=r.node_index,
            gm=r.gm,
            user=r.user,
            cpu_m=r.cpu_m,
            mem_mib=r.mem_mib,
            logical=r.logical,
            queued=r.queued,
        )
        for r in wire.running
    )
    return _snapshot_on(wire, cache.topology_for(wire), running)


def _snapshot_on(wire: LMSnapshotWire | LMStateWire, topology: ClusterTopology,
                 running: tuple[RunningInfo, ...] | None) -> LMSnapshot:
    """The changing part of `wire` on a topology already decoded (or cached)."""
    return LMSnapshot(lm=wire.lm, epoch=wire.epoch, seq=wire.seq, topology=topology,
                      free_cpu=tuple(wire.free_cpu), free_mem=tuple(wire.free_mem),
                      up=up_from_hex(wire.up, len(topology.nodes)), running=running,
                      queue_room=None if wire.queue_room is None
                      else up_from_hex(wire.queue_room, len(topology.nodes)))


def heartbeat_from_wire(
    wire: LMSnapshotWire, stimulus_id: str, cache: TopologyCache
) -> HeartbeatReceived:
    return HeartbeatReceived(stimulus_id=stimulus_id, snapshot=snapshot_from_wire(wire, cache))


# --- replies: LM -> GM ---------------------------------------------------------------------------


class LaunchResultWire(WireModel):
    attempt_id: Name
    task_id: Name
    node_id: Name
    reason: Reason  # travels as the enum's string value


class LMStateWire(WireModel):
    """The changing part of an LM's snapshot: what a reply carries when the GM already holds
    the LM's nodes (its request named this epoch as known). A launch is answered many times a
    second and the nodes never change within an epoch: sending them each time cost the LM and
    the GM more than the rest of the exchange (benchmarks/bench_testbed.py, py-spy)."""

    lm: Name
    epoch: NonNegativeInt
    seq: NonNegativeInt
    free_cpu: list[Annotated[int, Field(strict=True)]]
    free_mem: list[Annotated[int, Field(strict=True)]]
    up: Annotated[str, Field(pattern=r"^[0-9a-f]*$")]
    queue_room: Annotated[str, Field(pattern=r"^[0-9a-f]*$")] | None = None

    @model_validator(mode="after")
    def _same_lengths(self) -> LMStateWire:
        if len(self.free_mem) != len(self.free_cpu):
            raise ValueError(f"free_mem has {len(self.free_mem)} entries, "
                             f"free_cpu {len(self.free_cpu)}")
        for name in ("up", "queue_room"):
            value = getattr(self, name)
            if value is not None and len(value) != math.ceil(len(self.free_cpu) / 4):
                raise ValueError(f"{name} has {len(value)} hex digits for "
                                 f"{len(self.free_cpu)} nodes")
        return self


class LMReply(WireModel):
    """Exactly one of `snapshot` (with the nodes) and `state` (without: see LMStateWire)."""

    lm: Name
    request_id: Name
    results: list[LaunchResultWire]
    snapshot: LMSnapshotWire | None = None
    state: LMStateWire | None = None

    @model_validator(mode="after")
    def _one_snapshot(self) -> LMReply:
        if (self.snapshot is None) == (self.state is None):
            raise ValueError("needs exactly one of snapshot (with nodes) and state (without)")
        return self


def launch_result_to_wire(result: LaunchResult) -> LaunchResultWire:
    return LaunchResultWire(
        attempt_id=result.attempt_id,
        task_id=result.task_id,
        node_id=result.node_id,
        reason=result.reason,
    )


def launch_result_from_wire(wire: LaunchResultWire) -> LaunchResult:
    return LaunchResult(
        attempt_id=wire.attempt_id,
        task_id=wire.task_id,
        node_id=wire.node_id,
        reason=Reason(wire.reason),
    )


def reply_to_wire(reply: ReplyToGM, lm: str, known_epoch: int | None = None) -> LMReply:
    """The LM's answer; without the nodes when the GM said it holds this epoch's."""
    results = [launch_result_to_wire(r) for r in reply.results]
    snapshot = reply.snapshot
    if known_epoch is not None and known_epoch == snapshot.epoch:
        state = LMStateWire(lm=snapshot.lm, epoch=snapshot.epoch, seq=snapshot.seq,
                            free_cpu=list(snapshot.free_cpu), free_mem=list(snapshot.free_mem),
                            up=up_to_hex(snapshot.up),
                            queue_room=None if snapshot.queue_room is None
                            else up_to_hex(snapshot.queue_room))
        return LMReply(lm=lm, request_id=reply.request_id, results=results, state=state)
    return LMReply(lm=lm, request_id=reply.request_id, results=results,
                   snapshot=snapshot_to_wire(snapshot))


def lm_replied_from_wire(wire: LMReply, stimulus_id: str, topologies: TopologyCache) -> LMReplied:
    """Raises `InvalidInput` if a reply without nodes names an epoch the cache does not hold
    (the LM answered a question the GM did not ask)."""
    if wire.snapshot is not None:
        snapshot = snapshot_from_wire(wire.snapshot, topologies)
    else:
        state = wire.state
        topology = topologies.at_epoch(state.lm, state.epoch)
        if topology is None:
            raise InvalidInput("state.epoch", f"this GM holds no nodes of {state.lm!r} at epoch "
                                              f"{state.epoch}, and the reply leaves them out")
        if len(state.free_cpu) != len(topology.nodes):
            raise InvalidInput("state.free_cpu", f"has {len(state.free_cpu)} entries for "
                                                 f"{len(topology.nodes)} nodes")
        snapshot = _snapshot_on(state, topology, running=None)
    return LMReplied(
        stimulus_id=stimulus_id,
        lm=wire.lm,
        request_id=wire.request_id,
        results=tuple(launch_result_from_wire(r) for r in wire.results),
        snapshot=snapshot,
    )


# --- task events: LM -> owning GM over RabbitMQ --------------------------------------------------


class TaskEventWire(WireModel):
    kind: Reason
    attempt_id: Name
    task_id: Name
    job_id: Name
    gm: Name
    lm: Name
    node_id: Name
    runtime: NonNegativeFloat | None = None
    detail: str = ""
    at: NonNegativeFloat | None = None  # the worker's clock, for a started attempt


def task_event_to_wire(event: TaskEvent) -> TaskEventWire:
    return TaskEventWire(
        kind=event.kind,
        attempt_id=event.attempt_id,
        task_id=event.task_id,
        job_id=event.job_id,
        gm=event.gm,
        lm=event.lm,
        node_id=event.node_id,
        runtime=event.runtime,
        detail=event.detail,
        at=event.at,
    )


def task_event_from_wire(wire: TaskEventWire) -> TaskEvent:
    return TaskEvent(
        kind=Reason(wire.kind),
        attempt_id=wire.attempt_id,
        task_id=wire.task_id,
        job_id=wire.job_id,
        gm=wire.gm,
        lm=wire.lm,
        node_id=wire.node_id,
        runtime=wire.runtime,
        detail=wire.detail,
        at=wire.at,
    )


class TaskEventBatchWire(WireModel):
    """One broker message: the task events an LM had for one GM, in the order they happened."""

    events: list[TaskEventWire] = Field(min_length=1)


# --- worker agent -> LM --------------------------------------------------------------------------


WorkerReportKind = Literal["started", "finished", "failed", "cancelled", "suspended",
                           "checkpointed"]


class WorkerReport(WireModel):
    worker: Name
    kind: WorkerReportKind
    attempt_id: Name
    at: NonNegativeFloat | None = None  # the worker's clock when it happened
    # validate_default: the check below must also run when a "finished" report omits it.
    runtime: NonNegativeFloat | None = Field(default=None, validate_default=True)
    detail: str = ""
    # the work done (checkpointed; cancelled, when the task's duration is known)
    work: NonNegativeFloat | None = Field(default=None, validate_default=True)

    @field_validator("runtime")
    @classmethod
    def _finished_has_runtime(cls, runtime: float | None, info: ValidationInfo) -> float | None:
        if runtime is None and info.data.get("kind") == "finished":
            raise ValueError("a finished report needs the measured runtime")
        return runtime

    @field_validator("work")
    @classmethod
    def _checkpoint_has_work(cls, work: float | None, info: ValidationInfo) -> float | None:
        if work is None and info.data.get("kind") == "checkpointed":
            raise ValueError("a checkpointed report needs the work done")
        return work


class WorkerReportBatch(WireModel):
    """Worker agent -> LM: the reports queued while the previous batch was out, in order."""

    reports: list[WorkerReport] = Field(min_length=1)


class WorkerHeartbeatWire(WireModel):
    worker: Name
    running: list[PlacementWire] = Field(default_factory=list)
    queued: list[Name] = Field(default_factory=list)  # those of `running` in a local queue


def report_to_wire(report: ReportToLM, worker: str) -> WorkerReport:
    return WorkerReport(
        worker=worker,
        kind=Reason(report.kind).value,
        attempt_id=report.attempt_id,
        runtime=report.runtime,
        detail=report.detail,
        at=report.at,
        work=report.work,
    )


def report_from_wire(wire: WorkerReport) -> ReportToLM:
    """The worker core's command that `report_to_wire` sent."""
    return ReportToLM(kind=Reason(wire.kind), attempt_id=wire.attempt_id, runtime=wire.runtime,
                      detail=wire.detail, at=wire.at, work=wire.work)


def worker_report_to_event(
    wire: WorkerReport, stimulus_id: str
) -> WorkerTaskStarted | WorkerTaskFinished | WorkerTaskFailed:
    """The LM's event for a worker's report: the same as in the simulator and the test
    harness (common/routing.py)."""
    return worker_report_event(wire.worker, report_from_wire(wire), stimulus_id)


def worker_heartbeat_to_wire(worker: str, running: Sequence[Placement],
                             queued: Iterable[str] = ()) -> WorkerHeartbeatWire:
    return WorkerHeartbeatWire(worker=worker, running=[placement_to_wire(p) for p in running],
                               queued=sorted(queued))


def worker_heartbeat_from_wire(wire: WorkerHeartbeatWire, stimulus_id: str) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        stimulus_id=stimulus_id,
        worker=wire.worker,
        running=tuple(placement_from_wire(p) for p in wire.running),
        queued=frozenset(wire.queued),
    )

