"""The federation configuration: one TOML file that every service, the simulator and the tests read.

A GM, an LM or a worker agent reads the same file and finds its own part by the id it gets
from its environment; the simulator reads it to build the whole federation in one process.
This module parses the text (the caller opens the file: the core does no I/O), checks it and
answers the questions the drivers ask: the topology of each LM, a GM's `GMConfig`, the nodes
a worker agent hosts, which GM serves a user's queue.

Shape of the file (every key is optional unless marked required)::

    seed = 0                       # nodes' constraints are drawn from (seed, LM id)
    num_constraints = 21
    gms = ["gm-1", "gm-2"]         # required, at least one

    [timing]                       # seconds, all positive
    heartbeat_interval = 1.0       # LM -> GMs partition state, while it changes
    heartbeat_keepalive = 2.0      # ... and while it does not, at least this often
    worker_heartbeat_interval = 1.0
    worker_timeout = 3.0           # a worker silent this long has its nodes marked down
    lm_timeout = 5.0               # an LM silent this long is left out of a GM's searches
    attempt_grace = 3.0
    tick_interval = 0.25
    worker_launch_pace = 0.02      # busy senders' requests at least this far apart: LM -> worker,
    report_pace = 0.1              # ... worker -> LM,
    task_event_pace = 0.05         # ... and LM -> GMs (task events through RabbitMQ)

    [limits]                       # the bounds of the queues between components
    gm_backlog_tasks = 5000        # a GM answers 429 to new jobs while this many tasks wait
    lm_requests_in_flight = 1      # per GM and LM; placements meanwhile join the next batch
    lm_task_event_outbox = 20000   # an LM refuses new work while this many events wait

    [policies]
    job = "fifo"                   # or "slearn"
    fairness = "fair_share"        # or "none"
    placement = "first_fit"        # or "best_fit"
    local_queue = "srpt"           # or "fifo"
    work_conserving = true
    [policies.slearn]
    sampling_ratio = 0.03
    thin_threshold = 3

    [[queues]]                     # required, at least one per GM
    name = "q1"
    share = 0.5
    gm = "gm-1"

    [[lms]]                        # required, at least one; nodes generated ...
    id = "lm-1"
    nodes = { count = 40, cpu_m = 2000, mem_mib = 4096, workers = 2, profile = "A" }

    [[lms]]                        # ... or listed
    id = "lm-2"
    [[lms.nodes]]
    id = "lm-2/n0"
    worker = "lm-2/w0"
    cpu_m = 2000
    mem_mib = 4096
    constraints = [0, 4, 20]

Generated nodes are `{lm}/n0 .. {lm}/n{count-1}` on workers `{lm}/w0 .. {lm}/w{workers-1}`,
spread round-robin (node i on worker i mod workers). Round-robin rather than blocks because
an LM's GM partitions are contiguous blocks of nodes (`initial_partition`): round-robin puts
part of every GM's partition on every worker, so losing one worker container costs every
GM alike instead of wiping out one GM's whole internal partition.

Every error is an `InvalidInput` naming a dotted path into the file (`lms[1].nodes.count`,
`queues[2].gm`, `timing.heartbeat_intervall`); an unknown key is an error, so a misspelling
cannot silently leave a default in force.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import random
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.cluster import ClusterTopology
from common.constraint_model import MACHINE_CONSTRAINT_PERCENT, machine_constraints
from common.errors import InvalidInput
from common.gm import GMConfig
from common.models import DEFAULT_NUM_CONSTRAINTS, NodeSpec
from common.policies.fairness import FAIRNESS_POLICIES, UserQueue, validate_queues
from common.policies.job import JOB_POLICIES
from common.policies.local_queue import LOCAL_QUEUE_POLICIES
from common.resources import Resources

# -- machine-constraint profiles -------------------------------------------------------------

# STAND-INS, not data. The Megha paper gives each LM the machine-constraint probabilities of
# one of Sharma et al.'s (SoCC 2011) Google clusters A, B or C, but Sharma's per-cluster
# tables are not in any public text we could reach (see ../shared/WORKLOADS.md, "Placement
# constraints"). The one public vector is `MACHINE_CONSTRAINT_PERCENT` in
# `common/constraint_model.py`, taken from the Megha authors' constraint-aware simulator:
# profile A is exactly that vector. B and C vary how densely machines carry attributes,
# not which attributes are common, so the task model (tuned to the same 21 ids) still fits:
# B scales every percentage by 0.75 (a sparser cluster: a constrained task fits fewer
# machines, 7.2 constraints per machine on average), C by 1.25, capped at 100 (a richer one,
# 11.8 per machine; A has 9.65). Replace them here if the real tables turn up.
PROFILE_B_SCALE = 0.75
PROFILE_C_SCALE = 1.25


def _scaled(percent: Sequence[float], factor: float) -> tuple[float, ...]:
    return tuple(min(100.0, p * factor) for p in percent)


MACHINE_PROFILES: dict[str, tuple[float, ...]] = {
    "A": tuple(float(p) for p in MACHINE_CONSTRAINT_PERCENT),
    "B": _scaled(MACHINE_CONSTRAINT_PERCENT, PROFILE_B_SCALE),
    "C": _scaled(MACHINE_CONSTRAINT_PERCENT, PROFILE_C_SCALE),
}
# The order `profile = "random"` draws from: a fixed tuple, so the draw never depends on
# how a dict happens to be ordered.
PROFILE_NAMES: tuple[str, ...] = ("A", "B", "C")
RANDOM_PROFILE = "random"

PLACEMENTS: tuple[str, ...] = ("first_fit", "best_fit")


# -- the parsed configuration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    heartbeat_interval: float = 1.0  # LM -> GMs; the paper used 10 s, the testbed 1 s
    worker_heartbeat_interval: float = 1.0  # worker agent -> its LM
    worker_timeout: float = 3.0  # three missed worker heartbeats: its nodes are down
    lm_timeout: float = 5.0  # a GM leaves an LM this silent out of its searches
    attempt_grace: float = 3.0  # see GMConfig.attempt_grace
    # how often a service feeds its core a Tick: the resolution of its timeouts and of the
    # LM's heartbeat; every wake-up costs an idle service CPU, so not finer than needed
    tick_interval: float = 0.25
    # An LM whose state has not changed repeats its heartbeat only this often (None: every
    # interval): GMs still hear it is alive, and an idle testbed does not pay for identical
    # snapshots. Between heartbeat_interval and lm_timeout.
    heartbeat_keepalive: float | None = None
    # Pacing of the batched flows (services/batching.py): a busy sender's requests leave at
    # least this far apart, and what is offered meanwhile shares the next one. Each request
    # costs both ends a fixed price in CPU, so a longer pace buys capacity with latency.
    # Measured on the testbed at 300 tasks/s (benchmarks/bench_testbed.py): from 5, 20 and
    # 20 ms to these, the host's CPU fell from 197% to 188% and allocation p50 from 139 ms to
    # 92 ms, the wait for a paced request being far shorter than the wait for a busy core.
    worker_launch_pace: float = 0.02  # LM -> a worker agent: adds up to this to allocation
    report_pace: float = 0.1  # worker -> its LM: starts carry the worker's clock, not delayed
    task_event_pace: float = 0.05  # LM -> each GM through RabbitMQ: GMs hear this much later

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) is not None:
                _positive_number(getattr(self, name), f"timing.{name}")
        keepalive = self.heartbeat_keepalive
        if keepalive is not None and not (
                self.heartbeat_interval <= keepalive < self.lm_timeout):
            raise InvalidInput(
                "timing.heartbeat_keepalive",
                f"must be at least heartbeat_interval ({self.heartbeat_interval}) and less than "
                f"lm_timeout ({self.lm_timeout}), got {keepalive}",
            )
        # A timeout shorter than the interval it waits on would declare healthy peers dead
        # between two heartbeats.
        if self.worker_timeout <= self.worker_heartbeat_interval:
            raise InvalidInput(
                "timing.worker_timeout",
                f"must exceed worker_heartbeat_interval ({self.worker_heartbeat_interval}), "
                f"got {self.worker_timeout}",
            )
        if self.lm_timeout <= self.heartbeat_interval:
            raise InvalidInput(
                "timing.lm_timeout",
                f"must exceed heartbeat_interval ({self.heartbeat_interval}), "
                f"got {self.lm_timeout}",
            )


@dataclass(frozen=True, slots=True)
class SLearnOptions:
    sampling_ratio: float = 0.03  # the fraction of a wide job's tasks run first as pilots
    thin_threshold: int = 3  # jobs with fewer tasks skip sampling

    def __post_init__(self) -> None:
        ratio = self.sampling_ratio
        if not (_is_number(ratio) and 0 < ratio <= 1):
            raise InvalidInput(
                "policies.slearn.sampling_ratio", f"must be a number in (0, 1], got {ratio!r}"
            )
        _int(self.thin_threshold, "policies.slearn.thin_threshold", minimum=1)

    def as_options(self) -> dict[str, Any]:
        return {"sampling_ratio": self.sampling_ratio, "thin_threshold": self.thin_threshold}


@dataclass(frozen=True, slots=True)
class Policies:
    job: str = "fifo"
    fairness: str = "fair_share"
    placement: str = "first_fit"
    local_queue: str = "srpt"
    work_conserving: bool = True
    slearn: SLearnOptions = field(default_factory=SLearnOptions)

    def __post_init__(self) -> None:
        # The registries are the lists of known names, so a new policy needs no edit here.
        _known_name(self.job, "policies.job", JOB_POLICIES)
        _known_name(self.fairness, "policies.fairness", FAIRNESS_POLICIES)
        _known_name(self.placement, "policies.placement", PLACEMENTS)
        _known_name(self.local_queue, "policies.local_queue", LOCAL_QUEUE_POLICIES)
        if not isinstance(self.work_conserving, bool):
            raise InvalidInput(
                "policies.work_conserving", f"must be true or false, got {self.work_conserving!r}"
            )


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on the queues between components (docs/queues.md lists every queue)."""

    # A GM accepts a job only while fewer tasks than this wait in it (pending, held, or
    # accepted and not yet taken from its broker queue); past it, 429 with Retry-After.
    gm_backlog_tasks: int = 5000
    # Requests one GM keeps in flight to one LM; placements made meanwhile join the next.
    lm_requests_in_flight: int = 1
    # Task events an LM holds while RabbitMQ cannot take them; at this many it refuses new
    # work (`lm_backlogged`) until half have left.
    lm_task_event_outbox: int = 20_000

    def __post_init__(self) -> None:
        _int(self.gm_backlog_tasks, "limits.gm_backlog_tasks", minimum=1)
        _int(self.lm_requests_in_flight, "limits.lm_requests_in_flight", minimum=1)
        _int(self.lm_task_event_outbox, "limits.lm_task_event_outbox", minimum=2)


@dataclass(frozen=True, slots=True)
class LMConfig:
    id: str
    nodes: tuple[NodeSpec, ...]
    # The machine profile generated nodes were drawn from ("random" already resolved), so
    # logs can say which cluster an LM stands for; None for an explicit node list.
    profile: str | None = None

    @property
    def workers(self) -> tuple[str, ...]:
        """The worker agents of this LM, in the order their first node appears."""
        return tuple(dict.fromkeys(node.worker for node in self.nodes))


@dataclass(frozen=True, slots=True)
class Federation:
    """The whole federation as configured; checks its cross-references when built."""

    gms: tuple[str, ...]
    lms: tuple[LMConfig, ...]
    queues: tuple[UserQueue, ...]
    timing: Timing = field(default_factory=Timing)
    policies: Policies = field(default_factory=Policies)
    limits: Limits = field(default_factory=Limits)
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS
    seed: int = 0
    # Lookups built once; the topologies (bit-vectors) are built on first use, because an LM
    # service needs only its own and a GM needs them all.
    _lm_by_id: dict[str, LMConfig] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _worker_lm: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _worker_nodes: dict[str, list[NodeSpec]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _queue_gm: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _topologies: dict[str, ClusterTopology] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _int(self.num_constraints, "num_constraints", minimum=1)
        _int(self.seed, "seed")
        self._check_gms()
        self._check_lms()
        self._check_queues()

    # -- checks (each fills the lookups it vouches for) ------------------------------------

    def _check_gms(self) -> None:
        if not self.gms:
            raise InvalidInput("gms", "the federation needs at least one GM")
        _unique_ids(self.gms, "gms")

    def _check_lms(self) -> None:
        if not self.lms:
            raise InvalidInput("lms", "the federation needs at least one LM")
        node_owner: dict[str, str] = {}
        for i, lm in enumerate(self.lms):
            where = f"lms[{i}]"
            _identifier(lm.id, f"{where}.id")
            if lm.id in self._lm_by_id:
                raise InvalidInput(f"{where}.id", f"duplicate LM id {lm.id!r}")
            self._lm_by_id[lm.id] = lm
            if not lm.nodes:
                raise InvalidInput(f"{where}.nodes", "an LM needs at least one node")
            for k, node in enumerate(lm.nodes):
                self._check_node(node, lm.id, f"{where}.nodes[{k}]", node_owner)

    def _check_node(
        self, node: NodeSpec, lm: str, where: str, node_owner: dict[str, str]
    ) -> None:
        _identifier(node.node_id, f"{where}.id")
        if node.node_id in node_owner:
            raise InvalidInput(
                f"{where}.id",
                f"duplicate node id {node.node_id!r} (already in LM {node_owner[node.node_id]!r})",
            )
        node_owner[node.node_id] = lm
        if node.lm != lm:
            raise InvalidInput(f"{where}.lm", f"{node.lm!r} is not its LM {lm!r}")
        _identifier(node.worker, f"{where}.worker")
        owner = self._worker_lm.setdefault(node.worker, lm)
        if owner != lm:
            raise InvalidInput(
                f"{where}.worker",
                f"worker {node.worker!r} already belongs to LM {owner!r}: a worker agent "
                "reports to exactly one LM",
            )
        self._worker_nodes.setdefault(node.worker, []).append(node)
        _int(node.capacity.cpu_m, f"{where}.cpu_m", minimum=1)
        _int(node.capacity.mem_mib, f"{where}.mem_mib", minimum=1)
        for constraint in sorted(node.constraints, key=repr):
            if not (_is_int(constraint) and 0 <= constraint < self.num_constraints):
                raise InvalidInput(
                    f"{where}.constraints",
                    f"unknown constraint id {constraint!r} "
                    f"(ids are 0..{self.num_constraints - 1})",
                )

    def _check_queues(self) -> None:
        if not self.queues:
            raise InvalidInput("queues", "the federation needs at least one user queue")
        known = set(self.gms)
        names: set[str] = set()
        for i, queue in enumerate(self.queues):
            where = f"queues[{i}]"
            _identifier(queue.name, f"{where}.name")
            if queue.name in names:  # the second use is the mistake: name it, not the first
                raise InvalidInput(f"{where}.name", f"duplicate queue {queue.name!r}")
            names.add(queue.name)
            if not _is_number(queue.share):
                raise InvalidInput(f"{where}.share", f"must be a number, got {queue.share!r}")
            if queue.gm not in known:
                raise InvalidInput(
                    f"{where}.gm", f"unknown GM {queue.gm!r} (known: {', '.join(self.gms)})"
                )
        validate_queues(self.queues)  # shares in (0, 1], summing to at most 1
        self._queue_gm.update((queue.name, queue.gm) for queue in self.queues)
        served = set(self._queue_gm.values())
        for j, gm in enumerate(self.gms):
            # Jobs reach a GM only through the queues it serves: a GM without one would
            # hold a partition of every LM and never accept a job to place in it.
            if gm not in served:
                raise InvalidInput(
                    f"gms[{j}]", f"GM {gm!r} serves no queue and could accept no job; "
                    "give it a [[queues]] entry or remove it"
                )

    # -- what the drivers ask ------------------------------------------------------------------

    def lm(self, lm_id: str) -> LMConfig:
        try:
            return self._lm_by_id[lm_id]
        except KeyError:
            raise InvalidInput("lm_id", _unknown("LM", lm_id, self._lm_by_id)) from None

    def topology(self, lm_id: str) -> ClusterTopology:
        """One LM's topology (cached): what its LM service and a GM's view are built on."""
        topology = self._topologies.get(lm_id)
        if topology is None:
            lm = self.lm(lm_id)
            topology = ClusterTopology(lm.id, lm.nodes, self.gms, self.num_constraints)
            self._topologies[lm_id] = topology
        return topology

    def topologies(self) -> list[ClusterTopology]:
        """Every LM's topology, in file order (cached; the list itself is a fresh copy)."""
        return [self.topology(lm.id) for lm in self.lms]

    def gm_config(self, gm_id: str, epoch: int = 0) -> GMConfig:
        if gm_id not in self.gms:
            raise InvalidInput("gm_id", _unknown("GM", gm_id, self.gms))
        policies = self.policies
        # Only slearn takes options; fifo's constructor refuses any.
        options = policies.slearn.as_options() if policies.job == "slearn" else {}
        return GMConfig(
            gm_id=gm_id,
            queues=self.queues,
            job_policy=policies.job,
            job_policy_options=options,
            fairness=policies.fairness,
            best_fit=policies.placement == "best_fit",
            work_conserving=policies.work_conserving,
            lm_timeout=self.timing.lm_timeout,
            attempt_grace=self.timing.attempt_grace,
            num_constraints=self.num_constraints,
            epoch=epoch,
            lm_window=self.limits.lm_requests_in_flight,
            # Each GM its own stream (pilot choices), still fixed by the file's seed.
            seed=derived_seed(self.seed, "gm", gm_id),
        )

    def workers(self) -> dict[str, str]:
        """Worker id -> the LM it reports to."""
        return dict(self._worker_lm)

    def worker_nodes(self, worker_id: str) -> list[NodeSpec]:
        nodes = self._worker_nodes.get(worker_id)
        if nodes is None:
            raise InvalidInput("worker_id", _unknown("worker", worker_id, self._worker_nodes))
        return list(nodes)

    def queue_gm(self, user: str) -> str:
        """The GM that serves `user`'s queue: where that user's jobs are submitted."""
        try:
            return self._queue_gm[user]
        except KeyError:
            raise InvalidInput("user", _unknown("user queue", user, self._queue_gm)) from None


# -- parsing -----------------------------------------------------------------------------------

_TOP_KEYS = ("seed", "num_constraints", "gms", "timing", "limits", "policies", "queues",
             "lms")
_POLICY_KEYS = ("job", "fairness", "placement", "local_queue", "work_conserving", "slearn")
_QUEUE_KEYS = ("name", "share", "gm")
_LM_KEYS = ("id", "nodes")
_BLOCK_KEYS = ("count", "cpu_m", "mem_mib", "workers", "profile")
_NODE_KEYS = ("id", "worker", "cpu_m", "mem_mib", "constraints")


def load_federation(text: str, source: str = "<text>") -> Federation:
    """Parse and check a federation file's text; `source` names it in syntax errors."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message carries the line and column
        raise InvalidInput(source, f"TOML syntax error: {exc}") from None
    _check_keys(document, "", _TOP_KEYS)
    seed = _int(document.get("seed", 0), "seed")
    num_constraints = _int(
        document.get("num_constraints", DEFAULT_NUM_CONSTRAINTS), "num_constraints", minimum=1
    )
    # Parsed in the order the file reads, so the first error reported is the first in it.
    gms = tuple(_string(gm, f"gms[{j}]") for j, gm in enumerate(_array(document, "gms", "")))
    timing_table = _table(document.get("timing", {}), "timing")
    _check_keys(timing_table, "timing", Timing.__dataclass_fields__)
    timing = Timing(**timing_table)
    limits_table = _table(document.get("limits", {}), "limits")
    _check_keys(limits_table, "limits", Limits.__dataclass_fields__)
    limits = Limits(**limits_table)
    policies = _parse_policies(_table(document.get("policies", {}), "policies"))
    queues = tuple(
        _parse_queue(_table(item, f"queues[{i}]"), f"queues[{i}]")
        for i, item in enumerate(_array(document, "queues", ""))
    )
    lms = tuple(
        _parse_lm(_table(item, f"lms[{i}]"), f"lms[{i}]", seed, num_constraints)
        for i, item in enumerate(_array(document, "lms", ""))
    )
    return Federation(
        gms=gms,
        lms=lms,
        queues=queues,
        timing=timing,
        policies=policies,
        limits=limits,
        num_constraints=num_constraints,
        seed=seed,
    )


def _parse_policies(table: Mapping[str, Any]) -> Policies:
    _check_keys(table, "policies", _POLICY_KEYS)
    slearn = _table(table.get("slearn", {}), "policies.slearn")
    _check_keys(slearn, "policies.slearn", SLearnOptions.__dataclass_fields__)
    values = {key: value for key, value in table.items() if key != "slearn"}
    for key in ("job", "fairness", "placement", "local_queue"):
        if key in values:
            _string(values[key], f"policies.{key}")
    return Policies(**values, slearn=SLearnOptions(**slearn))


def _parse_queue(table: Mapping[str, Any], where: str) -> UserQueue:
    _check_keys(table, where, _QUEUE_KEYS)
    return UserQueue(
        name=_string(_required(table, "name", where), f"{where}.name"),
        share=_required(table, "share", where),  # range and sum: Federation checks them
        gm=_string(_required(table, "gm", where), f"{where}.gm"),
    )


def _parse_lm(
    table: Mapping[str, Any], where: str, seed: int, num_constraints: int
) -> LMConfig:
    _check_keys(table, where, _LM_KEYS)
    lm_id = _identifier(_required(table, "id", where), f"{where}.id")
    nodes = _required(table, "nodes", where)
    if isinstance(nodes, dict):
        return _generate_lm(lm_id, nodes, f"{where}.nodes", seed, num_constraints)
    if isinstance(nodes, list):
        return LMConfig(
            lm_id,
            tuple(_parse_node(lm_id, item, f"{where}.nodes[{k}]") for k, item in enumerate(nodes)),
        )
    raise InvalidInput(
        f"{where}.nodes",
        "must be a table { count = ..., cpu_m = ..., mem_mib = ... } or [[lms.nodes]] entries",
    )


def _parse_node(lm_id: str, item: Any, where: str) -> NodeSpec:
    table = _table(item, where)
    _check_keys(table, where, _NODE_KEYS)
    constraints = table.get("constraints", [])
    if not isinstance(constraints, list):
        raise InvalidInput(f"{where}.constraints", "must be an array of constraint ids")
    for constraint in constraints:
        _int(constraint, f"{where}.constraints")
    if len(set(constraints)) != len(constraints):
        raise InvalidInput(f"{where}.constraints", f"repeats an id: {constraints}")
    return NodeSpec(
        node_id=_string(_required(table, "id", where), f"{where}.id"),
        lm=lm_id,
        worker=_string(_required(table, "worker", where), f"{where}.worker"),
        capacity=Resources(
            _int(_required(table, "cpu_m", where), f"{where}.cpu_m", minimum=1),
            _int(_required(table, "mem_mib", where), f"{where}.mem_mib", minimum=1),
        ),
        constraints=frozenset(constraints),  # range: Federation checks it
    )


def _generate_lm(
    lm_id: str, block: Mapping[str, Any], where: str, seed: int, num_constraints: int
) -> LMConfig:
    _check_keys(block, where, _BLOCK_KEYS)
    count = _int(_required(block, "count", where), f"{where}.count", minimum=1)
    cpu_m = _int(_required(block, "cpu_m", where), f"{where}.cpu_m", minimum=1)
    mem_mib = _int(_required(block, "mem_mib", where), f"{where}.mem_mib", minimum=1)
    workers = _int(block.get("workers", 1), f"{where}.workers", minimum=1)
    if workers > count:
        raise InvalidInput(
            f"{where}.workers", f"{workers} workers for {count} nodes would leave a worker idle"
        )
    # Default A: the one profile backed by public numbers.
    profile = _string(block.get("profile", "A"), f"{where}.profile")
    if profile != RANDOM_PROFILE and profile not in MACHINE_PROFILES:
        known = ", ".join((*PROFILE_NAMES, RANDOM_PROFILE))
        raise InvalidInput(f"{where}.profile", f"unknown profile {profile!r} (known: {known})")
    nodes, resolved = generate_nodes(
        lm_id, count, Resources(cpu_m, mem_mib), workers, profile, seed, num_constraints
    )
    return LMConfig(lm_id, nodes, resolved)


def generate_nodes(
    lm_id: str,
    count: int,
    capacity: Resources,
    workers: int,
    profile: str,
    seed: int,
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS,
) -> tuple[tuple[NodeSpec, ...], str]:
    """An LM's generated nodes and the profile they were drawn from.

    The draws come from one `random.Random` per LM seeded from (seed, LM id): the same file
    gives the same nodes in every process, and adding an LM leaves the others' nodes alone.
    `random` first picks the profile from that stream, as the paper picks a cluster per LM.
    Constraint ids past the profile's 21 are on no generated node.
    """
    rng = random.Random(derived_seed(seed, "lm", lm_id))
    if profile == RANDOM_PROFILE:
        profile = rng.choice(PROFILE_NAMES)
    percent = MACHINE_PROFILES[profile][:num_constraints]
    nodes = tuple(
        NodeSpec(
            node_id=f"{lm_id}/n{i}",
            lm=lm_id,
            worker=f"{lm_id}/w{i % workers}",
            capacity=capacity,
            constraints=machine_constraints(rng, percent),
        )
        for i in range(count)
    )
    return nodes, profile


def derived_seed(seed: int, kind: str, name: str) -> int:
    """A 64-bit seed from the file's seed and a component's name, the same in every process.

    Hashing (not `hash()`, which varies per process) keeps streams of different components
    apart while one number in the file still fixes them all.
    """
    digest = hashlib.sha256(f"{seed}/{kind}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# -- small checks --------------------------------------------------------------------------------


def _check_keys(table: Mapping[str, Any], where: str, known: Sequence[str] | Mapping) -> None:
    unknown = [key for key in table if key not in known]
    if not unknown:
        return
    first = unknown[0]
    hint = difflib.get_close_matches(first, list(known), n=1)
    did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
    raise InvalidInput(
        f"{where}.{first}" if where else first,
        f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
        f"(known: {', '.join(known)}){did_you_mean}",
    )


def _required(table: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in table:
        raise InvalidInput(f"{where}.{key}" if where else key, "is required")
    return table[key]


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(where, f"must be a table, got {value!r}")
    return value


def _array(table: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = _required(table, key, where)
    if not isinstance(value, list):
        raise InvalidInput(f"{where}.{key}" if where else key, f"must be an array, got {value!r}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(where, f"must be a string, got {value!r}")
    return value


def _identifier(value: Any, where: str) -> str:
    """Ids end up in URLs, broker queue names and log lines: no empties, no whitespace."""
    _string(value, where)
    if not value or any(ch.isspace() for ch in value):
        raise InvalidInput(where, f"must be a non-empty id without whitespace, got {value!r}")
    return value


def _unique_ids(ids: Sequence[Any], where: str) -> None:
    seen: set[str] = set()
    for j, value in enumerate(ids):
        _identifier(value, f"{where}[{j}]")
        if value in seen:
            raise InvalidInput(f"{where}[{j}]", f"duplicate id {value!r}")
        seen.add(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _int(value: Any, where: str, minimum: int | None = None) -> int:
    if not _is_int(value):
        raise InvalidInput(where, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(where, f"must be at least {minimum}, got {value}")
    return value


def _positive_number(value: Any, where: str) -> float:
    if not (_is_number(value) and value > 0):
        raise InvalidInput(where, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _known_name(value: Any, where: str, known: Sequence[str] | Mapping) -> None:
    if not isinstance(value, str) or value not in known:
        names = ", ".join(sorted(known))
        raise InvalidInput(where, f"unknown policy {value!r} (known: {names})")


def _unknown(kind: str, value: str, known: Sequence[str] | Mapping) -> str:
    return f"unknown {kind} {value!r} (known: {', '.join(known)})"
