"""Where a GM's task could go: the placement search, as steps that each return a match or
nothing, and the same steps in counting mode for `explain`.

The steps, in order (Megha's GM): a node of this GM's own partitions (`internal`, a plain
launch), a node of another GM's partitions (`external`, a repartition request the owning LM
may refuse), and, if the fairness policy lets the task's queue take from a queue above its
share, a node where preempting some of that queue's attempts makes room (`preempt`). Each
search starts after the LM that took the last task of its kind (round-robin over LMs) and
scans with the placement policy (first fit or best fit).

The placer also keeps the preemptions this GM asked for and the LMs have not yet shown the
outcome of (`common/usage.py`): their victims stay claimed and they adjust the usage estimate
the fairness policy decides on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from common.cluster import RunningInfo
from common.messages import RequestKind
from common.models import TaskSpec
from common.policies.fairness import FairnessPolicy, Usage, choose_victims
from common.policies.placement import PlacementPolicy
from common.usage import PendingPreemption, estimate_usage
from common.view import FederationView, LMSlot


@dataclass(slots=True)
class Match:
    kind: RequestKind  # LAUNCH (internal, or a preemption) or REPARTITION (external)
    slot: LMSlot
    index: int  # the node, within the LM
    victims: tuple[RunningInfo, ...] | None = None  # a preemption: these make room

    def where(self) -> str:
        return f"{self.slot.lm}/{self.slot.topology.node_ids[self.index]}"


class Placer:
    def __init__(self, gm: str, view: FederationView, fairness: FairnessPolicy,
                 placement: PlacementPolicy) -> None:
        self.gm = gm
        self.view = view
        self.fairness = fairness  # whether and from whom to preempt
        self.placement = placement  # policies/placement.py: which fitting node
        self.preemptions: dict[str, PendingPreemption] = {}  # by request id, until settled
        self._next_internal = 0  # round-robin: the LM position the next search starts at
        self._next_external = 0
        self._pass_usage: Usage | None = None  # usage, computed once per pass if needed

    # -- the steps -------------------------------------------------------------------------------

    def place(self, spec: TaskSpec, user: str, allow_preempt: bool) -> Match | None:
        return (self.internal(spec) or self.external(spec)
                or (self.preempt(spec, user) if allow_preempt else None))

    def internal(self, spec: TaskSpec, advance: bool = True) -> Match | None:
        return self._search(spec, True, advance)

    def external(self, spec: TaskSpec, advance: bool = True) -> Match | None:
        return self._search(spec, False, advance)

    def _search(self, spec: TaskSpec, internal: bool, advance: bool) -> Match | None:
        """Round-robin over LMs, starting after the LM that took the last such task."""
        start = self._next_internal if internal else self._next_external
        k, i = self.view.find(spec.constraints, spec.demand.cpu_m, spec.demand.mem_mib, internal,
                              start, self.placement)
        if k < 0:
            return None
        if advance and internal:
            self._next_internal = k + 1
        elif advance:
            self._next_external = k + 1
        kind = RequestKind.LAUNCH if internal else RequestKind.REPARTITION
        return Match(kind, self.view.order[k], i)

    def preempt(self, spec: TaskSpec, user: str) -> Match | None:
        """A node where preempting attempts of queues above their share makes room, if the
        fairness policy lets `user` take from them and they stay at or above their share."""
        if not self.fairness.preempts:
            return None
        total_cpu, total_mem = self.view.capacity
        usage = self._pass_usage
        if usage is None:
            usage = self._pass_usage = self.usage()
        demand = (spec.demand.cpu_m / total_cpu, spec.demand.mem_mib / total_mem)
        victim_queues = self.fairness.victim_queues(user, usage, demand)
        if not victim_queues:
            return None
        claimed = {v for p in self.preemptions.values() for v in p.victim_ids}
        for victim_queue in victim_queues:
            for slot in self.view.order:
                if not slot.reachable:
                    continue
                found = self._victims_in(slot, spec, victim_queue, claimed)
                if found is None:
                    continue
                i, victims = found
                if self.fairness.may_take(victim_queue, usage, self._fractions(victims)):
                    return Match(RequestKind.LAUNCH, slot, i, victims)
        return None

    def _fractions(self, victims: tuple[RunningInfo, ...]) -> tuple[float, float]:
        total_cpu, total_mem = self.view.capacity
        return (sum(info.cpu_m for info in victims) / total_cpu,
                sum(info.mem_mib for info in victims) / total_mem)

    def _victims_in(self, slot: LMSlot, spec: TaskSpec, victim_queue: str, claimed: set[str]):
        free_cpu, free_mem, up = self.view.free_of(slot)
        mask = slot.topology.mask_for(spec.constraints) & up
        for i in mask.search(1):
            candidates = [info for info in slot.running_on(i)
                          if info.user == victim_queue and info.attempt_id not in claimed]
            if not candidates:
                continue
            chosen = choose_victims(candidates, free_cpu[i], free_mem[i],
                                    spec.demand.cpu_m, spec.demand.mem_mib)
            if chosen is not None:
                by_id = {info.attempt_id: info for info in candidates}
                return i, tuple(by_id[attempt_id] for attempt_id in chosen)
        return None

    # -- usage and the preemptions in flight --------------------------------------------

    def new_pass(self) -> None:
        self._pass_usage = None

    def preempting(self, request_id: str, pending: PendingPreemption) -> None:
        self.preemptions[request_id] = pending
        self._pass_usage = None  # the next decision sees this one

    def usage(self) -> Usage:
        """Each queue's (cpu, memory) fractions of the federation as this GM sees them: the
        LMs' last heartbeats, adjusted by the preemptions it asked for that they do not show
        yet (common/usage.py)."""
        preemptions = self.preemptions.values()
        return estimate_usage(
            ((slot.lm, slot.usage(), slot.running_ids() if preemptions else frozenset())
             for slot in self.view.order), preemptions, self.view.capacity)

    def answered(self, request_id: str, accepted: bool) -> None:
        """The next heartbeat of its LM settles it. A refused (or unanswered) one changed
        nothing: it leaves the usage estimate at once, but its victims stay claimed until
        that heartbeat, or the GM would name the same ones again from the same stale list."""
        pending = self.preemptions.get(request_id)
        if pending is not None:
            pending.answered = True
            pending.refused = not accepted

    def settle(self, lm: str) -> None:
        """A heartbeat lists what really runs on `lm`: answered preemptions there are in it."""
        for request_id in [rid for rid, p in self.preemptions.items()
                           if p.lm == lm and p.answered]:
            del self.preemptions[request_id]

    def may_preempt_for(self, users: Iterable[str]) -> Iterable[str]:
        """The users whose queue may now take from another (empty if the policy never does)."""
        if not self.fairness.preempts:
            return ()
        usage = self.usage()
        return (user for user in users if self.fairness.victim_queues(user, usage))

    # -- counting mode ---------------------------------------------------------------------------

    def explain(self, spec: TaskSpec, user: str) -> dict:
        """How many nodes each filter of the search leaves across this GM's view, and what
        each step would find now (without moving the round-robin)."""
        nodes = up = constraint_ok = cpu_ok = fits = internal = 0
        lacking: Counter[int] = Counter()
        for slot in self.view.order:
            topology = slot.topology
            free_cpu, free_mem, node_up = self.view.free_of(slot)
            nodes += len(topology)
            up += node_up.count()
            for c in spec.constraints:
                lacking[c] += len(topology) - topology.constraint_vectors[c].count()
            mask = topology.mask_for(spec.constraints) & node_up
            constraint_ok += mask.count()
            g = topology.gm_index.get(self.gm)
            for i in mask.search(1):
                if free_cpu[i] >= spec.demand.cpu_m:
                    cpu_ok += 1
                    if free_mem[i] >= spec.demand.mem_mib:
                        fits += 1
                        internal += g is not None and topology.owner[i] == g
        saved = self._pass_usage
        self._pass_usage = None
        steps = {"internal": self.internal(spec, advance=False),
                 "external": self.external(spec, advance=False),
                 "preempt": self.preempt(spec, user)}
        self._pass_usage = saved
        return {
            "nodes": nodes, "nodes_up": up,
            "nodes_lacking_constraint": {str(c): n for c, n in sorted(lacking.items())},
            "nodes_satisfying_constraints": constraint_ok,
            "with_enough_cpu": cpu_ok, "with_enough_cpu_and_memory": fits,
            "of_which_internal": internal,
            "steps": {name: None if m is None else m.where() for name, m in steps.items()},
        }
