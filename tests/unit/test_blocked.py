"""A GM with tasks that fit nowhere does not search for them again on every event: their
demands are blocked until capacity that matches appears (common/blocked.py), and a pass looks
only at demands that are ready (common/pending.py). On a saturated cluster this is what keeps
a GM's cost per event flat however long its backlog."""

from __future__ import annotations

import pytest
from bitarray import bitarray
from harness import Federation

from common.blocked import BlockedDemands
from common.cluster import ClusterState, ClusterTopology
from common.events import Tick
from common.gm import GMConfig
from common.models import JobSpec, NodeSpec, TaskSpec
from common.policies.fairness import UserQueue
from common.reasons import Reason
from common.resources import Resources

NODE = Resources(1000, 1024)  # one task of this size fills a node
RED, BLUE = 3, 7  # constraint ids


def one_gm_federation(node_constraints: list[frozenset[int]]) -> Federation:
    """One GM (no preemption: nothing to take from), one LM with one worker per node."""
    nodes = [NodeSpec(f"lm-1/n{i}", "lm-1", f"lm-1/w{i}", NODE, constraints)
             for i, constraints in enumerate(node_constraints)]
    topology = ClusterTopology("lm-1", nodes, ["gm-1"])
    fed = Federation([topology], [GMConfig("gm-1", (UserQueue("u1", 1.0, "gm-1"),),
                                           fairness="none")])
    fed.tick()
    fed.run_until_quiet()
    return fed


def job(job_id: str, width: int, constraints: frozenset[int] = frozenset()) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, NODE, constraints, 1.0)
                  for i in range(width))
    return JobSpec(job_id, "u1", tasks, 0.0)


def running_on(fed: Federation, node: str) -> list[str]:
    return [a.placement.attempt_id for a in fed.lms["lm-1"].running.values()
            if a.placement.node_id == node]


def test_a_saturated_gm_searches_only_when_capacity_that_matches_appears() -> None:
    fed = one_gm_federation([frozenset({RED}), frozenset({BLUE})])
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("fill", 2))  # one task on each node
    fed.run_until_quiet()
    fed.submit("gm-1", job("red", 50, frozenset({RED})))
    fed.run_until_quiet()
    assert gm.waiting == 50
    decisions = gm.counters["decisions_total"]
    for _ in range(20):  # time passes, heartbeats repeat: nothing could fit
        fed.heartbeat_workers()
        fed.tick(1.0)
        fed.run_until_quiet()
    assert gm.counters["decisions_total"] == decisions
    assert {t["reason"] for t in gm.job_status("red")["tasks"]} == {"no_capacity"}

    # the blue node frees up: red tasks cannot use it, so they are not searched for
    fed.finish(running_on(fed, "lm-1/n1")[0])
    fed.run_until_quiet()
    fed.heartbeat_workers()
    fed.tick(1.0)
    fed.run_until_quiet()
    assert gm.counters["decisions_total"] == decisions
    assert gm.waiting == 50

    # the red node frees up: one red task is placed there, and only a few searches happen
    fed.finish(running_on(fed, "lm-1/n0")[0])
    fed.run_until_quiet()
    fed.heartbeat_workers()
    fed.tick(1.0)
    fed.run_until_quiet()
    assert gm.waiting == 49
    assert len(running_on(fed, "lm-1/n0")) == 1
    assert gm.counters["decisions_total"] - decisions <= 3
    gm.validate()


def test_a_tick_with_nothing_new_runs_no_pass() -> None:
    fed = one_gm_federation([frozenset()])
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("fill", 1))
    fed.submit("gm-1", job("wait", 5))
    fed.run_until_quiet()
    before = gm.counters["decisions_total"]
    gm.handle(Tick("t"), fed.now + 0.1)
    assert gm.counters["decisions_total"] == before


# -- the memo alone --------------------------------------------------------------------------


def topology_and_state() -> tuple[ClusterTopology, ClusterState]:
    nodes = [NodeSpec(f"lm-1/n{i}", "lm-1", "lm-1/w0", NODE, constraints)
             for i, constraints in enumerate([frozenset({RED}), frozenset({BLUE}),
                                              frozenset({RED, BLUE})])]
    topology = ClusterTopology("lm-1", nodes, ["gm-1"])
    state = ClusterState(topology)
    for i in range(3):
        state.take(i, NODE.cpu_m, NODE.mem_mib)
    return topology, state


def bits(*ones: int, size: int = 3) -> bitarray:
    vector = bitarray(size)
    vector.setall(0)
    for i in ones:
        vector[i] = 1
    return vector


@pytest.mark.parametrize("freed, woken", [
    ((1,), {"blue"}),  # a blue node: only the blue demand can use it
    ((0,), {"red"}),
    ((2,), {"red", "blue", "both"}),
    ((), set()),
])
def test_capacity_wakes_exactly_the_demands_it_can_take(freed, woken) -> None:
    topology, state = topology_and_state()
    memo = BlockedDemands()
    demands = {"red": ("u1", (frozenset({RED}), 1000, 1024, None)),
               "blue": ("u1", (frozenset({BLUE}), 1000, 1024, None)),
               "both": ("u1", (frozenset({RED, BLUE}), 1000, 1024, None))}
    for demand in demands.values():
        memo.block(demand, Reason.NO_CAPACITY)
    for i in freed:
        state.give(i, NODE.cpu_m, NODE.mem_mib)
    # nodes marked gained but without room now (a change that took room) wake nothing
    returned = memo.wake_by_capacity(bits(0, 1, 2), topology, state, None)
    assert {name for name, demand in demands.items() if demand in returned} == woken
    assert {name for name, demand in demands.items() if demand not in memo} == woken


def test_a_demand_too_big_for_the_freed_room_stays_blocked() -> None:
    topology, state = topology_and_state()
    memo = BlockedDemands()
    big = ("u1", (frozenset({RED}), 1000, 1024, None))
    memo.block(big, Reason.NO_CAPACITY)
    state.give(0, 500, 512)  # half a node
    assert memo.wake_by_capacity(bits(0), topology, state, None) == []
    assert big in memo


def test_an_unreachable_lm_wakes_nothing_and_a_new_layout_wakes_all() -> None:
    topology, state = topology_and_state()
    memo = BlockedDemands()
    demand = ("u1", (frozenset({RED}), 1000, 1024, None))
    memo.block(demand, Reason.NO_CAPACITY)
    state.give(0, NODE.cpu_m, NODE.mem_mib)
    assert memo.wake_by_capacity(bits(0), topology, state, bits()) == []
    assert memo.wake_by_capacity(bits(0, size=5), topology, state, None) == [demand]
    assert demand not in memo


def test_a_pass_looks_only_at_demands_that_are_ready() -> None:
    """With a backlog blocked on one constraint, a job of another does not make the GM look at
    the backlog's tasks again, one by one."""
    fed = one_gm_federation([frozenset({RED}), frozenset({BLUE})])
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("fill", 2))
    fed.run_until_quiet()
    for k in range(30):
        fed.submit("gm-1", job(f"red{k}", 2, frozenset({RED})))
    fed.submit("gm-1", job("blue", 1, frozenset({BLUE})))
    fed.run_until_quiet()
    backlog = gm._backlog
    assert not backlog.levels[0].ready  # every waiting demand is blocked after a pass
    red = ("u1", (frozenset({RED}), NODE.cpu_m, NODE.mem_mib, None))
    assert len(backlog.levels[0].jobs_by_demand[red]) == 30
    tried = []
    try_place = gm._try_place
    gm._try_place = lambda task, *a, **k: tried.append(task.spec.task_id) or try_place(task, *a,
                                                                                      **k)
    fill_on_blue = running_on(fed, "lm-1/n1")[0]
    fed.finish(fill_on_blue)  # the blue node frees up: only the blue job is looked at
    fed.run_until_quiet()
    fed.heartbeat_workers()
    fed.tick(1.0)
    fed.run_until_quiet()
    assert [a for a in running_on(fed, "lm-1/n1") if a.startswith("blue/")]
    assert tried == ["blue/0"]
    gm.validate()
