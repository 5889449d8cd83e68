"""One LM's cluster as bit-vectors: the static topology and the dynamic resource state.

Data layout (STYLE guideline 7): attribute-major. For each constraint id there is one
`bitarray` over all nodes of the LM, and one ownership vector per GM marks that GM's
partition. A partition's constraint vector is therefore `constraint & owned[gm]`: we keep
the LM-wide vectors because a repartition then touches no vector at all (the requested
resources become a logical node of the requester; see `common/lm.py`).

Matching a task is the paper's operation: AND the vectors of its constraints with the
partition and availability vectors, then check resource fit on the surviving nodes. The AND
of its constraint vectors is static and cached per constraint set, so a placement costs
two ANDs and a short scan.

`ClusterState` is used twice: the LM holds the truth in one, every GM holds a possibly
stale copy per LM (its view), refreshed from snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bitarray import bitarray, frozenbitarray

from common.errors import InvalidInput
from common.models import DEFAULT_NUM_CONSTRAINTS, NodeSpec, validate_node


class ClusterTopology:
    """What never changes while an LM lives: its nodes, capacities, constraints, partitions."""

    def __init__(
        self,
        lm: str,
        nodes: Sequence[NodeSpec],
        gms: Sequence[str],
        num_constraints: int = DEFAULT_NUM_CONSTRAINTS,
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
        self.owner: tuple[int, ...] = initial_partition(size, len(self.gms))
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
        self._feasible_cache: dict[tuple[frozenset[int], int, int], bool] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def mask_for(self, constraints: frozenset[int]) -> frozenbitarray:
        """Nodes that satisfy every constraint in the set (cached: the set is the shape)."""
        mask = self._mask_cache.get(constraints)
        if mask is None:
            vector = bitarray(self._all)
            for constraint in constraints:
                if not 0 <= constraint < self.num_constraints:
                    raise InvalidInput("constraints", f"unknown constraint id {constraint!r}")
                vector &= self.constraint_vectors[constraint]
            mask = self._mask_cache[constraints] = frozenbitarray(vector)
        return mask

    def can_ever_run(self, constraints: frozenset[int], cpu_m: int, mem_mib: int) -> bool:
        """Whether some node here satisfies the constraints and is large enough, if empty."""
        key = (constraints, cpu_m, mem_mib)
        answer = self._feasible_cache.get(key)
        if answer is None:
            answer = any(
                self.cap_cpu[i] >= cpu_m and self.cap_mem[i] >= mem_mib
                for i in self.mask_for(constraints).search(1)
            )
            self._feasible_cache[key] = answer
        return answer


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
    running: tuple[RunningInfo, ...]

    @property
    def version(self) -> tuple[int, int]:
        return (self.epoch, self.seq)


class ClusterState:
    """Free resources and liveness of every node of one LM, with the availability vector.

    `available` has a bit set where the node is up and has some cpu and memory free: the
    vector the match ANDs; the fit check then compares exact numbers.
    """

    def __init__(self, topology: ClusterTopology) -> None:
        self.topology = topology
        self.free_cpu: list[int] = list(topology.cap_cpu)
        self.free_mem: list[int] = list(topology.cap_mem)
        size = len(topology)
        self.up = bitarray(size)
        self.up.setall(1)
        self.available = bitarray(size)
        self.available.setall(1)

    # -- changes ----------------------------------------------------------------------------

    def take(self, i: int, cpu_m: int, mem_mib: int) -> None:
        cpu = self.free_cpu[i] = self.free_cpu[i] - cpu_m
        mem = self.free_mem[i] = self.free_mem[i] - mem_mib
        if cpu <= 0 or mem <= 0:
            self.available[i] = 0

    def give(self, i: int, cpu_m: int, mem_mib: int) -> None:
        cpu = self.free_cpu[i] = self.free_cpu[i] + cpu_m
        mem = self.free_mem[i] = self.free_mem[i] + mem_mib
        self.available[i] = cpu > 0 and mem > 0 and self.up[i]

    def set_up(self, i: int, is_up: bool) -> None:
        self.up[i] = is_up
        self.available[i] = is_up and self.free_cpu[i] > 0 and self.free_mem[i] > 0

    def fits(self, i: int, cpu_m: int, mem_mib: int) -> bool:
        return self.up[i] and self.free_cpu[i] >= cpu_m and self.free_mem[i] >= mem_mib

    def load(self, free_cpu: Sequence[int], free_mem: Sequence[int], up: bitarray) -> None:
        """Replace the dynamic state wholesale (a GM applying a fresher snapshot)."""
        self.free_cpu = list(free_cpu)
        self.free_mem = list(free_mem)
        self.up = bitarray(up)
        available = self.available = bitarray(self.up)
        for i in available.search(1):
            if self.free_cpu[i] <= 0 or self.free_mem[i] <= 0:
                available[i] = 0

    # -- the match ----------------------------------------------------------------------------

    def find(
        self,
        constraints: frozenset[int],
        partition: frozenbitarray,
        cpu_m: int,
        mem_mib: int,
        best_fit: bool = False,
    ) -> int:
        """Index of a node of `partition` that satisfies the constraints and fits, or -1.

        First fit returns the lowest-indexed fitting node; best fit the one that leaves the
        least room (normalised cpu plus memory left over), which packs tighter.
        """
        candidates = self.topology.mask_for(constraints) & partition
        candidates &= self.available
        free_cpu = self.free_cpu
        free_mem = self.free_mem
        if not best_fit:
            for i in candidates.search(1):
                if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                    return i
            return -1
        best, best_left = -1, float("inf")
        cap_cpu, cap_mem = self.topology.cap_cpu, self.topology.cap_mem
        for i in candidates.search(1):
            if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                left = (free_cpu[i] - cpu_m) / cap_cpu[i] + (free_mem[i] - mem_mib) / cap_mem[i]
                if left < best_left:
                    best, best_left = i, left
        return best
