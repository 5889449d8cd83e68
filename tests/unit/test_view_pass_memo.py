"""Within a scheduling pass the view keeps each search's candidates from task to task and
answers a search that found nothing at once (`FederationView.find`, `start_pass`): it must
pick exactly the nodes a view searching afresh picks, whatever the policy, and let go of what
it kept as soon as something may give room."""

from __future__ import annotations

import random

import pytest

from common.view import FederationView
from tests.unit.test_view_layout import GMS, POLICIES, SHAPES, snapshot, topology


def _views(seed: int) -> tuple[FederationView, FederationView, random.Random]:
    rng = random.Random(seed)
    topologies = [topology(f"lm-{k}", rng.randrange(4, 12), rng) for k in range(4)]
    snapshots = [snapshot(t, 0, 1, random.Random(seed + k)) for k, t in enumerate(topologies)]
    views = []
    for _ in range(2):
        view = FederationView(rng.choice(GMS) if not views else views[0].gm)
        for cpu, mem in ((500, 512), (1000, 1024)):
            view.expect_demand(cpu, mem)
        for s in snapshots:
            view.apply(s, 0.0)
        views.append(view)
    return views[0], views[1], rng


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: type(p).__name__)
@pytest.mark.parametrize("seed", range(12))
def test_a_pass_picks_what_fresh_searches_pick(policy, seed: int) -> None:
    fresh, planned, rng = _views(seed)
    planned.start_pass()
    for n in range(80):
        constraints, cpu, mem = rng.choice(SHAPES[:3])  # demands the thresholds admit
        internal, start = rng.random() < 0.6, rng.randrange(4)
        found = fresh.find(constraints, cpu, mem, internal, start, policy)
        assert planned.find(constraints, cpu, mem, internal, start, policy) == found
        if found[0] >= 0:
            for view in (fresh, planned):
                view.reserve(f"r{n}", view.order[found[0]], found[1], cpu, mem)
    planned.end_pass()
    assert planned.state.free_cpu == fresh.state.free_cpu
    assert planned.state.available == fresh.state.available


def test_what_may_give_room_ends_the_memo() -> None:
    _, planned, _ = _views(3)
    constraints, cpu, mem = SHAPES[0]
    planned.start_pass()
    taken = 0
    while planned.find(constraints, cpu, mem, True, 0) != (-1, -1):  # fill the partitions
        k, i = planned.find(constraints, cpu, mem, True, 0)
        planned.reserve(f"r{taken}", planned.order[k], i, cpu, mem)
        taken += 1
    assert planned.find(constraints, cpu, mem, True, 0) == (-1, -1)  # kept: found nothing
    if taken:
        planned.release("r0")  # room again: the search looks afresh
        assert planned.find(constraints, cpu, mem, True, 0) != (-1, -1)
    planned.end_pass()
