"""One LM's cluster as bit-vectors: the static topology and the dynamic resource state.

Data layout: attribute-major. For each constraint id there is one `bitarray` over all nodes
of the LM, and one ownership vector per GM marks that GM's partition. A partition's
constraint vector is therefore `constraint & owned[gm]`: we keep the LM-wide vectors because
a repartition then touches no vector at all (the requested resources become a logical node
of the requester; see `common/lm.py`).

Matching a task is the paper's operation: AND the vectors of its constraints with the
partition and availability vectors, then check resource fit on the surviving nodes (the scan
is the placement policy's: `common/policies/placement.py`). The AND of its constraint vectors
is static and cached per constraint set, so a placement costs two ANDs and a short scan.
A task with a placement set (the nodes it may run on, `TaskSpec.nodes`) adds one more static
vector, the set's nodes, cached per set like a constraint set's.

`ClusterState` is used twice: the LM holds the truth in one, every GM holds a possibly
stale copy per LM (its view), refreshed from snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from itertools import chain

from bitarray import bitarray, frozenbitarray

from common.errors import InvalidInput
from common.models import DEFAULT_NUM_CONSTRAINTS, NodeSpec, validate_node
from common.policies.placement import FIRST_FIT, PlacementPolicy


class ClusterTopology:
    """What never changes while an LM lives: its nodes, capacities, constraints, partitions."""

    def __init__(
        self,
        lm: str,
        nodes: Sequence[NodeSpec],
        gms: Sequence[str],
        num_constraints: int = DEFAULT_NUM_CONSTRAINTS,
        owner: Sequence[int] | None = None,
    ) -> None:
        if not nodes:
            raise InvalidInput(f"lms[{lm}].nodes", "an LM needs at least one node")
        if not gms:
            raise InvalidInput("gms", "the federation needs at least one GM")
        ids = [node.node_id for node in nodes]
        if len(set(ids)) != len(ids):
            duplicate = next(i for i in ids if ids.count(i) > 1)
            raise InvalidInput(f"lms[{lm}].nodes", f"duplicate node id {duplicate!r}")
        for node in nodes:
            validate_node(node, num_constraints)
        self.lm = lm
        self.gms: tuple[str, ...] = tuple(gms)
        self.gm_index = {gm: i for i, gm in enumerate(self.gms)}
        self.num_constraints = num_constraints
        self.nodes: tuple[NodeSpec, ...] = tuple(nodes)
        self.node_ids: tuple[str, ...] = tuple(ids)
        self.index: dict[str, int] = {node_id: i for i, node_id in enumerate(ids)}
        self.cap_cpu: tuple[int, ...] = tuple(node.capacity.cpu_m for node in nodes)
        self.cap_mem: tuple[int, ...] = tuple(node.capacity.mem_mib for node in nodes)
        self.workers: tuple[str, ...] = tuple(node.worker for node in nodes)
        size = len(nodes)
        vectors = []
        for constraint in range(num_constraints):
            vector = bitarray(size)
            vector.setall(0)
            for i, node in enumerate(nodes):
                if constraint in node.constraints:
                    vector[i] = 1
            vectors.append(frozenbitarray(vector))
        self.constraint_vectors: tuple[frozenbitarray, ...] = tuple(vectors)
        self.owner: tuple[int, ...] = (
            initial_partition(size, len(self.gms)) if owner is None else tuple(owner)
        )
        owned = []
        for g in range(len(self.gms)):
            vector = bitarray(size)
            vector.setall(0)
            for i, owner in enumerate(self.owner):
                if owner == g:
                    vector[i] = 1
            owned.append(frozenbitarray(vector))
        self.owned: tuple[frozenbitarray, ...] = tuple(owned)
        self.not_owned: tuple[frozenbitarray, ...] = tuple(~vector for vector in owned)
        all_nodes = bitarray(size)
        all_nodes.setall(1)
        self._all = frozenbitarray(all_nodes)
        self._mask_cache: dict[frozenset[int], frozenbitarray] = {}
        self._partition_mask_cache: dict[tuple, frozenbitarray] = {}
        self._feasible_cache: dict[tuple, bool] = {}
        self._placement_cache: dict[frozenset[str], frozenbitarray] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    @classmethod
    def merge(cls, topologies: Sequence[ClusterTopology]) -> ClusterTopology:
        """One topology over the nodes of several LMs, in order: a GM's federation-wide view.

        Node ownership is carried over by GM name, so LMs may list the GMs in any order.
        Every per-node sequence is concatenated in C (`chain`, `zip`, `map`), not by a Python
        loop per node: a GM merges its whole federation (10,000 nodes) at each layout of its
        view, and the per-node generators were most of a layout's cost (cProfile of
        `megha simulate`).
        """
        gms: list[str] = []
        for topology in topologies:
            gms.extend(gm for gm in topology.gms if gm not in gms)
        gm_index = {gm: g for g, gm in enumerate(gms)}
        num_constraints = max(t.num_constraints for t in topologies)
        merged = cls.__new__(cls)  # built by concatenation: the per-LM vectors are done
        merged.lm = "federation"
        merged.gms = tuple(gms)
        merged.gm_index = gm_index
        merged.num_constraints = num_constraints
        merged.nodes = tuple(chain.from_iterable(t.nodes for t in topologies))
        merged.node_ids = tuple(chain.from_iterable(t.node_ids for t in topologies))
        merged.index = dict(zip(merged.node_ids, range(len(merged.node_ids)), strict=True))
        if len(merged.index) != len(merged.node_ids):
            raise InvalidInput("lms", "node ids must be unique across the federation")
        merged.cap_cpu = tuple(chain.from_iterable(t.cap_cpu for t in topologies))
        merged.cap_mem = tuple(chain.from_iterable(t.cap_mem for t in topologies))
        merged.workers = tuple(chain.from_iterable(t.workers for t in topologies))
        merged.constraint_vectors = tuple(
            frozenbitarray(_join(
                t.constraint_vectors[c] if c < t.num_constraints else _zeros(len(t))
                for t in topologies
            ))
            for c in range(num_constraints)
        )
        # each LM's GM positions, renumbered to the merged GMs' through a table per LM
        merged.owner = tuple(chain.from_iterable(
            map(tuple(gm_index[gm] for gm in t.gms).__getitem__, t.owner) for t in topologies))
        merged.owned = tuple(
            frozenbitarray(_join(
                t.owned[t.gm_index[gm]] if gm in t.gm_index else _zeros(len(t))
                for t in topologies
            ))
            for gm in gms
        )
        merged.not_owned = tuple(~vector for vector in merged.owned)
        merged._all = frozenbitarray(_join(t._all for t in topologies))
        merged._mask_cache = {}
        merged._partition_mask_cache = {}
        merged._feasible_cache = {}
        merged._placement_cache = {}
        return merged

    def mask_for(self, constraints: frozenset[int]) -> frozenbitarray:
        """Nodes that satisfy every constraint in the set (cached: the set is the shape)."""
        mask = self._mask_cache.get(constraints)
        if mask is None:
            vector = bitarray(self._all)
            for constraint in constraints:
                if not 0 <= constraint < self.num_constraints:
                    raise InvalidInput("constraints", f"unknown constraint id {constraint!r}")
                vector &= self.constraint_vectors[constraint]
            mask = frozenbitarray(vector)
            _bounded_put(self._mask_cache, constraints, mask)
        return mask

    def placement_mask(self, nodes: frozenset[str]) -> frozenbitarray:
        """The nodes of a placement set (cached per set). Ids not in this topology are left
        out: a set may name nodes of other LMs; `unknown_nodes` tells which are nowhere."""
        mask = self._placement_cache.get(nodes)
        if mask is None:
            vector = _zeros(len(self.nodes))
            index = self.index
            for node_id in nodes:
                i = index.get(node_id)
                if i is not None:
                    vector[i] = 1
            mask = frozenbitarray(vector)
            _bounded_put(self._placement_cache, nodes, mask)
        return mask

    def unknown_nodes(self, nodes: frozenset[str]) -> list[str]:
        """The ids of a placement set that are no node here, sorted."""
        return sorted(node_id for node_id in nodes if node_id not in self.index)

    def task_mask(self, constraints: frozenset[int],
                  nodes: frozenset[str] | None = None) -> frozenbitarray:
        """Nodes that satisfy the constraints and, with a placement set, belong to it."""
        if nodes is None:
            return self.mask_for(constraints)
        return self.mask_for(constraints) & self.placement_mask(nodes)

    def partition_mask(self, constraints: frozenset[int], g: int, internal: bool,
                       nodes: frozenset[str] | None = None) -> frozenbitarray:
        """Nodes satisfying the constraints (and in the placement set `nodes`, if any) in GM
        `g`'s partition (internal) or outside it."""
        key = (constraints, g, internal) if nodes is None else (constraints, g, internal, nodes)
        mask = self._partition_mask_cache.get(key)
        if mask is None:
            partition = self.owned[g] if internal else self.not_owned[g]
            mask = self.task_mask(constraints, nodes) & partition
            _bounded_put(self._partition_mask_cache, key, mask)
        return mask

    def can_ever_run(self, constraints: frozenset[int], cpu_m: int, mem_mib: int,
                     nodes: frozenset[str] | None = None) -> bool:
        """Whether some node here satisfies the constraints, belongs to the placement set
        `nodes` (if any) and is large enough, if empty. Takes a `TaskSpec.shape` unpacked."""
        key = (constraints, cpu_m, mem_mib, nodes)
        answer = self._feasible_cache.get(key)
        if answer is None:
            answer = any(
                self.cap_cpu[i] >= cpu_m and self.cap_mem[i] >= mem_mib
                for i in self.task_mask(constraints, nodes).search(1)
            )
            _bounded_put(self._feasible_cache, key, answer)
        return answer


MASK_CACHE_LIMIT = 8192


def _zeros(size: int) -> bitarray:
    vector = bitarray(size)
    vector.setall(0)
    return vector


def _join(vectors) -> bitarray:
    joined = bitarray()
    for vector in vectors:
        joined.extend(vector)
    return joined


def _bounded_put(cache: dict, key, value) -> None:
    """Constraint sets are many (2^21 possible): a cache that only grows would leak."""
    if len(cache) >= MASK_CACHE_LIMIT:
        cache.clear()
    cache[key] = value


def initial_partition(size: int, num_gms: int) -> tuple[int, ...]:
    """Contiguous, nearly equal blocks, one per GM, as in Megha's prototype."""
    return tuple(min(i * num_gms // size, num_gms - 1) for i in range(size))


@dataclass(frozen=True, slots=True)
class RunningInfo:
    """A running attempt as snapshots report it: enough for fairness to choose victims."""

    attempt_id: str
    node_index: int
    gm: str
    user: str
    cpu_m: int
    mem_mib: int
    logical: bool  # placed by repartition: its resources are a logical node of `gm`
    # waiting in its node's local queue (or suspended there): it holds no resources yet, so
    # it is neither usage nor a preemption victim
    queued: bool = False

    # Written out, not generated: made once per attempt (`_slot_setters` says why).
    def __init__(self, attempt_id: str, node_index: int, gm: str, user: str, cpu_m: int,
                 mem_mib: int, logical: bool, queued: bool = False) -> None:
        _set_info_attempt_id(self, attempt_id)
        _set_info_node_index(self, node_index)
        _set_info_gm(self, gm)
        _set_info_user(self, user)
        _set_info_cpu_m(self, cpu_m)
        _set_info_mem_mib(self, mem_mib)
        _set_info_logical(self, logical)
        _set_info_queued(self, queued)


@dataclass(frozen=True, slots=True)
class LMSnapshot:
    """An LM's full partition state at one (epoch, seq): heartbeats and replies carry it."""

    lm: str
    epoch: int
    seq: int
    topology: ClusterTopology
    free_cpu: tuple[int, ...]
    free_mem: tuple[int, ...]
    up: frozenbitarray
    # Heartbeats list every running attempt; replies to launches leave it out (None), so a
    # reply costs O(nodes), not O(running tasks). Views keep the last list they were given.
    running: tuple[RunningInfo, ...] | None
    # An in-process hint, never on the wire (a decoded snapshot has none): how far the LM's
    # change journal had come.
    changes: ChangeMark | None = field(default=None, compare=False, repr=False)
    # With local queues ([policies.local_queues] depth > 0): the nodes whose queue has room.
    # A node with queued attempts shows no free resources: what it frees goes to its queue.
    queue_room: frozenbitarray | None = None
    # What is derived from `running` once, for whoever reads it (`running_by_node`, ...).
    memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    # Written out, not generated: made per reply and heartbeat (`_slot_setters` says why).
    def __init__(self, lm: str, epoch: int, seq: int, topology: ClusterTopology,
                 free_cpu: tuple[int, ...], free_mem: tuple[int, ...], up: frozenbitarray,
                 running: tuple[RunningInfo, ...] | None, changes: ChangeMark | None = None,
                 queue_room: frozenbitarray | None = None) -> None:
        _set_snapshot_lm(self, lm)
        _set_snapshot_epoch(self, epoch)
        _set_snapshot_seq(self, seq)
        _set_snapshot_topology(self, topology)
        _set_snapshot_free_cpu(self, free_cpu)
        _set_snapshot_free_mem(self, free_mem)
        _set_snapshot_up(self, up)
        _set_snapshot_running(self, running)
        _set_snapshot_changes(self, changes)
        _set_snapshot_queue_room(self, queue_room)
        _set_snapshot_memo(self, {})

    @property
    def version(self) -> tuple[int, int]:
        return (self.epoch, self.seq)

    def changed_since(self, earlier: LMSnapshot) -> Sequence[int] | None:
        """Local indices of the nodes whose free resources or liveness may differ from
        `earlier` (an older snapshot of the same LM), or None if only a comparison of
        every node can tell."""
        if self.changes is None or earlier.changes is None:
            return None
        return self.changes.since(earlier.changes)

    def running_by_node(self) -> dict[int, list[RunningInfo]]:
        """`running` by local node index."""
        by_node = self.memo.get("by_node")
        if by_node is None:
            by_node = self.memo["by_node"] = {}
            for info in self.running or ():
                by_node.setdefault(info.node_index, []).append(info)
        return by_node

    def running_ids(self) -> frozenset[str]:
        ids = self.memo.get("ids")
        if ids is None:
            ids = self.memo["ids"] = frozenset(info.attempt_id for info in self.running or ())
        return ids

    def usage_by_user(self) -> dict[str, list[int]]:
        """Cpu and memory per user queue of `running`."""
        sums = self.memo.get("usage")
        if sums is None:
            sums = self.memo["usage"] = {}
            for info in self.running or ():
                if info.queued:
                    continue
                used = sums.get(info.user)
                if used is None:
                    sums[info.user] = [info.cpu_m, info.mem_mib]
                else:
                    used[0] += info.cpu_m
                    used[1] += info.mem_mib
        return sums

    def attempts_of(self, gm: str) -> Sequence[str]:
        """The ids of `gm`'s attempts in `running`."""
        return [info.attempt_id for info in self.running or () if info.gm == gm]


def _slot_setters(cls: type) -> tuple:
    """The setters of a slotted dataclass's fields, in their order, for its own `__init__`.

    A frozen dataclass's generated `__init__` sets each field with `object.__setattr__`, which
    finds the field's slot by name every time; calling the slot's own setter costs half as
    much (an `LMSnapshot` is made per reply and heartbeat, a `RunningInfo` per attempt: their
    generated `__init__`s were 1.5% of a 10,000-node `megha simulate`). The instances stay
    frozen: assigning an attribute still raises. Unpacking the setters into one name per
    field fails at import if a field is added and its `__init__` is not told."""
    return tuple(getattr(cls, f.name).__set__ for f in fields(cls))


(_set_info_attempt_id, _set_info_node_index, _set_info_gm, _set_info_user, _set_info_cpu_m,
 _set_info_mem_mib, _set_info_logical, _set_info_queued) = _slot_setters(RunningInfo)
(_set_snapshot_lm, _set_snapshot_epoch, _set_snapshot_seq, _set_snapshot_topology,
 _set_snapshot_free_cpu, _set_snapshot_free_mem, _set_snapshot_up, _set_snapshot_running,
 _set_snapshot_changes, _set_snapshot_queue_room,
 _set_snapshot_memo) = _slot_setters(LMSnapshot)


@dataclass(frozen=True, slots=True, eq=False)
class ChangeMark:
    """A position in an LM's change journal (`JournaledState.journal`)."""

    journal: list[int]
    end: int

    # Written out, not generated: made per change of an LM's journal (`_slot_setters`).
    def __init__(self, journal: list[int], end: int) -> None:
        _set_mark_journal(self, journal)
        _set_mark_end(self, end)

    def since(self, earlier: ChangeMark) -> Sequence[int] | None:
        if earlier.journal is not self.journal or earlier.end > self.end:
            return None  # another journal (rotated, or another incarnation): compare
        return set(self.journal[earlier.end:self.end])


_set_mark_journal, _set_mark_end = _slot_setters(ChangeMark)


class ClusterState:
    """Free resources and liveness of every node of one LM, with the availability vector.

    `available` has a bit set where the node is up and has at least `min_cpu` and
    `min_mem` free: the vector the match ANDs; the fit check then compares exact numbers.
    A GM keeps the thresholds at the smallest demand it has seen, so a node left with a
    sliver no task could use drops out of the vector instead of being scanned past by
    every later first-fit search (that scan grew to most of a decision's cost, measured
    in benchmarks/bench_core.py). Thresholds only go down, so no node a task fits on is
    ever hidden.
    """

    def __init__(self, topology: ClusterTopology, min_cpu: int = 1, min_mem: int = 1) -> None:
        self.topology = topology
        self.free_cpu: list[int] = list(topology.cap_cpu)
        self.free_mem: list[int] = list(topology.cap_mem)
        self.min_cpu = min_cpu
        self.min_mem = min_mem
        size = len(topology)
        self.up = bitarray(size)
        self.up.setall(1)
        self.available = bitarray(size)
        self._refresh_available(0, size)

    # -- changes ----------------------------------------------------------------------------

    def take(self, i: int, cpu_m: int, mem_mib: int) -> None:
        cpu = self.free_cpu[i] = self.free_cpu[i] - cpu_m
        mem = self.free_mem[i] = self.free_mem[i] - mem_mib
        if cpu < self.min_cpu or mem < self.min_mem:
            self.available[i] = 0

    def give(self, i: int, cpu_m: int, mem_mib: int) -> None:
        cpu = self.free_cpu[i] = self.free_cpu[i] + cpu_m
        mem = self.free_mem[i] = self.free_mem[i] + mem_mib
        self.available[i] = cpu >= self.min_cpu and mem >= self.min_mem and self.up[i]

    def set_up(self, i: int, is_up: bool) -> None:
        self.up[i] = is_up
        self.available[i] = (
            is_up and self.free_cpu[i] >= self.min_cpu and self.free_mem[i] >= self.min_mem
        )

    def lower_thresholds(self, cpu_m: int, mem_mib: int) -> None:
        """Make sure nodes that fit (cpu_m, mem_mib) count as available."""
        if cpu_m < self.min_cpu or mem_mib < self.min_mem:
            self.min_cpu = max(1, min(self.min_cpu, cpu_m))
            self.min_mem = max(1, min(self.min_mem, mem_mib))
            self._refresh_available(0, len(self.free_cpu))

    def _refresh_available(self, start: int, end: int) -> None:
        available, cpu, mem = self.available, self.free_cpu, self.free_mem
        available[start:end] = self.up[start:end]
        min_cpu, min_mem = self.min_cpu, self.min_mem
        for i in available.search(1, start, end):
            if cpu[i] < min_cpu or mem[i] < min_mem:
                available[i] = 0

    def fits(self, i: int, cpu_m: int, mem_mib: int) -> bool:
        return self.up[i] and self.free_cpu[i] >= cpu_m and self.free_mem[i] >= mem_mib

    def load(
        self, offset: int, free_cpu: Sequence[int], free_mem: Sequence[int], up: bitarray
    ) -> None:
        """Replace the dynamic state of nodes `offset..` (a GM applying an LM's snapshot)."""
        end = offset + len(free_cpu)
        self.free_cpu[offset:end] = free_cpu
        self.free_mem[offset:end] = free_mem
        self.up[offset:end] = up
        self._refresh_available(offset, end)

    def shift(self, offset: int, changed: Sequence[int], old_cpu: Sequence[int],
              new_cpu: Sequence[int], old_mem: Sequence[int], new_mem: Sequence[int],
              up: bitarray) -> None:
        """Move nodes `offset + i` (i in `changed`) by their snapshot's change from
        (old_cpu, old_mem) to (new_cpu, new_mem), and set their liveness to `up[i]`: what
        `load` would give when the state was the old snapshot less some reservations."""
        free_cpu, free_mem = self.free_cpu, self.free_mem
        is_up, available = self.up, self.available
        min_cpu, min_mem = self.min_cpu, self.min_mem
        # A node without reservations here is at its old snapshot's amount: it takes the new
        # snapshot's own int object, no new equal one, so the state shares the LM's few
        # objects (`JournaledState.give`), which cost less to count and to free than an int
        # made per change (2.5 -> 2.0 us a call in `megha simulate`).
        for i in changed:
            k = offset + i
            cpu, was = free_cpu[k], old_cpu[i]
            cpu = free_cpu[k] = new_cpu[i] if cpu == was else cpu + new_cpu[i] - was
            mem, was = free_mem[k], old_mem[i]
            mem = free_mem[k] = new_mem[i] if mem == was else mem + new_mem[i] - was
            alive = is_up[k] = up[i]
            available[k] = alive and cpu >= min_cpu and mem >= min_mem

    # -- the match ----------------------------------------------------------------------------

    def find(
        self,
        eligible: frozenbitarray,
        cpu_m: int,
        mem_mib: int,
        placement: PlacementPolicy = FIRST_FIT,
        start: int = 0,
    ) -> int:
        """Index of an `eligible` node (see `ClusterTopology.partition_mask`) that fits, or -1:
        the one `placement` picks among the available ones (`start`: see its policy)."""
        return placement.choose(self, eligible & self.available, cpu_m, mem_mib, start)


class JournaledState(ClusterState):
    """An LM's state that notes every node it changes, in order, in an append-only journal
    (an LM changes nodes only by `take`, `give` and `set_up`).

    A snapshot carries a `ChangeMark` (how far the journal had come), so a GM holding an
    older snapshot of the same LM finds the nodes changed since in O(changes) instead of
    comparing every node: a GM takes a snapshot with every reply and heartbeat, and that
    comparison was its largest cost at 10,000 nodes (benchmarks/bench_sim.py). When the
    journal grows past `limit` entries a mark starts a new one; views holding a mark of the
    old one compare once.
    """

    def __init__(self, topology: ClusterTopology, limit: int | None = None) -> None:
        super().__init__(topology)
        self.journal: list[int] = []
        self.limit = 16 * len(topology) + 1024 if limit is None else limit
        self._mark: ChangeMark | None = None  # the last `mark`

    def take(self, i: int, cpu_m: int, mem_mib: int) -> None:
        super().take(i, cpu_m, mem_mib)
        self.journal.append(i)

    def give(self, i: int, cpu_m: int, mem_mib: int) -> None:
        super().give(i, cpu_m, mem_mib)
        self.journal.append(i)
        # A node given everything back holds its capacity's own int objects, not equal new
        # ones, as it did at the start: each snapshot copies every node's free amounts, and
        # the copy counts a reference on each, which costs far less when they are a few
        # objects than one per node spread over memory (a 400-node copy: 4.4 -> 1.6 us, in
        # a slot-mode `megha simulate`, where every node is full or idle).
        free_cpu, free_mem, topology = self.free_cpu, self.free_mem, self.topology
        if free_cpu[i] == topology.cap_cpu[i]:
            free_cpu[i] = topology.cap_cpu[i]
        if free_mem[i] == topology.cap_mem[i]:
            free_mem[i] = topology.cap_mem[i]

    def set_up(self, i: int, is_up: bool) -> None:
        super().set_up(i, is_up)
        self.journal.append(i)

    def mark(self) -> ChangeMark:
        """The journal's position now: the same mark as last time while no change was noted
        since, so a snapshot maker can tell its last copies of the state are still true."""
        journal = self.journal
        if len(journal) > self.limit:
            journal = self.journal = []
        mark = self._mark
        if mark is None or mark.journal is not journal or mark.end != len(journal):
            mark = self._mark = ChangeMark(journal, len(journal))
        return mark
