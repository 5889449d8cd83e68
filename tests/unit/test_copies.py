"""The copy policies of the federated cluster (common/policies/copies.py): how many
extra copies each running task gets on a cluster's idle nodes, against hand-worked spreads and
the paper's own allocation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import InvalidInput
from common.policies.copies import (
    COPY_POLICIES,
    Candidates,
    CopyOptions,
    shares,
    wanted_copies,
)
from simulator.models.machines import MACHINE_ALLOCATIONS


def candidates(*priorities: float) -> Candidates:
    """t0, t1, ... arriving in that order with those estimated remaining works."""
    index = Candidates()
    for i, priority in enumerate(priorities):
        index.add(f"t{i}", priority)
    return index


def plan(name: str, index: Candidates, idle: int, max_copies: int = 0, beta: float = 0.5):
    return wanted_copies(COPY_POLICIES.make(name, CopyOptions(beta)), index, idle, max_copies)


def test_srpt_r_spreads_the_machines_and_favours_the_least_remaining_work() -> None:
    # 3 tasks, 7 idle nodes: 10 machines, 3 each and the smallest 10 - 2 x 3 = 4
    assert plan("srpt+r", candidates(50, 5, 20), 7) == {"t1": 3, "t0": 2, "t2": 2}
    # more tasks than idle nodes: one machine each, every idle node to the smallest
    assert plan("srpt+r", candidates(*range(10, 0, -1)), 3) == {"t9": 3}


def test_fair_r_favours_the_latest_arrival_and_laps_r_only_the_latest_share() -> None:
    assert plan("fair+r", candidates(1, 1, 1), 7) == {"t2": 3, "t1": 2, "t0": 2}
    # laps+r, beta 0.5 of 6 tasks: t3..t5 share 3 + 6 = 9 machines, 3 each
    assert plan("laps+r", candidates(*[1] * 6), 6) == {"t5": 2, "t4": 2, "t3": 2}
    assert plan("laps+r", candidates(*[1] * 6), 6, beta=1 / 6) == {"t5": 6}


def test_none_copies_nothing_and_nothing_idle_copies_nothing() -> None:
    assert plan("none", candidates(1, 2), 5) == {}
    assert plan("srpt+r", candidates(1, 2), 0) == {}
    assert plan("srpt+r", Candidates(), 5) == {}


def test_max_copies_caps_a_task_and_what_it_leaves_goes_to_the_next() -> None:
    # uncapped the smallest would take all 5; capped at 3 copies (2 extra) each in order
    assert plan("srpt+r", candidates(30, 10, 20), 5, max_copies=3) == {
        "t1": 2, "t2": 2, "t0": 1}
    assert plan("srpt+r", candidates(30, 10, 20), 5, max_copies=1) == {}


def test_a_bad_beta_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        CopyOptions(beta=0)
    assert caught.value.field == "beta"


def test_candidates_keep_both_orders_as_tasks_come_and_go() -> None:
    index = candidates(5, 1, 3)
    index.discard("t1")
    index.add("t3", 2)
    assert list(index.least_work_first()) == ["t3", "t2", "t0"]
    assert list(index.latest_first()) == ["t3", "t2", "t0"]
    index.add("t0", 0)  # already there: its place does not change
    assert list(index.least_work_first())[0] == "t3" and len(index) == 3


@given(st.sampled_from(["srpt+r", "fair+r", "laps+r"]),
       st.lists(st.floats(0, 1e6), min_size=0, max_size=40), st.integers(0, 60),
       st.integers(0, 5), st.sampled_from([0.1, 0.5, 1.0]))
def test_copies_never_exceed_the_idle_nodes_nor_the_cap(name, priorities, idle, max_copies,
                                                        beta) -> None:
    index = candidates(*priorities)
    wanted = plan(name, index, idle, max_copies, beta)
    assert sum(wanted.values()) <= idle
    assert all(extra >= 1 for extra in wanted.values())
    if max_copies:
        assert all(extra <= max_copies - 1 for extra in wanted.values())
    chosen = COPY_POLICIES.make(name, CopyOptions(beta)).chosen(len(priorities))
    latest = {f"t{i}" for i in range(len(priorities) - chosen, len(priorities))}
    if name == "laps+r":
        assert set(wanted) <= latest
    if not max_copies and priorities and idle:
        assert sum(wanted.values()) == idle  # uncapped, every idle node gets a copy


@given(st.integers(1, 50), st.integers(0, 200))
def test_the_spread_is_the_papers_allocation_of_machines(jobs: int, spare: int) -> None:
    """With n tasks and I idle nodes, srpt+r's machines per task (its own plus its copies)
    are what the paper's SRPT+R gives n jobs on n + I machines."""
    remaining = np.arange(jobs, 0, -1, dtype=float)  # the last is the smallest
    copies, _ = MACHINE_ALLOCATIONS.make("srpt+r").allocate(remaining, np.zeros(jobs),
                                                            jobs + spare)
    wanted = plan("srpt+r", candidates(*remaining), spare)
    assert [1 + wanted.get(f"t{i}", 0) for i in range(jobs)] == copies.tolist()
    each, favoured = shares(jobs, jobs + spare)
    assert favoured + (jobs - 1) * each == jobs + spare and favoured >= each
    assert each == math.floor((jobs + spare) / jobs)


def one_task_at_a_time(policy, index: Candidates, idle: int, max_copies: int) -> dict[str, int]:
    """`wanted_copies` as it was written first, a step per task: the reference the run-length
    version must match, amounts and order (an LM launches in the plan's order)."""
    k = policy.chosen(len(index))
    if not k or idle <= 0:
        return {}
    each, favoured = shares(k, k + idle)
    limit = max_copies - 1 if max_copies else idle
    wanted: dict[str, int] = {}
    left = idle
    for i, original in enumerate(policy.order(index)):
        if i >= k or left <= 0:
            break
        extra = min(limit, (favoured if i == 0 else each) - 1, left)
        if extra <= 0:
            break
        wanted[original] = extra
        left -= extra
    if max_copies and left > 0:
        for i, original in enumerate(policy.order(index)):
            if i >= k or left <= 0:
                break
            extra = min(limit - wanted.get(original, 0), left)
            if extra > 0:
                wanted[original] = wanted.get(original, 0) + extra
                left -= extra
    return wanted


@given(st.sampled_from(["srpt+r", "fair+r", "laps+r", "none"]),
       st.lists(st.sampled_from([1.0, 2.0, 3.5, 1e6]), max_size=60), st.integers(-1, 300),
       st.sampled_from([0, 1, 2, 3, 4, 7, 1000]), st.sampled_from([0.1, 0.5, 1.0]))
def test_the_plan_is_the_one_a_step_per_task_gives(name, priorities, idle, max_copies,
                                                   beta) -> None:
    policy, index = COPY_POLICIES.make(name, CopyOptions(beta)), candidates(*priorities)
    wanted = wanted_copies(policy, index, idle, max_copies)
    assert list(wanted.items()) == list(one_task_at_a_time(policy, index, idle,
                                                           max_copies).items())
