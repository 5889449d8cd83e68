"""The match on bit-vectors, availability thresholds, merged topologies and the GM's view."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from bitarray import frozenbitarray

from common.cluster import ClusterState, ClusterTopology, JournaledState, LMSnapshot
from common.constraint_model import (
    MACHINE_CONSTRAINT_PERCENT,
    machine_constraints,
    task_constraints,
)
from common.errors import InvalidInput
from common.models import NodeSpec
from common.policies.placement import PLACEMENT_POLICIES
from common.resources import Resources
from common.view import FederationView

GMS = ["gm-1", "gm-2"]


def topology(lm: str, constraints: list[set[int]], cpu: int = 4000, mem: int = 4096):
    nodes = [NodeSpec(f"{lm}/n{i}", lm, f"{lm}/w", Resources(cpu, mem), frozenset(c))
             for i, c in enumerate(constraints)]
    return ClusterTopology(lm, nodes, GMS)


def snapshot(t: ClusterTopology, seq: int, free_cpu=None, free_mem=None, epoch: int = 0,
             running=()) -> LMSnapshot:
    size = len(t)
    up = frozenbitarray("1" * size)
    return LMSnapshot(t.lm, epoch, seq, t, tuple(free_cpu or t.cap_cpu),
                      tuple(free_mem or t.cap_mem), up, running)


def test_match_is_the_and_of_constraint_partition_and_availability_vectors() -> None:
    t = topology("lm", [{1}, {1, 2}, {2}, {1, 2}])  # n0,n1 gm-1's; n2,n3 gm-2's
    state = ClusterState(t)
    internal = t.partition_mask(frozenset({1, 2}), 0, True)
    external = t.partition_mask(frozenset({1, 2}), 0, False)
    assert internal.to01() == "0100" and external.to01() == "0001"
    assert state.find(internal, 1000, 1000) == 1
    state.take(1, 4000, 1000)
    assert not state.available[1]
    assert state.find(internal, 1000, 1000) == -1
    assert state.find(external, 1000, 1000) == 3


def test_several_tasks_share_a_node_while_they_fit_and_first_fit_wraps_from_start() -> None:
    t = topology("lm", [set()] * 3)
    state = ClusterState(t)
    everywhere = t.mask_for(frozenset())
    placed = []
    for _ in range(4):
        i = state.find(everywhere, 2000, 1000)
        state.take(i, 2000, 1000)
        placed.append(i)
    assert placed == [0, 0, 1, 1]
    assert state.find(everywhere, 1000, 1000, start=2) == 2
    state.take(2, 4000, 0)
    assert state.find(everywhere, 4000, 1000, start=2) == -1


def test_best_fit_leaves_the_least_room() -> None:
    t = topology("lm", [set()] * 3)
    state = ClusterState(t)
    state.take(0, 1000, 1000)
    state.take(2, 3000, 3000)
    everywhere = t.mask_for(frozenset())
    assert state.find(everywhere, 1000, 1000) == 0
    best_fit = PLACEMENT_POLICIES.make("best_fit")
    assert state.find(everywhere, 1000, 1000, best_fit) == 2
    assert state.find(everywhere, 1000, 1000, best_fit, start=1) == 2  # no order: start is moot


def test_availability_threshold_hides_slivers_but_never_a_node_that_fits() -> None:
    t = topology("lm", [set()] * 2)
    state = ClusterState(t, min_cpu=1000, min_mem=1000)
    state.take(0, 3500, 0)  # 500 left: useless for every task seen so far
    assert state.available.to01() == "01"
    state.lower_thresholds(500, 500)  # a smaller task arrives
    assert state.available.to01() == "11"
    assert state.find(t.mask_for(frozenset()), 500, 500) == 0


def test_unknown_constraint_ids_and_duplicate_nodes_are_refused() -> None:
    t = topology("lm", [set()])
    with pytest.raises(InvalidInput, match="unknown constraint id 30"):
        t.mask_for(frozenset({30}))
    with pytest.raises(InvalidInput, match="duplicate node id"):
        ClusterTopology("lm", [NodeSpec("n", "lm", "w", Resources(1, 1))] * 2, GMS)


def test_merge_keeps_order_vectors_and_partitions() -> None:
    a = topology("a", [{1}, set()])
    b = ClusterTopology("b", [NodeSpec("b/n0", "b", "w", Resources(1, 1), frozenset({1}))],
                        list(reversed(GMS)))  # b lists the GMs the other way round
    merged = ClusterTopology.merge([a, b])
    assert merged.node_ids == ("a/n0", "a/n1", "b/n0")
    assert merged.constraint_vectors[1].to01() == "101"
    assert merged.owned[merged.gm_index["gm-1"]].to01() == "100"
    assert merged.owned[merged.gm_index["gm-2"]].to01() == "011"


def test_view_keeps_newer_snapshots_only_and_reapplies_its_own_reservations() -> None:
    a = topology("a", [set()] * 2)
    b = topology("b", [set()] * 2)
    view = FederationView("gm-1")
    view.expect_demand(1000, 1000)
    assert view.apply(snapshot(a, 1), 0.0) and view.apply(snapshot(b, 1), 0.0)
    k, i = view.find(frozenset(), 1000, 1000, internal=True, start_slot=1)
    assert view.order[k].lm == "b" and i == 0  # round-robin: started at b
    view.reserve("r1", view.order[k], i, 3000, 1000)
    assert view.apply(snapshot(b, 2, free_cpu=[2000, 4000]), 0.5)
    assert view.state.free_cpu[2] == -1000  # pessimistic until r1 is answered
    assert not view.apply(snapshot(b, 1), 0.6)  # older: ignored
    view.release("r1")
    assert view.state.free_cpu[2:4] == [2000, 4000]
    # a restarted LM (new epoch) starts a new sequence and is still newer
    assert view.apply(snapshot(b, 1, epoch=1), 0.7)
    assert view.state.free_cpu[2] == 4000


def test_unreachable_lms_are_left_out_until_heard_from() -> None:
    a = topology("a", [set()] * 2)
    b = topology("b", [set()] * 2)
    view = FederationView("gm-1")
    view.expect_demand(1, 1)
    view.apply(snapshot(a, 1), 0.0)
    view.apply(snapshot(b, 1), 4.0)
    view.update_reachability(now=6.0, timeout=5.0)
    assert not view.slots["a"].reachable and view.slots["b"].reachable
    k, _ = view.find(frozenset(), 1, 1, internal=True, start_slot=0)
    assert view.order[k].lm == "b"
    view.apply(snapshot(a, 1), 6.5)  # heard again (even an old snapshot says it is alive)
    assert view.slots["a"].reachable


def test_constraint_model_frequencies_match_the_published_vector() -> None:
    rng = random.Random(7)
    machines = [machine_constraints(rng) for _ in range(20_000)]
    for j, percent in enumerate(MACHINE_CONSTRAINT_PERCENT):
        observed = 100 * sum(j in m for m in machines) / len(machines)
        assert observed == pytest.approx(percent, abs=1.5)
    tasks = [task_constraints(rng) for _ in range(20_000)]
    mean = sum(len(t) for t in tasks) / len(tasks)
    assert mean == pytest.approx(1.86, abs=0.1)  # the published model: about 1.86 per task
    unconstrained = sum(not t for t in tasks) / len(tasks)
    assert unconstrained == pytest.approx(0.14, abs=0.02)


def test_taking_a_newer_snapshot_changes_only_what_changed_and_keeps_reservations() -> None:
    """`apply` shifts only the nodes a snapshot changed; after any mix of snapshots, downs,
    reservations and releases the view equals one that loads every snapshot whole."""
    rng = random.Random(11)
    a, b = topology("a", [set()] * 12), topology("b", [set()] * 8)
    view = FederationView("gm-1")
    view.apply(snapshot(a, 1), 0.0)
    view.apply(snapshot(b, 1), 0.0)
    seq = {"a": 1, "b": 1}
    requests = []
    for step in range(400):
        t = rng.choice((a, b))
        move = rng.random()
        if move < 0.5:
            seq[t.lm] += 1
            cpu = [rng.choice((0, 1000, 2500, 4000)) for _ in range(len(t))]
            mem = [rng.choice((0, 2048, 4096)) for _ in range(len(t))]
            up = frozenbitarray([rng.random() > 0.1 for _ in range(len(t))])
            view.apply(LMSnapshot(t.lm, 0, seq[t.lm], t, tuple(cpu), tuple(mem), up, ()), 1.0)
        elif move < 0.8:
            request = f"r{step}"
            view.reserve(request, view.slots[t.lm], rng.randrange(len(t)), 500, 256)
            requests.append(request)
        elif requests:
            view.release(requests.pop(rng.randrange(len(requests))))
        view.state.lower_thresholds(rng.choice((500, 4000)), rng.choice((256, 4096)))
        whole = FederationView("gm-1")  # every snapshot loaded whole, then the reservations
        whole.min_cpu, whole.min_mem = view.state.min_cpu, view.state.min_mem
        for lm in ("a", "b"):
            whole.apply(view.slots[lm].snapshot, 1.0)
        for request in requests:
            lm, items = view.inflight[request]
            for i, cpu_m, mem_mib in items:
                whole.reserve(request, whole.slots[lm], i, cpu_m, mem_mib)
        assert (view.state.free_cpu, view.state.free_mem) == (whole.state.free_cpu,
                                                              whole.state.free_mem), step
        assert view.state.up == whole.state.up and view.state.available == whole.state.available


def test_a_view_fed_journaled_snapshots_equals_one_that_loads_them_whole() -> None:
    """Snapshots of a journaled LM state say which nodes changed; a view that reads that,
    misses some snapshots, crosses journal rotations and takes some snapshots as the wire
    gives them (no journal) equals a view that loads every snapshot whole."""
    rng = random.Random(5)
    t = topology("a", [set()] * 16)
    lm = JournaledState(t, limit=40)  # small: rotations happen
    seq = 0

    def take_snapshot() -> LMSnapshot:
        nonlocal seq
        seq += 1
        return LMSnapshot("a", 0, seq, t, tuple(lm.free_cpu), tuple(lm.free_mem),
                          frozenbitarray(lm.up), (), lm.mark())

    view = FederationView("gm-1")
    view.apply(take_snapshot(), 0.0)
    used: list[tuple[int, int, int]] = []
    journaled = compared = 0
    for step in range(2_000):
        move = rng.random()
        if move < 0.4 and used:
            i, cpu, mem = used.pop(rng.randrange(len(used)))
            lm.give(i, cpu, mem)
        elif move < 0.8:
            i = rng.randrange(len(t))
            if lm.free_cpu[i] >= 1000 and lm.free_mem[i] >= 1024:
                lm.take(i, 1000, 1024)
                used.append((i, 1000, 1024))
        else:
            i = rng.randrange(len(t))
            lm.set_up(i, not lm.up[i])
        if rng.random() < 0.3:
            snapshot = take_snapshot()
            if rng.random() < 0.3:
                continue  # this GM never hears of it
            if rng.random() < 0.1:
                snapshot = replace(snapshot, changes=None)  # as decoded from the wire
            previous = view.slots["a"].snapshot
            if snapshot.changed_since(previous) is None:
                compared += 1
            else:
                journaled += 1
            view.apply(snapshot, 1.0)
            whole = FederationView("gm-1")
            whole.apply(snapshot, 1.0)
            assert (view.state.free_cpu, view.state.free_mem) == (whole.state.free_cpu,
                                                                  whole.state.free_mem), step
            assert view.state.up == whole.state.up
            assert view.state.available == whole.state.available
    assert journaled > 200 and compared > 20  # both paths were taken
