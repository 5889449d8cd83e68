"""A GM's view of the whole federation: every LM's last snapshot, side by side in one vector.

Layout: the GM concatenates the LMs' node vectors (sorted by LM name) into one merged
topology, so a placement is one AND over all nodes of the federation and one scan that
starts at the first node of the round-robin LM and wraps around. That is Megha's
"internal partitions round-robin across LMs, first fit inside each" without a Python loop
over LMs: at 10,000 nodes the AND is about a microsecond.

The view is the last snapshot of each LM plus this GM's own in-flight reservations, which
are re-applied on top of every newer snapshot: if the LM already counted them the view is
briefly pessimistic, never optimistic, and the request's answer settles it.

The merged vectors are laid out lazily. A snapshot from an LM the view has not seen (or
from a restarted LM with other nodes) only records the LM's slot and marks the layout stale;
the first read of anything laid out (`order`, `topology`, `state`, `gained`, `room`, a search,
a reservation, a snapshot of a known LM, ...) rebuilds it once. A GM hears every LM's first
heartbeat in a burst before it has anything to place, and rebuilding after each one merged
the federation once per LM, quadratic in the LMs (100 merges at 4 GMs x 25 LMs of 400
nodes, a quarter of a small `megha simulate`'s wall). Deferring is exact: while the layout
is stale nothing but new slots can have happened to the view (everything else lays it out
first), and a layout is a function of the slots, reservations, queue claims and thresholds
alone, which a new slot does not touch, so the one layout equals the last of the eager
ones it replaces. `layouts` still counts every change of the LMs' set; `merges`, the
layouts done.

`gained` marks the nodes that may have gained room (a snapshot showing more free resources or
a node back up, a reservation released, an LM heard again) since the GM last looked: a GM
holding tasks that fit nowhere looks at them again only when one of those nodes could take
them, not after every snapshot.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import compress
from operator import ne, or_

from bitarray import bitarray
from bitarray.util import zeros

from common.cluster import (
    MASK_CACHE_LIMIT,
    ClusterState,
    ClusterTopology,
    LMSnapshot,
    RunningInfo,
)
from common.policies.placement import FIRST_FIT, PlacementPolicy


@dataclass(slots=True, eq=False)
class LMSlot:
    """One LM's place in the view."""

    lm: str
    topology: ClusterTopology
    snapshot: LMSnapshot
    offset: int = 0  # in the merged vectors: valid for the slots of a laid-out `order`
    last_heard: float = float("-inf")
    reachable: bool = True
    running: tuple[RunningInfo, ...] = ()
    listing: LMSnapshot | None = None  # the snapshot that brought `running`

    @property
    def version(self) -> tuple[int, int]:
        return self.snapshot.version

    # What a running list says, derived once per list on the snapshot that brought it, so the
    # GMs of one simulation, which share the LM's snapshot object, derive it once, not each.

    def running_on(self, i: int) -> list[RunningInfo]:
        """Attempts the last heartbeat showed on local node `i` (for choosing victims)."""
        return self.listing.running_by_node().get(i, []) if self.listing is not None else []

    def running_ids(self) -> frozenset[str]:
        """Attempt ids the last heartbeat listed."""
        return self.listing.running_ids() if self.listing is not None else frozenset()

    def usage(self) -> dict[str, list[int]]:
        """Cpu and memory per user queue of what the last heartbeat listed."""
        return self.listing.usage_by_user() if self.listing is not None else {}

    def set_running(self, listing: LMSnapshot) -> None:
        self.running = listing.running
        self.listing = listing


_UNPLANNED = object()  # `find`: no candidates kept yet for the search


class _LaidOut:
    """A laid-out field of `FederationView`, read (and, `settable`, written) through its public
    name: a stale view is laid out first (the module's docstring), the one rule every such
    read follows. The hot methods (`find`, `reserve`, ...) check `_stale` once themselves and
    read the private fields."""

    def __init__(self, field: str, doc: str, settable: bool = False) -> None:
        self.field = field
        self.name = field  # the public name, from `__set_name__`
        self.settable = settable
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, view: FederationView | None, owner: type | None = None):
        if view is None:
            return self
        if view._stale:
            view._relayout()
        return getattr(view, self.field)

    def __set__(self, view: FederationView, value) -> None:
        if not self.settable:
            raise AttributeError(f"{type(view).__name__}.{self.name} is read-only")
        if view._stale:
            view._relayout()
        setattr(view, self.field, value)


class FederationView:
    def __init__(self, gm: str) -> None:
        self.gm = gm
        self.slots: dict[str, LMSlot] = {}
        # Laid out by `_relayout` (see the module's docstring): read through the `_LaidOut`
        # names below, which lay the view out first when a new LM has made it stale.
        self._stale = False  # a slot was added since the last layout
        self._order: list[LMSlot] = []  # by offset
        self.layouts = 0  # how many times the set of topologies changed (a new or restarted LM)
        self.merges = 0  # how many times the merged vectors were laid out (`_relayout`)
        self.running_changes = 0  # how many running lists snapshots brought (usage is kept by it)
        self._offsets: list[int] = []
        self._topology: ClusterTopology | None = None
        self._state: ClusterState | None = None
        self._g = -1  # this GM's partition index in the merged topology
        self._reachable = bitarray()
        self._all_reachable = True
        self.inflight: dict[str, tuple[str, list[tuple[int, int, int]]]] = {}
        # the smallest demand seen: nodes with less room are left out of `available`
        self.min_cpu = self.min_mem = 2**62
        # constraint set (or, for a task with a placement set, (constraint set, placement
        # set)) -> eligible nodes, for this GM's partitions and for the others'
        self._masks: dict[bool, dict[object, object]] = {True: {}, False: {}}
        self._gained = bitarray()  # nodes that may have gained room since `take_gained`
        # Local queues: the nodes whose queue has room, as the LMs' snapshots show it, less
        # the nodes this GM has asked to queue on since (one claim per node until the answer).
        self._room = bitarray()
        self._room_gained = False  # some queue gained room since the backlog last looked
        self.queue_claims: dict[str, tuple[str, list[int]]] = {}
        self._capacity = (1, 1)  # total cpu and memory of the federation
        # During a scheduling pass (`start_pass` .. `end_pass`): each search's candidates,
        # kept from one task to the next (see `find`); None outside a pass.
        self._planned: dict[tuple, bitarray | None] | None = None

    def __len__(self) -> int:
        return len(self.slots)  # `order` holds every slot once laid out

    # -- the layout, read through these (each lays a stale view out first) ------------------

    order = _LaidOut("_order", "The slots by offset (sorted by LM name).")
    topology = _LaidOut("_topology", "Every LM's topology merged in `order` (None before any "
                        "snapshot).")
    state = _LaidOut("_state", "Every LM's last snapshot in `order`, less this GM's "
                     "reservations in flight.")
    g = _LaidOut("_g", "This GM's partition index in the merged topology (-1: none).")
    capacity = _LaidOut("_capacity", "Total cpu and memory of the federation.")
    reachable = _LaidOut("_reachable", "The nodes of the LMs heard from lately.")
    all_reachable = _LaidOut("_all_reachable", "Whether every LM was heard from lately.")
    gained = _LaidOut("_gained", "The nodes that may have gained room since `take_gained`.")
    room = _LaidOut("_room", "The nodes whose local queue has room, less this GM's claims.")
    room_gained = _LaidOut("_room_gained", "Whether some queue gained room since the backlog "
                           "last looked (the backlog turns it off).", settable=True)

    # -- snapshots in ---------------------------------------------------------------

    def apply(self, snapshot: LMSnapshot, now: float) -> bool:
        """Take a snapshot if it is newer than the LM's last one; True if taken."""
        self._unplan()
        slot = self.slots.get(snapshot.lm)
        if slot is not None:
            if self._stale:  # only new LMs may wait for the layout (module docstring)
                self._relayout()
            slot.last_heard = max(slot.last_heard, now)
            if not slot.reachable:
                self._set_reachable(slot, True)
            known = slot.snapshot  # its (epoch, seq) `version`s, compared without building them
            if (snapshot.epoch, snapshot.seq) <= (known.epoch, known.seq):
                return False
        if slot is None or snapshot.topology is not slot.topology:
            if slot is not None:  # a restarted LM with other nodes
                self._renumber_claims(snapshot.lm, slot.topology, snapshot.topology)
            slot = LMSlot(snapshot.lm, snapshot.topology, snapshot, last_heard=now)
            if snapshot.running is not None:
                slot.set_running(snapshot)
                self.running_changes += 1
            self.slots[snapshot.lm] = slot
            self.layouts += 1
            self._stale = True  # laid out when first read: a burst of new LMs merges once
            return True
        previous, slot.snapshot = slot.snapshot, snapshot
        if snapshot.running is not None:
            slot.set_running(snapshot)
            self.running_changes += 1
        self._load_changes(slot, previous)
        if snapshot.queue_room is not None or previous.queue_room is not None:
            # (an LM without local queues: its nodes' room was cleared when its last snapshot
            # was loaded, and only a snapshot showing room sets any again)
            self._load_room(slot)
        return True

    def _renumber_claims(self, lm: str, old: ClusterTopology, new: ClusterTopology) -> None:
        """This GM's reservations and queue claims in flight to `lm` name nodes by local
        index: carry them to the new topology's index of the same node, and drop those on
        nodes it no longer has (re-applied at their old index, they would land on another
        node, or past the LM's last)."""
        def moved(i: int) -> int:
            return new.index.get(old.node_ids[i], -1)

        for request_id, (to, reserved) in self.inflight.items():
            if to == lm:
                carried = [(moved(i), cpu, mem) for i, cpu, mem in reserved]
                self.inflight[request_id] = (to, [r for r in carried if r[0] >= 0])
        for request_id, (to, claimed) in self.queue_claims.items():
            if to == lm:
                self.queue_claims[request_id] = (to, [j for j in map(moved, claimed) if j >= 0])

    def _load(self, slot: LMSlot) -> None:
        snapshot = slot.snapshot
        self._state.load(slot.offset, snapshot.free_cpu, snapshot.free_mem, snapshot.up)
        for lm, reserved in self.inflight.values():
            if lm == slot.lm:
                for i, cpu, mem in reserved:
                    self._state.take(slot.offset + i, cpu, mem)
        self._load_room(slot)

    def _load_room(self, slot: LMSlot) -> None:
        """The slot's queue room from its snapshot, less this GM's claims in flight."""
        room, start = slot.snapshot.queue_room, slot.offset
        end = start + len(slot.topology)
        if room is None:
            if self._room.find(1, start, end) >= 0:  # (no slice: this runs per snapshot)
                self._room[start:end] = 0
            return
        if (room & ~self._room[start:end]).any():
            self._room_gained = True
        self._room[start:end] = room
        for lm, claimed in self.queue_claims.values():
            if lm == slot.lm:
                for i in claimed:
                    self._room[start + i] = 0

    def _load_changes(self, slot: LMSlot, previous: LMSnapshot) -> None:
        """Take a newer snapshot of an LM whose last one is loaded: only its changed nodes.

        The state of this LM's nodes is the last snapshot minus the reservations in flight
        (`reserve` and `release` keep it so), so the new state is the old one plus the
        snapshot's change on each node: reservations need no re-applying. The snapshot says
        which nodes changed when it comes from the same process (the LM's change journal);
        one decoded from the wire is compared node by node, in C (`map`, `compress`).
        """
        new = slot.snapshot
        changed = new.changed_since(previous)
        if changed is None:
            differs = map(or_, map(ne, previous.free_cpu, new.free_cpu),
                          map(ne, previous.free_mem, new.free_mem))
            changed = list(compress(range(len(new.free_cpu)), differs))
            if previous.up != new.up:
                changed = set(changed).union((previous.up ^ new.up).search(1))
        if changed:
            self._state.shift(slot.offset, changed, previous.free_cpu, new.free_cpu,
                             previous.free_mem, new.free_mem, new.up)
            gained, offset = self._gained, slot.offset
            old_cpu, new_cpu = previous.free_cpu, new.free_cpu
            old_mem, new_mem, old_up, new_up = previous.free_mem, new.free_mem, previous.up, new.up
            for i in changed:
                if (new_cpu[i] > old_cpu[i] or new_mem[i] > old_mem[i]
                        or (new_up[i] and not old_up[i])):
                    gained[offset + i] = 1

    def _relayout(self) -> None:
        """New LMs (or restarted ones with other nodes) came: rebuild the merged vectors.

        Everything below is derived from the slots, the reservations and queue claims in
        flight and the thresholds, none of which a new slot changes, so one layout after
        several new slots equals the last of one layout per slot (`room_gained` only ever
        turns on, and the slots it is computed from only grew)."""
        self._stale = False
        self._unplan()
        self.merges += 1
        self._order = [self.slots[lm] for lm in sorted(self.slots)]
        offset = 0
        for slot in self._order:
            slot.offset = offset
            offset += len(slot.topology)
        self._offsets = [slot.offset for slot in self._order]
        self._topology = ClusterTopology.merge([slot.topology for slot in self._order])
        self._g = self._topology.gm_index.get(self.gm, -1)
        self._masks = {True: {}, False: {}}
        self._state = ClusterState(self._topology, self.min_cpu, self.min_mem)
        self._room = bitarray(offset)
        self._room.setall(0)
        for slot in self._order:
            self._load(slot)
        self._capacity = (sum(self._topology.cap_cpu) or 1, sum(self._topology.cap_mem) or 1)
        self._gained = bitarray(offset)
        self._gained.setall(1)  # a new layout: everything may fit anew
        self._reachable = bitarray(offset)
        self._reachable.setall(1)
        self._all_reachable = True
        for slot in self._order:
            if not slot.reachable:
                self._set_reachable(slot, False)

    def expect_demand(self, cpu_m: int, mem_mib: int) -> None:
        """A task of this size may be placed: nodes with that much room must be available."""
        if cpu_m < self.min_cpu or mem_mib < self.min_mem:
            if self._stale:  # the state in place takes the thresholds as it always did
                self._relayout()
            self._unplan()
            self.min_cpu = min(self.min_cpu, cpu_m)
            self.min_mem = min(self.min_mem, mem_mib)
            if self._state is not None:
                self._state.lower_thresholds(self.min_cpu, self.min_mem)

    # -- reachability ---------------------------------------------------------------

    def update_reachability(self, now: float, timeout: float) -> None:
        """Leave LMs silent for longer than `timeout` out of searches (checked on ticks;
        hearing from an LM again brings it back at once)."""
        if self._stale:
            self._relayout()
        for slot in self._order:
            reachable = now - slot.last_heard <= timeout
            if reachable != slot.reachable:
                self._set_reachable(slot, reachable)

    @property
    def any_reachable(self) -> bool:
        if self._stale:
            self._relayout()
        return bool(self._order) and (self._all_reachable or self._reachable.any())

    def _set_reachable(self, slot: LMSlot, reachable: bool) -> None:
        self._unplan()
        slot.reachable = reachable
        self._reachable[slot.offset:slot.offset + len(slot.topology)] = reachable
        if reachable:
            self._gained[slot.offset:slot.offset + len(slot.topology)] = 1
        self._all_reachable = all(s.reachable for s in self._order)

    def take_gained(self) -> bitarray:
        """The nodes that may have gained room since the last call (then none)."""
        if self._stale:
            self._relayout()
        gained = self._gained
        if gained.any():  # (an empty one stays: its reader only reads it, and at once)
            self._gained = zeros(len(gained))
        return gained

    # -- the match ---------------------------------------------------------------

    def eligible(self, constraints: frozenset[int], internal: bool,
                 nodes: frozenset[str] | None = None):
        """The nodes of this GM's partitions (internal) or the others' that satisfy the
        constraints and belong to the placement set `nodes` (if any): static, so cached per
        (constraints, placement set) until the layout changes."""
        if self._stale:
            self._relayout()
        masks = self._masks[internal]
        key = constraints if nodes is None else (constraints, nodes)
        eligible = masks.get(key)
        if eligible is None:
            if len(masks) >= MASK_CACHE_LIMIT:
                masks.clear()
            eligible = masks[key] = self._topology.partition_mask(constraints, self._g, internal,
                                                                 nodes)
        return eligible

    def find(
        self, constraints: frozenset[int], cpu_m: int, mem_mib: int, internal: bool,
        start_slot: int, placement: PlacementPolicy = FIRST_FIT,
        nodes: frozenset[str] | None = None,
    ) -> tuple[int, int]:
        """(slot position, local node index) of the fitting node `placement` picks, or
        (-1, -1).

        Internal: this GM's partitions; external: every other GM's. A scan with an order
        (first fit) starts at the first node of `order[start_slot]` and wraps around.
        `nodes`: the task's placement set (None: anywhere); only its nodes are candidates.

        Within a pass (`start_pass`) the candidates of a search (eligible, available,
        reachable) are kept for the next task of the same demand and placement set, and a
        search that found nothing answers the next at once: in a pass the view only loses
        room (`reserve`; anything that may give room ends the memo, `_unplan`), so a node
        that dropped out of the candidates since fits no such task, and the policy, which
        picks among the fitting candidates, picks as it would from fresh ones. A 300-task
        job of one shape searched its partitions 300 times, most of them failing
        (benchmarks/bench_core.py, the wide case).
        """
        if self._stale:
            self._relayout()
        if self._g < 0:
            return -1, -1
        planned = self._planned
        if planned is None:
            candidates = self._candidates(constraints, internal, nodes)
        else:
            key = (internal, constraints, nodes, cpu_m, mem_mib)
            candidates = planned.get(key, _UNPLANNED)
            if candidates is None:
                return -1, -1  # found nothing earlier in this pass: nor will it now
            if candidates is _UNPLANNED:
                candidates = planned[key] = self._candidates(constraints, internal, nodes)
        start = self._offsets[start_slot % len(self._order)]
        # what `ClusterState.find` does, on the candidates kept
        gi = placement.choose(self._state, candidates, cpu_m, mem_mib, start)
        if gi < 0:
            if planned is not None:
                planned[key] = None
            return -1, -1
        k = bisect_right(self._offsets, gi) - 1
        return k, gi - self._offsets[k]

    def _candidates(self, constraints: frozenset[int], internal: bool,
                    nodes: frozenset[str] | None) -> bitarray:
        """The nodes a search may pick from now: eligible, available and reachable (a new
        vector, the caller's to change)."""
        eligible = self._masks[internal].get(constraints if nodes is None
                                             else (constraints, nodes))
        if eligible is None:
            eligible = self.eligible(constraints, internal, nodes)
        candidates = self._state.available & eligible  # mutable, as `available` is
        if not self._all_reachable:
            candidates &= self._reachable
        return candidates

    # -- a scheduling pass ---------------------------------------------------------------------

    def start_pass(self) -> None:
        """A scheduling pass begins: until `end_pass` the view only loses room (reservations
        and queue claims), and searches keep their candidates (`find`)."""
        self._planned = {}

    def end_pass(self) -> None:
        self._planned = None

    def _unplan(self) -> None:
        """Something may give room: the candidates kept in a pass no longer hold (in a pass
        nothing does; this keeps a mistake from turning into a wrong placement)."""
        if self._planned:
            self._planned.clear()

    def find_queue(self, constraints: frozenset[int], cpu_m: int, mem_mib: int,
                   start_slot: int, nodes: frozenset[str] | None = None) -> tuple[int, int]:
        """(slot position, local node index) of a node of this GM's partitions (and of the
        placement set `nodes`, if any), up, whose local queue has room and whose capacity
        takes the demand, or (-1, -1); the scan starts at `order[start_slot]` and wraps
        around."""
        if self._stale:
            self._relayout()
        if self._g < 0 or not self._room.any():
            return -1, -1
        eligible = self._room & self._state.up & self.eligible(constraints, True, nodes)
        if not self._all_reachable:
            eligible &= self._reachable
        cap_cpu, cap_mem = self._topology.cap_cpu, self._topology.cap_mem
        start = self._offsets[start_slot % len(self._order)]
        for lo, hi in ((start, len(eligible)), (0, start)):
            for gi in eligible.search(1, lo, hi):
                if cap_cpu[gi] >= cpu_m and cap_mem[gi] >= mem_mib:
                    k = bisect_right(self._offsets, gi) - 1
                    return k, gi - self._offsets[k]
        return -1, -1

    def claim_queue(self, request_id: str, slot: LMSlot, i: int) -> None:
        """A launch asks to queue on the node: no other until the answer shows its room."""
        if self._stale:
            self._relayout()
        self._room[slot.offset + i] = 0
        entry = self.queue_claims.get(request_id)
        if entry is None:
            entry = self.queue_claims[request_id] = (slot.lm, [])
        entry[1].append(i)

    # -- reservations ---------------------------------------------------------------

    def reserve(self, request_id: str, slot: LMSlot, i: int, cpu_m: int, mem_mib: int) -> None:
        """Count a planned launch until its request is answered (or given up)."""
        if self._stale:
            self._relayout()
        gi = slot.offset + i
        self._state.take(gi, cpu_m, mem_mib)
        planned = self._planned
        if planned and not self._state.available[gi]:
            # left with too little for any task seen: out of the kept candidates, as it is
            # out of fresh ones (`find`'s scans need not step over it)
            for candidates in planned.values():
                if candidates is not None:
                    candidates[gi] = 0
        entry = self.inflight.get(request_id)
        if entry is None:
            entry = self.inflight[request_id] = (slot.lm, [])
        entry[1].append((i, cpu_m, mem_mib))

    def release(self, request_id: str) -> None:
        if self._stale:
            self._relayout()
        self._unplan()
        claims = self.queue_claims.pop(request_id, None)
        if claims is not None:
            slot = self.slots.get(claims[0])
            if slot is not None and slot.snapshot.queue_room is not None:
                for i in claims[1]:  # as the LM last showed it (an answer reloads it anyway)
                    if slot.snapshot.queue_room[i]:
                        self._room[slot.offset + i] = 1
                        self._room_gained = True
        entry = self.inflight.pop(request_id, None)
        if entry is None:
            return
        slot = self.slots.get(entry[0])
        if slot is None:
            return
        for i, cpu, mem in entry[1]:
            self._state.give(slot.offset + i, cpu, mem)
            self._gained[slot.offset + i] = 1

    # -- reading ---------------------------------------------------------------

    def free_of(self, slot: LMSlot) -> tuple[list[int], list[int], bitarray]:
        """This view's free cpu, free memory and up vector of one LM's nodes."""
        if self._stale:
            self._relayout()
        end = slot.offset + len(slot.topology)
        return (self._state.free_cpu[slot.offset:end], self._state.free_mem[slot.offset:end],
                self._state.up[slot.offset:end])

    def running(self):
        if self._stale:
            self._relayout()
        for slot in self._order:
            yield from slot.running
