"""The GM's view lays its merged vectors out lazily (`common/view.py`): a burst of first
snapshots costs one merge, and the view then answers exactly as one laid out after every
snapshot, and as one built from the final snapshots at once. `ClusterTopology.merge`
concatenates in C and must give what a node-by-node merge gives."""

from __future__ import annotations

import random
from itertools import permutations

import pytest
from bitarray import frozenbitarray

from common.cluster import ClusterTopology, LMSnapshot, RunningInfo
from common.models import NodeSpec
from common.policies.placement import PLACEMENT_POLICIES
from common.resources import Resources
from common.view import FederationView

GMS = ["gm-1", "gm-2", "gm-3"]
NUM_CONSTRAINTS = 4
SHAPES = [(frozenset(), 1000, 1024), (frozenset({1}), 2000, 1024), (frozenset({0, 2}), 500, 512),
          (frozenset({3}), 4000, 4096), (frozenset(), 6000, 1024)]
POLICIES = [PLACEMENT_POLICIES.make("first_fit"), PLACEMENT_POLICIES.make("best_fit")]


def topology(lm: str, size: int, rng: random.Random, tag: str = "") -> ClusterTopology:
    """`size` nodes of mixed capacities and constraints; the GMs listed in an order of the
    LM's own, and a random partition, so the merge renumbers ownership."""
    nodes = [NodeSpec(f"{lm}/{tag}n{i}", lm, f"{lm}/w", Resources(rng.choice((2000, 4000, 8000)),
                                                                  rng.choice((2048, 8192))),
                      frozenset(c for c in range(NUM_CONSTRAINTS) if rng.random() < 0.4))
             for i in range(size)]
    gms = rng.sample(GMS, len(GMS))
    owner = [rng.randrange(len(gms)) for _ in nodes] if rng.random() < 0.5 else None
    return ClusterTopology(lm, nodes, gms, NUM_CONSTRAINTS, owner)


def snapshot(t: ClusterTopology, epoch: int, seq: int, rng: random.Random | None = None,
             queues: bool = False) -> LMSnapshot:
    """A snapshot of `t`: all free and up, or (with `rng`) random free room, liveness,
    running list and, with `queues`, queue room."""
    size = len(t)
    if rng is None:
        return LMSnapshot(t.lm, epoch, seq, t, t.cap_cpu, t.cap_mem,
                          frozenbitarray("1" * size), ())
    cpu = tuple(rng.choice((0, c // 2, c)) for c in t.cap_cpu)
    mem = tuple(rng.choice((0, m // 2, m)) for m in t.cap_mem)
    up = frozenbitarray([rng.random() > 0.1 for _ in range(size)])
    running = (tuple(RunningInfo(f"{t.lm}-{epoch}-{seq}-{i}#0", i, rng.choice(GMS), "u", 100,
                                 100, False) for i in range(size) if rng.random() < 0.3)
               if rng.random() < 0.5 else None)
    room = frozenbitarray([rng.random() < 0.5 for _ in range(size)]) if queues else None
    return LMSnapshot(t.lm, epoch, seq, t, cpu, mem, up, running, queue_room=room)


def observe(view: FederationView) -> dict:
    """Everything a GM reads of its view (reading lays a lazy view out)."""
    seen = {
        "len": len(view), "layouts": view.layouts, "g": view.g,
        "order": [(slot.lm, slot.offset) for slot in view.order],
        "capacity": view.capacity, "all_reachable": view.all_reachable,
        "any_reachable": view.any_reachable, "room_gained": view.room_gained,
        "running": [info.attempt_id for info in view.running()],
    }
    if view.topology is None:
        return seen
    state = view.state
    seen.update({
        "node_ids": view.topology.node_ids, "owner": view.topology.owner,
        "free": (list(state.free_cpu), list(state.free_mem)),
        "up": state.up.to01(), "available": state.available.to01(),
        "thresholds": (state.min_cpu, state.min_mem),
        "gained": view.gained.to01(), "room": view.room.to01(),
        "reachable": view.reachable.to01(),
        "free_of": {slot.lm: view.free_of(slot) for slot in view.order},
        "finds": finds(view), "queues": queue_finds(view),
    })
    return seen


def finds(view: FederationView) -> list:
    """Every search answer, as (LM, node id): offsets may differ, the answer may not."""
    answers = []
    for constraints, cpu, mem in SHAPES:
        for internal in (True, False):
            for start in range(len(view.slots) + 1):
                for policy in POLICIES:
                    k, i = view.find(constraints, cpu, mem, internal, start, policy)
                    answers.append(None if k < 0 else view.order[k].topology.node_ids[i])
    return answers


def queue_finds(view: FederationView) -> list:
    answers = []
    for constraints, cpu, mem in SHAPES:
        for start in range(len(view.slots) + 1):
            k, i = view.find_queue(constraints, cpu, mem, start)
            answers.append(None if k < 0 else view.order[k].topology.node_ids[i])
    return answers


def test_a_burst_of_first_snapshots_merges_once_when_first_read() -> None:
    rng = random.Random(1)
    tops = [topology(f"lm-{k}", 20, rng) for k in range(1, 26)]
    view = FederationView("gm-1")
    for t in tops:
        assert view.apply(snapshot(t, 0, 1), 0.0)
    assert view.merges == 0 and view.layouts == 25 and len(view) == 25
    assert [slot.lm for slot in view.order] == sorted(t.lm for t in tops)
    assert view.merges == 1
    view.find(frozenset(), 1000, 1024, True, 0)
    view.apply(snapshot(tops[0], 0, 2), 1.0)  # a known LM: no new layout
    assert view.merges == 1 and view.layouts == 25
    # a snapshot of a known LM lays out the new ones first, and takes its changes
    late = topology("lm-0", 5, rng)
    view.apply(snapshot(late, 0, 1), 2.0)
    assert view.merges == 1
    view.apply(snapshot(tops[1], 0, 2), 2.0)
    assert view.merges == 2 and view.order[0].lm == "lm-0"


def test_no_view_reads_none_before_any_snapshot() -> None:
    view = FederationView("gm-1")
    assert view.topology is None and view.state is None and not view.any_reachable
    assert view.find(frozenset(), 1, 1, True, 0) == (-1, -1) and view.merges == 0
    view.expect_demand(1000, 1024)  # no state yet: the thresholds wait for it
    t = topology("lm-1", 4, random.Random(2))
    view.apply(snapshot(t, 0, 1), 0.0)
    assert view.any_reachable and view.merges == 1
    assert view.state.min_cpu == 1000 and view.state.up.count() == 4
    other = FederationView("gm-1")  # its first layout comes with a queue claim
    other.apply(snapshot(t, 0, 1), 0.0)
    other.claim_queue("q", other.slots["lm-1"], 3)
    assert other.queue_claims == {"q": ("lm-1", [3])} and other.room.to01() == "0000"


# Each entry point of the view, as the first thing done after a burst of new LMs: it must
# lay the view out first. (view, name of a slot) -> what it returns, comparable.
FIRST_READS = {
    "free_of": lambda view, lm: view.free_of(view.slots[lm]),
    "take_gained": lambda view, lm: view.take_gained().to01(),
    "update_reachability": lambda view, lm: view.update_reachability(10.0, timeout=5.0),
    "claim_queue": lambda view, lm: view.claim_queue("q", view.slots[lm], 1),
    "reserve": lambda view, lm: view.reserve("r", view.slots[lm], 1, 1000, 1024),
    "release": lambda view, lm: view.release("r0"),
    "running": lambda view, lm: [info.attempt_id for info in view.running()],
    "find": lambda view, lm: view.find(frozenset(), 1000, 1024, True, 1),
    "find_queue": lambda view, lm: view.find_queue(frozenset(), 1000, 1024, 1),
    "eligible": lambda view, lm: view.eligible(frozenset({1}), False).to01(),
    "expect_demand": lambda view, lm: view.expect_demand(10, 10),
    "apply_known": lambda view, lm: view.apply(snapshot(view.slots["lm-1"].topology, 0, 9),
                                               10.0),
    "any_reachable": lambda view, lm: view.any_reachable,
    "room_gained_off": lambda view, lm: setattr(view, "room_gained", False),
    "expect_demand_zero": lambda view, lm: view.expect_demand(0, 0),
    "len": lambda view, lm: len(view),
    "g": lambda view, lm: view.g,
    "order": lambda view, lm: [slot.lm for slot in view.order],
    "topology": lambda view, lm: view.topology.node_ids,
    "state": lambda view, lm: view.state.available.to01(),
    "capacity": lambda view, lm: view.capacity,
    "reachable": lambda view, lm: view.reachable.to01(),
    "all_reachable": lambda view, lm: view.all_reachable,
    "gained": lambda view, lm: view.gained.to01(),
    "room": lambda view, lm: view.room.to01(),
    "room_gained": lambda view, lm: view.room_gained,
}


@pytest.mark.parametrize("read", sorted(FIRST_READS))
def test_every_entry_point_lays_a_stale_view_out_first(read) -> None:
    """After a burst of new LMs (one arriving after a reservation and a queue claim were
    made: it sorts first, so every offset moves), each entry point answers and leaves the
    view as it did when every snapshot was laid out at once."""
    shown = []
    for eager in (True, False):
        rng = random.Random(4)
        view = FederationView("gm-1")
        view.expect_demand(500, 512)
        view.apply(snapshot(topology("lm-1", 6, rng), 0, 1, rng, queues=True), 0.0)
        k, i = view.find(frozenset(), 500, 512, True, 0)
        view.reserve("r0", view.order[k], i, 500, 512)
        view.claim_queue("r0", view.order[k], i)
        view.apply(snapshot(view.slots["lm-1"].topology, 0, 2, rng, queues=True), 0.0)
        view.room_gained = False
        for name in ("lm-3", "lm-0", "lm-2"):
            view.apply(snapshot(topology(name, 5, rng), 0, 1, rng, queues=True), 0.0)
            if eager:
                view.order  # noqa: B018  (a read: lays the view out now)
        answer = FIRST_READS[read](view, "lm-0")
        if isinstance(answer, tuple) and answer and isinstance(answer[0], list):
            answer = tuple(map(list, answer))  # `free_of`: lists and a bitarray
        shown.append((answer, observe(view), view.merges))
    (eager_answer, eager_view, eager_merges), (lazy_answer, lazy_view, lazy_merges) = shown
    assert lazy_answer == eager_answer and lazy_view == eager_view
    assert (eager_merges, lazy_merges) == (4, 2)


@pytest.mark.parametrize("order", list(permutations(range(4)))[::5])
def test_any_arrival_order_gives_the_view_of_all_snapshots_at_once(order) -> None:
    """First snapshots in several orders, with a placement reserved in flight before the last
    LM arrives (its offsets move: the late LM sorts first) and an LM restarted with other
    nodes: the view answers as one built from the final snapshots at once."""
    rng = random.Random(3)
    tops = [topology(name, size, rng) for name, size in
            (("lm-b", 6), ("lm-c", 9), ("lm-d", 5), ("lm-a", 7))]
    # other nodes (other ids): the reservations in flight to the old incarnation are dropped
    restarted = topology("lm-c", 11, rng, tag="r")
    view = FederationView("gm-1")
    view.expect_demand(500, 512)
    reserved = []
    for step, k in enumerate(order):
        view.apply(snapshot(tops[k], 0, 1, rng), 0.0)
        if step == 2:  # a placement in flight before the last LM is heard of
            for r, (constraints, cpu, mem) in enumerate(SHAPES * 2):
                slot_k, i = view.find(constraints, cpu, mem, r < len(SHAPES), r)
                if slot_k >= 0:
                    view.reserve(f"r{r}", view.order[slot_k], i, cpu, mem)
                    reserved.append((f"r{r}", view.order[slot_k].lm, i, cpu, mem))
    view.apply(snapshot(restarted, 1, 1, rng), 1.0)  # lm-c restarts with other nodes
    whole = FederationView("gm-1")
    whole.expect_demand(500, 512)
    for lm in sorted(view.slots, reverse=True):
        whole.apply(view.slots[lm].snapshot, 1.0)
    for request_id, lm, i, cpu, mem in reserved:
        if lm != "lm-c":  # none of its nodes survived the restart
            whole.reserve(request_id, whole.slots[lm], i, cpu, mem)
    assert reserved and view.merges <= view.layouts
    seen, expected = observe(view), observe(whole)
    for key in ("order", "node_ids", "owner", "free", "up", "available", "capacity", "free_of",
                "finds", "g"):
        assert seen[key] == expected[key], key
    for request_id, *_ in reserved:
        view.release(request_id)
        whole.release(request_id)
    assert observe(view)["finds"] == observe(whole)["finds"]


def drive(views: list[FederationView], seed: int, steps: int = 300, queues: bool = False,
          eager: bool = False) -> list[dict]:
    """The same random history on each view: first snapshots in bursts, newer and older
    snapshots, restarts with other nodes, reservations and queue claims in flight,
    releases, silences, smaller demands, the pass's reads. `eager`: lay the first view out
    after every snapshot, as the view did before it was lazy. Returns what each view
    showed at random checkpoints (and at the end)."""
    rng = random.Random(seed)
    names = [f"lm-{k}" for k in rng.sample(range(1, 10), 7)]
    tops = {name: topology(name, rng.randint(3, 12), rng) for name in names}
    epochs = dict.fromkeys(names, 0)
    seqs = dict.fromkeys(names, 0)
    heard: set[str] = set()
    requests: list[str] = []
    seen: list[list[dict]] = [[] for _ in views]
    now = 0.0

    def apply(snap: LMSnapshot) -> None:
        for view in views:
            view.apply(snap, now)
        if eager:
            views[0].order  # noqa: B018  (a read: lays the view out now)

    for step in range(steps):
        now += rng.random()
        move = rng.random()
        unheard = [name for name in names if name not in heard]
        if unheard and (move < 0.3 or not heard):
            for name in rng.sample(unheard, rng.randint(1, len(unheard))):  # a burst
                heard.add(name)
                seqs[name] += 1
                apply(snapshot(tops[name], epochs[name], seqs[name], rng, queues))
        elif move < 0.55:
            name = rng.choice(sorted(heard))
            if rng.random() < 0.08:  # restarted, with other nodes (or the same ones)
                epochs[name] += 1
                seqs[name] = 0
                if rng.random() < 0.7:  # not fewer nodes: reservations in flight stay on it
                    tops[name] = topology(name, rng.randint(len(tops[name]), 14), rng,
                                          tag=f"e{epochs[name]}")
            seqs[name] += 1
            snap = snapshot(tops[name], epochs[name], seqs[name], rng, queues)
            if rng.random() < 0.1:  # an older one, out of order: only says the LM lives
                snap = snapshot(tops[name], epochs[name], max(0, seqs[name] - 2), rng, queues)
            apply(snap)
        elif move < 0.7 and heard:
            constraints, cpu, mem = rng.choice(SHAPES)
            internal, start = rng.random() < 0.7, rng.randrange(8)
            request_id = f"r{step}"
            for view in views:
                k, i = view.find(constraints, cpu, mem, internal, start)
                if k >= 0:
                    view.reserve(request_id, view.order[k], i, cpu, mem)
                k, i = view.find_queue(constraints, cpu, mem, start)
                if k >= 0:
                    view.claim_queue(request_id, view.order[k], i)
            requests.append(request_id)
        elif move < 0.8 and requests:
            request_id = requests.pop(rng.randrange(len(requests)))
            for view in views:
                view.release(request_id)
        elif move < 0.87:
            for view in views:
                view.update_reachability(now, timeout=4.0)
        elif move < 0.92:
            cpu, mem = rng.choice((100, 400, 900)), rng.choice((100, 500))
            for view in views:
                view.expect_demand(cpu, mem)
        else:  # the scheduling pass's reads (`Backlog.wake_by_capacity`), in either order
            gained_first = rng.random() < 0.5
            for view in views:
                if gained_first:
                    view.take_gained()
                if view.room_gained:
                    view.room_gained = False
                if not gained_first:
                    view.take_gained()
        if rng.random() < 0.1 or step == steps - 1:
            for view, shown in zip(views, seen, strict=True):
                shown.append(observe(view))
    return seen


@pytest.mark.parametrize("queues", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_a_lazy_view_shows_what_a_view_laid_out_after_every_snapshot_shows(seed,
                                                                          queues) -> None:
    """Same history, one view laid out at its first read, the other after every snapshot
    (the eager layout): at every checkpoint everything they show is equal, and the lazy one
    merged less often."""
    lazy, eager = FederationView("gm-2"), FederationView("gm-2")
    shown_eager, shown_lazy = drive([eager, lazy], seed, queues=queues, eager=True)
    assert len(shown_lazy) > 5
    for checkpoint, (a, b) in enumerate(zip(shown_lazy, shown_eager, strict=True)):
        assert a == b, checkpoint
    assert eager.merges == eager.layouts == lazy.layouts and lazy.merges < eager.merges


def naive_merge(topologies: list[ClusterTopology]) -> dict:
    """The merge node by node, as the federation's definition reads."""
    gms: list[str] = []
    for t in topologies:
        gms.extend(gm for gm in t.gms if gm not in gms)
    node_ids = [node_id for t in topologies for node_id in t.node_ids]
    return {
        "gms": tuple(gms),
        "nodes": tuple(node for t in topologies for node in t.nodes),
        "node_ids": tuple(node_ids),
        "index": {node_id: i for i, node_id in enumerate(node_ids)},
        "cap_cpu": tuple(c for t in topologies for c in t.cap_cpu),
        "cap_mem": tuple(m for t in topologies for m in t.cap_mem),
        "workers": tuple(w for t in topologies for w in t.workers),
        "owner": tuple(gms.index(t.gms[o]) for t in topologies for o in t.owner),
        "constraints": [[c in node.constraints for t in topologies for node in t.nodes]
                        for c in range(NUM_CONSTRAINTS)],
        "owned": [[gms[o] == gm for o in (gms.index(t.gms[o]) for t in topologies
                                          for o in t.owner)] for gm in gms],
    }


@pytest.mark.parametrize("seed", range(20))
def test_merge_equals_a_node_by_node_merge(seed) -> None:
    rng = random.Random(seed)
    tops = [topology(f"lm-{k}", rng.randint(1, 15), rng) for k in range(rng.randint(1, 5))]
    merged, expected = ClusterTopology.merge(tops), naive_merge(tops)
    for key in ("gms", "nodes", "node_ids", "index", "cap_cpu", "cap_mem", "workers", "owner"):
        assert getattr(merged, key) == expected[key], key
        assert type(getattr(merged, key)) is type(expected[key]), key
    assert [v.tolist() for v in merged.constraint_vectors] == [
        [int(b) for b in row] for row in expected["constraints"]]
    assert [v.tolist() for v in merged.owned] == [[int(b) for b in row]
                                                  for row in expected["owned"]]
    assert all(o == ~n for o, n in zip(merged.owned, merged.not_owned, strict=True))
    assert merged.gm_index == {gm: g for g, gm in enumerate(expected["gms"])}


# -- what a layout keeps ---------------------------------------------------------------------


def test_a_layout_keeps_the_queue_room_the_snapshots_show_less_the_claims() -> None:
    """After a layout the view shows each LM's last queue room, less this GM's claims in
    flight (a layout used to clear it all again, so no queue had room until each LM's next
    snapshot)."""
    rng = random.Random(7)
    first, second = topology("lm-1", 8, rng), topology("lm-2", 8, rng)
    view = FederationView("gm-1")
    shown = snapshot(first, 0, 1, random.Random(3), queues=True)
    view.apply(shown, 0.0)
    view.claim_queue("r1", view.order[0], shown.queue_room.index(1))
    view.apply(snapshot(second, 0, 1), 0.0)  # a new LM: a new layout
    expected = shown.queue_room.tolist()
    expected[shown.queue_room.index(1)] = 0
    slot = view.slots["lm-1"]
    assert view.room[slot.offset:slot.offset + len(first)].tolist() == expected


def test_a_restarted_lm_with_fewer_nodes_keeps_each_reservation_on_its_own_node() -> None:
    """Reservations and queue claims in flight to an LM that restarts with other nodes name
    nodes by local index: they move to the same node's new index, and those on nodes it no
    longer has are dropped (re-applied as they were, they took room on the wrong node, or
    past the LM's last node)."""
    rng = random.Random(11)
    old = topology("lm-1", 6, rng)
    nodes = [old.nodes[i] for i in (5, 2)]  # the restart lost four nodes and reordered two
    new = ClusterTopology("lm-1", nodes, list(old.gms), NUM_CONSTRAINTS)
    view = FederationView("gm-1")
    view.apply(snapshot(old, 0, 1), 0.0)
    slot = view.order[0]
    view.reserve("kept", slot, 5, 1000, 1024)
    view.reserve("gone", slot, 3, 1000, 1024)
    view.claim_queue("claim", slot, 2)
    view.apply(snapshot(new, 1, 1), 1.0)  # the new incarnation: a layout
    state, offset = view.state, view.slots["lm-1"].offset
    assert view.inflight == {"kept": ("lm-1", [(0, 1000, 1024)]), "gone": ("lm-1", [])}
    assert view.queue_claims == {"claim": ("lm-1", [1])}
    assert state.free_cpu[offset] == new.cap_cpu[0] - 1000  # n5 still holds its reservation
    assert state.free_cpu[offset + 1] == new.cap_cpu[1]
    view.release("kept")
    view.release("gone")
    assert list(state.free_cpu[offset:offset + 2]) == list(new.cap_cpu)
