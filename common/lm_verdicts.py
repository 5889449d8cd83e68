"""The LM's verdicts: each item a GM sends (a launch, a repartition, a preemption) checked
against the LM's truth, the first check that fails being the reason it is refused
(docs/architecture.md, Ownership and flows: Launch).

A verdict changes nothing; the LM (common/lm.py) acts on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.messages import RequestKind
from common.reasons import Reason

if TYPE_CHECKING:
    from common.cluster import ClusterTopology, JournaledState
    from common.lm_attempts import LMAttemptBook
    from common.lm_queues import NodeQueueBook
    from common.messages import Placement

# what a verdict on an item's node says when only its free resources are short: a preemption
# may still make room
_SHORT_OF_ROOM = frozenset({Reason.STALE_VIEW, Reason.QUEUED, Reason.QUEUE_FULL})

# read for every item: enum members looked up once (a descriptor call each on Python 3.11)
_LAUNCH, _REPARTITION = RequestKind.LAUNCH, RequestKind.REPARTITION
_LAUNCHED, _NOT_OWNER = Reason.LAUNCHED, Reason.NOT_OWNER


class Judge:
    """The checks of one LM. `refusal` is the LM's own reason to take no work now
    (recovering, backlogged), `queues` its local-queue book (None: no queues; given with each
    item, since an LM without local queues may open a book later)."""

    def __init__(self, topology: ClusterTopology, state: JournaledState,
                 attempts: LMAttemptBook, epoch: int) -> None:
        self.topology = topology
        self.state = state
        self.attempts = attempts
        self.epoch = epoch

    def launch(self, gm: str, kind: RequestKind, item: Placement, i: int, lm_epoch: int | None,
               refusal: Reason | None, queues: NodeQueueBook | None) -> Reason:
        """A launch or repartition of `item` on node i (-1: unknown) for `gm`."""
        attempts = self.attempts
        known = attempts.running.get(item.attempt_id)
        if known is not None:
            same = known.placement.node_id == item.node_id and known.placement.gm == gm
            return Reason.ALREADY_RUNNING if same else Reason.DUPLICATE
        if item.attempt_id in attempts.ended:
            return Reason.DUPLICATE
        if lm_epoch is not None and lm_epoch < self.epoch:
            # planned on an earlier incarnation, which may have run it before it died: its
            # ids are not remembered here, so only a placement made on this one is taken
            return Reason.LM_RESTARTED
        if refusal is not None:
            return refusal
        if i < 0:
            return Reason.UNKNOWN_NODE
        if not self.state.up[i]:
            return Reason.NODE_DOWN
        topology = self.topology
        owner = topology.gms[topology.owner[i]]
        if kind is _LAUNCH and owner != gm:
            return _NOT_OWNER
        if kind is _REPARTITION and owner == gm:
            return Reason.OWNED_BY_REQUESTER
        task = item.task
        if not task.constraints <= topology.nodes[i].constraints:
            return Reason.CONSTRAINT_MISMATCH
        demand = task.demand
        if ((queues is None or not queues.counts[i])
                and self.state.fits(i, demand.cpu_m, demand.mem_mib)):
            return _LAUNCHED
        if queues is None or kind is not _LAUNCH:
            # only a node's owner queues there: a repartition borrows room that is free now
            return Reason.STALE_VIEW
        return queues.verdict(i, demand)

    def preemption(self, gm: str, kind: RequestKind, item: Placement, victims: tuple[str, ...],
                   i: int, lm_epoch: int | None, refusal: Reason | None,
                   queues: NodeQueueBook | None) -> Reason:
        """Verify the victims against the truth, then the item as if they were gone."""
        if item.attempt_id in self.attempts.running or item.attempt_id in self.attempts.ended:
            return self.launch(gm, kind, item, i, None, refusal, queues)  # never applied twice
        if lm_epoch is not None and lm_epoch < self.epoch:
            return Reason.LM_RESTARTED  # its victims are of an earlier incarnation's
        if i >= 0 and queues is not None and queues.counts[i]:
            return Reason.QUEUE_FULL  # what the victims free would go to the node's queue
        freed_cpu = freed_mem = 0
        for victim in victims:
            attempt = self.attempts.running.get(victim)
            if attempt is None or attempt.node_index != i or attempt.queued:
                return Reason.VICTIM_GONE
            freed_cpu += attempt.placement.task.demand.cpu_m
            freed_mem += attempt.placement.task.demand.mem_mib
        reason = self.launch(gm, kind, item, i, None, refusal, queues)
        if reason not in _SHORT_OF_ROOM:
            return reason
        demand = item.task.demand
        if (self.state.free_cpu[i] + freed_cpu >= demand.cpu_m
                and self.state.free_mem[i] + freed_mem >= demand.mem_mib):
            return Reason.LAUNCHED
        return Reason.VICTIMS_INSUFFICIENT
