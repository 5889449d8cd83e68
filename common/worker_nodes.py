"""One node of a worker: its free resources, the placements running there, its local queue.

The worker (common/worker.py) decides what starts, waits and ends; a `NodeState` keeps the
node's books straight as it does: resources taken on a start and given back on an end, and
which queued placements the free resources take now. `build_nodes` makes a worker's nodes
from their specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.errors import InvalidInput, InvariantViolated
from common.models import validate_node
from common.resources import ZERO, Resources
from common.speed import NodeSpeed

if TYPE_CHECKING:
    from collections.abc import Sequence

    from common.messages import Placement
    from common.models import NodeSpec
    from common.policies.local_queue import LocalQueue, LocalQueueOptions
    from common.speed import SpeedModel


@dataclass(slots=True)
class NodeState:
    spec: NodeSpec
    # free resources as two numbers, not a `Resources`: a frozen pair made anew at every
    # start and end of a task was a twentieth of the worker's cost in a 10,000-node run
    free_cpu: int
    free_mem: int
    running: dict[str, Placement]
    queue: LocalQueue
    speed: NodeSpeed | None = None  # its service rate over time, if the federation varies it

    @property
    def free(self) -> Resources:
        return Resources(self.free_cpu, self.free_mem)

    def fits(self, demand: Resources) -> bool:
        return demand.cpu_m <= self.free_cpu and demand.mem_mib <= self.free_mem

    def take(self, placement: Placement) -> None:
        """The placement starts here: it holds its demand until `give_back`."""
        demand = placement.task.demand
        self.free_cpu -= demand.cpu_m
        self.free_mem -= demand.mem_mib
        self.running[placement.attempt_id] = placement

    def give_back(self, placement: Placement) -> None:
        """The placement no longer runs here (ended or suspended): its demand is free."""
        del self.running[placement.attempt_id]
        demand = placement.task.demand
        self.free_cpu += demand.cpu_m
        self.free_mem += demand.mem_mib

    def startable(self) -> list[Placement]:
        """The queued placements that fit the free resources together, in queue order; one
        that does not fit is skipped. They stay queued: the caller takes them out."""
        chosen: list[Placement] = []
        free_cpu, free_mem = self.free_cpu, self.free_mem
        for placement in self.queue:
            if free_cpu <= 0 or free_mem <= 0:
                break  # every demand is positive in both kinds: nothing more can fit
            demand = placement.task.demand
            if demand.cpu_m <= free_cpu and demand.mem_mib <= free_mem:
                chosen.append(placement)
                free_cpu -= demand.cpu_m
                free_mem -= demand.mem_mib
        return chosen

    def validate(self) -> None:
        """Raise `InvariantViolated` if the node is over-committed, its free resources and
        what runs do not add up to its capacity, or a queued placement fits."""
        node_id, capacity = self.spec.node_id, self.spec.capacity
        held = ZERO
        for placement in self.running.values():
            held = held + placement.task.demand
        if not held.fits_in(capacity):
            raise InvariantViolated(f"node {node_id}: running {held} > {capacity}")
        if self.free_cpu < 0 or self.free_mem < 0:
            raise InvariantViolated(f"node {node_id}: negative free {self.free}")
        if held + self.free != capacity:
            raise InvariantViolated(f"node {node_id}: free {self.free} + running {held} != "
                                    f"{capacity}")
        # work conservation: a queued task that fits now should have been started
        for placement in self.queue:
            if self.fits(placement.task.demand):
                raise InvariantViolated(
                    f"node {node_id}: queued {placement.attempt_id} fits {self.free}")


def build_nodes(worker_id: str, nodes: Sequence[NodeSpec], queue_class: type[LocalQueue],
                queue_options: LocalQueueOptions, speed: SpeedModel | None,
                speed_seed: int) -> dict[str, NodeState]:
    """The worker's nodes by id, each with an empty local queue of `queue_class` made with
    `queue_options` and, if the federation varies speed, its own speed process (seeded by
    `speed_seed` and its id, so every driver draws the same one); `InvalidInput` for a node
    that is not this worker's."""
    built: dict[str, NodeState] = {}
    for index, node in enumerate(nodes):
        validate_node(node)
        if node.node_id in built:
            raise InvalidInput(f"nodes[{index}].node_id", f"duplicate {node.node_id!r}")
        if node.worker != worker_id:
            raise InvalidInput(
                f"nodes[{index}].worker", f"{node.worker!r} is not this worker {worker_id!r}"
            )
        built[node.node_id] = NodeState(
            node, node.capacity.cpu_m, node.capacity.mem_mib, {},
            queue_class(options=queue_options),
            None if speed is None else NodeSpeed(speed, f"{speed_seed}/{node.node_id}"))
    return built
