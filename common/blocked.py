"""What cannot be placed now, and when to look again: the GM's memo of blocked demands.

A *demand* is what a waiting task needs: its user queue and its shape (constraint set, cpu,
memory, placement set); tasks of one demand succeed or fail alike on one view. When a
scheduling pass finds no node for a demand (and no preemption for it), the demand is
*blocked*: later passes skip its tasks in O(1) instead of searching again. A blocked demand
is woken only by what could change the answer:

- capacity that matches: a node that may have gained room (the view's `gained` vector) and
  satisfies the demand's constraints, belongs to its placement set if it has one, and has
  room for it now;
- a new chance to preempt: the fairness policy finds a queue its user may take from (after a
  heartbeat brings new running lists, or a preemption settles).

So with thousands of tasks waiting on a full cluster, a snapshot costs one check per blocked
demand against the few nodes it changed, not one search per waiting task; the backlog
(`common/pending.py`) keeps which demands are ready, and a pass looks only at those. Demands
with a placement set are many (tasks with their data on different nodes are different
demands) and each can use only a few nodes, so they are filed under each node of their set:
a snapshot checks only those naming a node it changed.
"""

from __future__ import annotations

from collections.abc import Iterable

from bitarray import bitarray

from common.cluster import ClusterState, ClusterTopology
from common.job_queue import Shape
from common.reasons import Reason

Demand = tuple[str, Shape]  # (user queue, shape)
FEW_NODES = 8  # up to this many nodes gained room: checked one by one


class BlockedDemands:
    def __init__(self) -> None:
        self._blocked: dict[Demand, Reason] = {}
        # the blocked demands without a placement set, and those with one under each node id
        # of their set (dicts: insertion order, so a wake's order does not depend on hashes)
        self._anywhere: dict[Demand, None] = {}
        self._by_node: dict[str, dict[Demand, None]] = {}

    def __len__(self) -> int:
        return len(self._blocked)

    def __contains__(self, demand: Demand) -> bool:
        return demand in self._blocked

    def reason(self, demand: Demand) -> Reason | None:
        return self._blocked.get(demand)

    def block(self, demand: Demand, reason: Reason) -> None:
        if demand not in self._blocked:
            allowed = demand[1][3]
            if allowed is None:
                self._anywhere[demand] = None
            else:
                by_node = self._by_node
                for node_id in allowed:
                    named = by_node.get(node_id)
                    if named is None:
                        named = by_node[node_id] = {}
                    named[demand] = None
        self._blocked[demand] = reason

    def _unblock(self, demand: Demand) -> None:
        del self._blocked[demand]
        allowed = demand[1][3]
        if allowed is None:
            del self._anywhere[demand]
            return
        by_node = self._by_node
        for node_id in allowed:
            named = by_node[node_id]
            del named[demand]
            if not named:
                del by_node[node_id]

    def wake_all(self) -> list[Demand]:
        woken = list(self._blocked)
        self._blocked.clear()
        self._anywhere.clear()
        self._by_node.clear()
        return woken

    def wake_users(self, users: Iterable[str]) -> list[Demand]:
        """Look again at these users' demands (they may preempt now); the demands woken."""
        users = set(users)
        woken = [demand for demand in self._blocked if demand[0] in users]
        for demand in woken:
            self._unblock(demand)
        return woken

    def wake_by_capacity(self, gained: bitarray, topology: ClusterTopology | None,
                         state: ClusterState | None, reachable: bitarray | None) -> list[Demand]:
        """Unblock every demand that one of the `gained` nodes can take now; those woken."""
        if not self._blocked or topology is None or state is None or not gained.any():
            return []
        if len(gained) != len(topology):  # the view was laid out anew: everything may fit
            return self.wake_all()
        candidates = gained & state.available
        if reachable is not None:
            candidates &= reachable
        if not candidates.any():
            return []
        free_cpu, free_mem = state.free_cpu, state.free_mem
        if candidates.count() <= FEW_NODES:
            # usually a snapshot frees room on a node or two: test each blocked shape against
            # those nodes' constraint sets, not with a vector AND over the federation per shape
            # (a tenth of a saturated run with constraints, benchmarks/bench_sim.py)
            node_ids = topology.node_ids
            nodes = [(topology.nodes[i].constraints, free_cpu[i], free_mem[i], node_ids[i])
                     for i in candidates.search(1)]

            def room_for(shape: Shape) -> bool:
                constraints, cpu_m, mem_mib, allowed = shape
                return any(cpu >= cpu_m and mem >= mem_mib and constraints <= offered
                           and (allowed is None or node_id in allowed)
                           for offered, cpu, mem, node_id in nodes)
        else:
            def room_for(shape: Shape) -> bool:
                constraints, cpu_m, mem_mib, allowed = shape
                return any(free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib
                           for i in (topology.task_mask(constraints, allowed)
                                     & candidates).search(1))
        woken = []
        fits_by_shape: dict[Shape, bool] = {}
        for demand in self._candidates(candidates, topology.node_ids):
            shape = demand[1]
            fits = fits_by_shape.get(shape)
            if fits is None:
                fits = fits_by_shape[shape] = room_for(shape)
            if fits:
                woken.append(demand)
        for demand in woken:
            self._unblock(demand)
        return woken

    def _candidates(self, nodes: bitarray, node_ids: tuple[str, ...]) -> Iterable[Demand]:
        """The blocked demands `nodes` may take: those without a placement set, and those
        whose set names one of them."""
        by_node = self._by_node
        if not by_node:
            return self._anywhere
        demands = dict(self._anywhere)
        for i in nodes.search(1):
            named = by_node.get(node_ids[i])
            if named is not None:
                demands.update(named)
        return demands
