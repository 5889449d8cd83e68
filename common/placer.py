"""Where a GM's task could go: the placement search, as steps that each return a match or
nothing, and the same steps in counting mode for `explain`.

The steps, in order (Megha's GM): a node of this GM's own partitions (`internal`, a plain
launch), a node of another GM's partitions (`external`, a repartition request the owning LM
may refuse), with local queues a node of its own partitions whose queue has room (`queue`: the
task waits there at the worker, in the worker's order), and, if the fairness policy lets the
task's queue take from a queue above its share, a node where preempting some of that queue's
attempts makes room (`preempt`). Each
search starts after the LM that took the last task of its kind (round-robin over LMs) and
scans with the placement policy (first fit or best fit).

The placer also keeps the preemptions this GM asked for and the LMs have not yet shown the
outcome of (`common/usage.py`): their victims stay claimed and they adjust the usage estimate
the fairness policy decides on.

The preemption step looks for victims only on the nodes where the victim queue has attempts
not yet claimed (a vector per LM and queue, built once per running list and kept as claims are
made), not on every node: on a saturated run the scan over every node of every LM, repeated
past the nodes already claimed, took a third of the wall time (benchmarks/bench_sim.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bitarray import bitarray

from common.cluster import RunningInfo
from common.messages import RequestKind
from common.models import TaskSpec
from common.policies.fairness import FairnessPolicy, Usage, choose_victims
from common.policies.placement import PlacementPolicy
from common.usage import OwnUsage, PendingPreemption, UsageEstimate
from common.view import FederationView, LMSlot

if TYPE_CHECKING:
    from common.gm_records import TaskRecord


# read once: reading a member from its enum class costs a tenth of a microsecond (Python 3.11),
# and every search that finds a node names one
_LAUNCH, _REPARTITION = RequestKind.LAUNCH, RequestKind.REPARTITION


@dataclass(slots=True)
class Match:
    kind: RequestKind  # LAUNCH (internal, or a preemption) or REPARTITION (external)
    slot: LMSlot
    index: int  # the node, within the LM
    victims: tuple[RunningInfo, ...] | None = None  # a preemption: these make room
    queued: bool = False  # into the node's local queue: no resources are reserved for it

    def where(self) -> str:
        return f"{self.slot.lm}/{self.slot.topology.node_ids[self.index]}"


class Placer:
    def __init__(self, gm: str, view: FederationView, fairness: FairnessPolicy,
                 placement: PlacementPolicy, own_queues: Iterable[str] = ()) -> None:
        self.gm = gm
        self.view = view
        self.fairness = fairness  # whether and from whom to preempt
        self.placement = placement  # policies/placement.py: which fitting node
        # and the preemptions in flight; with the paper's own_usage, the own queues' usage
        # from the GM's own book (common/usage.py)
        self.estimate = UsageEstimate(view, OwnUsage(own_queues)
                                      if fairness.options.tracks_own_usage else None)
        self._next_internal = 0  # round-robin: the LM position the next search starts at
        self._next_external = 0
        self._next_queue = 0
        # (lm, queue) -> (the running list it was built from, nodes where the queue has
        # attempts not claimed)
        self._victim_nodes: dict[tuple[str, str], tuple[tuple, bitarray]] = {}

    # -- the steps -------------------------------------------------------------------------------

    def place(self, spec: TaskSpec, user: str, allow_preempt: bool) -> Match | None:
        return (self._search(spec, True, True) or self._search(spec, False, True)
                or self.queue(spec) or (self.preempt(spec, user) if allow_preempt else None))

    def internal(self, spec: TaskSpec, advance: bool = True) -> Match | None:
        return self._search(spec, True, advance)

    def external(self, spec: TaskSpec, advance: bool = True) -> Match | None:
        return self._search(spec, False, advance)

    def _search(self, spec: TaskSpec, internal: bool, advance: bool) -> Match | None:
        """Round-robin over LMs, starting after the LM that took the last such task."""
        start = self._next_internal if internal else self._next_external
        k, i = self.view.find(spec.constraints, spec.demand.cpu_m, spec.demand.mem_mib, internal,
                              start, self.placement, spec.nodes)
        if k < 0:
            return None
        if advance and internal:
            self._next_internal = k + 1
        elif advance:
            self._next_external = k + 1
        return Match(_LAUNCH if internal else _REPARTITION, self.view.order[k], i)

    def queue(self, spec: TaskSpec, advance: bool = True) -> Match | None:
        """A node of this GM's partitions whose local queue has room (round-robin over LMs)."""
        k, i = self.view.find_queue(spec.constraints, spec.demand.cpu_m, spec.demand.mem_mib,
                                    self._next_queue, spec.nodes)
        if k < 0:
            return None
        if advance:
            self._next_queue = k + 1
        return Match(RequestKind.LAUNCH, self.view.order[k], i, queued=True)

    def preempt(self, spec: TaskSpec, user: str) -> Match | None:
        """A node where preempting attempts of queues above their share makes room, if the
        fairness policy lets `user` take from them and they stay at or above their share."""
        if not self.fairness.preempts:
            return None
        total_cpu, total_mem = self.view.capacity
        usage = self.estimate.usage()
        demand = (spec.demand.cpu_m / total_cpu, spec.demand.mem_mib / total_mem)
        victim_queues = self.fairness.victim_queues(user, usage, demand)
        if not victim_queues:
            return None
        claimed = self.estimate.claimed
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
        """The first node of `slot` (up, satisfying the constraints, in the placement set if
        the task has one) where unclaimed attempts of `victim_queue` make room, and those
        victims."""
        nodes = self._nodes_running(slot, victim_queue, claimed)
        if not nodes.any():
            return None
        mask = slot.topology.task_mask(spec.constraints, spec.nodes) & nodes
        state, offset = self.view.state, slot.offset
        up, free_cpu, free_mem = state.up, state.free_cpu, state.free_mem
        for i in mask.search(1):
            if not up[offset + i]:
                continue
            candidates = [info for info in slot.running_on(i) if info.user == victim_queue
                          and info.attempt_id not in claimed]
            if not candidates:
                continue
            chosen = choose_victims(candidates, free_cpu[offset + i], free_mem[offset + i],
                                    spec.demand.cpu_m, spec.demand.mem_mib)
            if chosen is not None:
                by_id = {info.attempt_id: info for info in candidates}
                return i, tuple(by_id[attempt_id] for attempt_id in chosen)
        return None

    def _nodes_running(self, slot: LMSlot, queue: str, claimed: set[str]) -> bitarray:
        """The nodes of `slot` where `queue` has attempts not claimed (built from the slot's
        running list when it changes; claims made since clear nodes, `_claim`)."""
        key = (slot.lm, queue)
        cached = self._victim_nodes.get(key)
        if cached is not None and cached[0] is slot.running:
            return cached[1]
        nodes = bitarray(len(slot.topology))
        nodes.setall(0)
        queuing = None
        for info in slot.running:
            if info.queued:
                if queuing is None:
                    queuing = bitarray(len(slot.topology))
                    queuing.setall(0)
                queuing[info.node_index] = 1
            elif info.user == queue and info.attempt_id not in claimed:
                nodes[info.node_index] = 1
        if queuing is not None:
            # what victims free on a node with a local queue goes to that queue: the LM
            # refuses a preemption there, so it is no place to look
            nodes &= ~queuing
        self._victim_nodes[key] = (slot.running, nodes)
        return nodes

    def _claim(self, slot: LMSlot, victims: tuple[RunningInfo, ...]) -> None:
        """Victims were named: a node left without unclaimed attempts of their queue is no
        longer a place to look for that queue's victims."""
        claimed = self.estimate.claimed
        for victim in victims:
            cached = self._victim_nodes.get((slot.lm, victim.user))
            if cached is None or cached[0] is not slot.running:
                continue
            i = victim.node_index
            if all(info.attempt_id in claimed for info in slot.running_on(i)
                   if info.user == victim.user):
                cached[1][i] = 0

    # -- usage and the preemptions in flight --------------------------------------------

    def preempting(self, request_id: str, pending: PendingPreemption) -> None:
        self.estimate.add(request_id, pending)  # the next decision sees this one
        slot = self.view.slots.get(pending.lm)
        if slot is not None:
            self._claim(slot, pending.victims)

    def victims_of(self, request_id: str) -> tuple[str, ...]:
        return self.estimate.preemptions[request_id].victim_ids

    def forget(self, request_id: str) -> None:
        """A preemption that was never sent: its victims are free to name again."""
        pending = self.estimate.forget(request_id)
        if pending is not None:
            for victim in pending.victims:
                self._victim_nodes.pop((pending.lm, victim.user), None)

    def moved(self, task: TaskRecord, active: bool) -> None:
        """A task of this GM started (or stopped) being placing, launched or running: with an
        own book, its queue's usage changes now, not at the next heartbeat."""
        if self.estimate.own is not None:
            spec = task.spec
            self.estimate.own.moved(spec.task_id, task.live, task.job.spec.user,
                                    spec.demand.cpu_m, spec.demand.mem_mib, active)

    def usage(self) -> Usage:
        """Each queue's (cpu, memory) fractions of the federation as this GM sees them: the
        LMs' last heartbeats, adjusted by the preemptions it asked for that they do not show
        yet (common/usage.py)."""
        return self.estimate.usage()

    def answered(self, request_id: str, accepted: bool) -> None:
        """The next heartbeat of its LM settles it. A refused (or unanswered) one changed
        nothing: it leaves the usage estimate at once, but its victims stay claimed until
        that heartbeat, or the GM would name the same ones again from the same stale list."""
        self.estimate.answered(request_id, accepted)

    def settle(self, lm: str) -> None:
        """A heartbeat lists what really runs on `lm`: answered preemptions there are in it."""
        self.estimate.settle(lm)

    def may_preempt_for(self, users: Iterable[str]) -> Iterable[str]:
        """The users whose queue may now take from another (empty if the policy never does)."""
        if not self.fairness.preempts:
            return ()
        usage = self.usage()
        return (user for user in users if self.fairness.victim_queues(user, usage))

    # -- counting mode ---------------------------------------------------------------------------

    def explain(self, spec: TaskSpec, user: str) -> dict:
        """How many nodes each filter of the search leaves across this GM's view, and what
        each step would find now (without moving the round-robin). A task with a placement
        set is counted on its set's nodes from `in_placement_set` on, and `placement_set`
        says what its set's nodes are doing."""
        nodes = up = constraint_ok = in_set = cpu_ok = fits = internal = 0
        set_known = set_up = 0  # nodes of the placement set in the view, and those up
        lacking: Counter[int] = Counter()
        allowed = spec.nodes
        for slot in self.view.order:
            topology = slot.topology
            free_cpu, free_mem, node_up = self.view.free_of(slot)
            nodes += len(topology)
            up += node_up.count()
            for c in spec.constraints:
                lacking[c] += len(topology) - topology.constraint_vectors[c].count()
            mask = topology.mask_for(spec.constraints) & node_up
            constraint_ok += mask.count()
            if allowed is not None:
                in_placement = topology.placement_mask(allowed)
                set_known += in_placement.count()
                set_up += (in_placement & node_up).count()
                mask = mask & in_placement
                in_set += mask.count()
            g = topology.gm_index.get(self.gm)
            for i in mask.search(1):
                if free_cpu[i] >= spec.demand.cpu_m:
                    cpu_ok += 1
                    if free_mem[i] >= spec.demand.mem_mib:
                        fits += 1
                        internal += g is not None and topology.owner[i] == g
        steps = {"internal": self.internal(spec, advance=False),
                 "external": self.external(spec, advance=False),
                 "queue": self.queue(spec, advance=False),
                 "preempt": self.preempt(spec, user)}
        funnel = {
            "nodes": nodes, "nodes_up": up,
            "nodes_lacking_constraint": {str(c): n for c, n in sorted(lacking.items())},
            "nodes_satisfying_constraints": constraint_ok,
        }
        if allowed is not None:
            funnel["in_placement_set"] = in_set
        funnel |= {
            "with_enough_cpu": cpu_ok, "with_enough_cpu_and_memory": fits,
            "of_which_internal": internal,
            "steps": {name: None if m is None else m.where() for name, m in steps.items()},
        }
        if allowed is not None:
            funnel["placement_set"] = {
                "nodes": len(allowed), "known": set_known, "up": set_up, "eligible": in_set,
                "with_room": fits, "with_room_internal": internal,
                "summary": placement_set_summary(len(allowed), set_up, in_set, fits, internal,
                                                 set_known),
            }
        return funnel


def placement_set_summary(size: int, up: int, eligible: int, with_room: int,
                          internal: int, known: int | None = None) -> str:
    """Why a task with a placement set of `size` nodes waits (or where it could go), in a
    line: `known` of them are in the GM's view (their LM has reported; None: all), `up` of
    those are up, `eligible` of those satisfy its constraints, `with_room` of those have room
    for it now in the GM's view, `internal` of those in the GM's partitions."""
    head = f"placement set: {size} node{'s' if size != 1 else ''}"
    if known == 0:
        return f"{head}, none reported by its LM yet"
    if up == 0:
        return f"{head}, none up"
    if eligible == 0:
        return f"{head}, none of the {up} up satisfies its constraints"
    if with_room == 0:
        down = size - up
        return f"{head}, all busy" if down == 0 else f"{head}, {down} down, the others busy"
    if internal == 0:
        return (f"{head}, {with_room} with room, all in other GMs' partitions "
                f"(a repartition is asked)")
    return f"{head}, {with_room} with room ({internal} in this GM's partitions)"
