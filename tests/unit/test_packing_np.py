"""`lp-np`, the paper's non-preemptive algorithm (slow motion, machine-interval matching, greedy
packing interval by interval), on an instance worked by hand; its schedules' feasibility on
random tiny ones; its direction against Tetris in the paper's model; and the bad input the
packing study refuses, each naming its option."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import InvalidInput
from loadgen.paper_workloads import YH1_SUB
from loadgen.trace import read_trace
from simulator.models.packing import lp
from simulator.models.packing.mapping import NoMigrationLP, map_tasks, slow_motion
from simulator.models.packing.model import Instance, Job, Task
from simulator.models.packing.schedulers import PACKING_POLICIES, PackingOptions
from simulator.models.packing.state import PackingState
from simulator.packing import simulate
from simulator.packing_workload import build_instance
from tests.unit.test_packing import TRACE, check_schedule, instances

# -- the hand-worked instance ---------------------------------------------------------------------
#
# Two machines of capacity 1, one resource; the LP's intervals end at 1, 2, 4 and 8. Five
# one-task jobs (demand, duration at home, home machine; elsewhere 2x as long):
#
#   a: 0.6, 1 s, m0     LP: 0.7 on m0 in interval 0, 0.3 in interval 1
#   b: 0.6, 1 s, m0     LP: 0.3 on m0 in interval 0, 0.7 in interval 1
#   d: 0.6, 3 s, m1     LP: all on m1 in interval 2
#   c: 0.5, 2 s, m1     LP: 0.5 on m1 in interval 2, 0.5 on m0 (remote, 4 s) in interval 3
#   e: 0.3, 1 s, m1     LP: all on m1 in interval 3
#
# Slow motion with λ = 0.5 doubles each share until the task's total on that machine is used:
# a's 0.7 + 0.3 become 1 + 0, b's 0.3 + 0.7 become 0.6 + 0.4; the others keep their intervals.
#
# Mapping. m0 takes its tasks by volume, c (0.5 x 4) before a and b (0.6 x 1): c half-fills
# copy 0 of interval 3; a fills copy 0 of interval 0; b puts 0.6 in copy 1 of interval 0 and
# 0.4 in copy 0 of interval 1. m1: d (1.8) fills copy 0 of interval 2, c (1.0) half-fills its
# copy 1, e fills copy 0 of interval 3. The matching with the earliest intervals: a, b -> m0
# interval 0; c, d -> m1 interval 2; e -> m1 interval 3. Without slow motion a and b share one
# copy of interval 0 (0.7 + 0.3) and one of interval 1, so one of them goes to interval 1.
#
# Schedule (order in an interval: LP completion, d's job before c's). At 0: m0 starts a; b does
# not fit beside it and starts when a ends, at 1 (ends 2). m1 starts d (0.6 until 3); c (0.5)
# does not fit until 3, when it starts (ends 5). e, of a later interval, shifts back: it fits
# beside d at 0 and ends at 1, before c could start, so it delays nothing. Without the shift
# back e waits until every task of interval 2 has started (c, at 3) and ends at 4.

A, B, D, C, E = range(5)
ENDS = np.array([1.0, 2.0, 4.0, 8.0])


def _hand_instance() -> Instance:
    def one(j: int, demand: float, duration: float, home: int) -> Job:
        return Job(j, f"j{j}", 1.0, 0.0, (Task(j, 0, (demand,), duration, frozenset({home}),
                                                2.0),))

    return Instance(((1.0,), (1.0,)), (one(A, 0.6, 1.0, 0), one(B, 0.6, 1.0, 0),
                                       one(D, 0.6, 3.0, 1), one(C, 0.5, 2.0, 1),
                                       one(E, 0.3, 1.0, 1))).validate()


def _hand_solution() -> lp.LPSolution:
    done = {(A, 0): {0: [0.7, 1, 1, 1]}, (B, 0): {0: [0.3, 1, 1, 1]},
            (D, 0): {1: [0, 0, 1, 1]}, (C, 0): {1: [0, 0, 0.5, 0.5], 0: [0, 0, 0, 0.5]},
            (E, 0): {1: [0, 0, 0, 1]}}
    return lp.LPSolution(kind="no-migration", objective=0.0, seconds=0.0, variables=0, rows=0,
                         completion={A: 1.0, B: 2.0, D: 3.0, C: 4.0, E: 5.0}, ends=ENDS,
                         done={key: {m: np.array(v, dtype=float) for m, v in per.items()}
                               for key, per in done.items()})


def _stretched(lam: float) -> tuple[dict, dict]:
    instance = _hand_instance()
    shares = {key: {m: slow_motion(done, lam) for m, done in per.items()}
              for key, per in _hand_solution().done.items()}
    volume = {(key, m): instance.jobs[key[0]].tasks[0].duration_on(m)
              * instance.jobs[key[0]].tasks[0].demand[0]
              for key, per in shares.items() for m in per}
    return shares, volume


def test_slow_motion_brings_each_share_forward_up_to_the_tasks_total_there() -> None:
    assert slow_motion(np.array([0.3, 1.0, 1.0]), 0.5) == pytest.approx([0.6, 0.4, 0.0])
    assert slow_motion(np.array([0.0, 0.0, 0.5, 0.5]), 0.5) == pytest.approx([0, 0, 0.5, 0])
    assert slow_motion(np.array([0.3, 1.0, 1.0]), 1.0) == pytest.approx([0.3, 0.7, 0.0])


def test_the_mapping_matches_each_task_to_the_machine_interval_worked_by_hand() -> None:
    assert map_tasks(*_stretched(0.5)) == {(A, 0): (0, 0), (B, 0): (0, 0), (C, 0): (1, 2),
                                           (D, 0): (1, 2), (E, 0): (1, 3)}
    unstretched = map_tasks(*_stretched(1.0))
    assert sorted((unstretched[(A, 0)], unstretched[(B, 0)])) == [(0, 0), (0, 1)]


@pytest.mark.parametrize("shift_back, e_ends", [(True, 1.0), (False, 4.0)])
def test_lp_np_packs_each_machine_interval_by_interval_as_worked_by_hand(
        monkeypatch, shift_back: bool, e_ends: float) -> None:
    monkeypatch.setattr(NoMigrationLP, "solve", lambda self, state: _hand_solution())
    instance = _hand_instance()
    run = simulate(instance, "lp-np", record=True,
                   options=PackingOptions(lp_np_lambda=0.5, lp_np_shift_back=shift_back))
    assert run.completion == {A: 1.0, B: 2.0, D: 3.0, C: 5.0, E: e_ends}
    assert {s.key[0]: s.machine for s in run.segments} == {A: 0, B: 0, D: 1, C: 1, E: 1}
    assert run.figures["shifted_back"] == int(shift_back)
    check_schedule(instance, run, preemptive=False)


# -- feasibility on random tiny instances --------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(single=False), st.booleans(), st.sampled_from([None, 0.3, 1.0]),
       st.booleans())
def test_lp_np_schedules_are_feasible_and_every_task_is_mapped_where_it_may_finish(
        instance: Instance, online: bool, lam: float | None, shift_back: bool) -> None:
    options = PackingOptions(lp_np_lambda=lam, lp_np_shift_back=shift_back, seed=3)
    # capacity never exceeded, placement sets kept, every task of every job run once, on one
    # machine, never stopped (check_schedule, from the run's segments alone)
    run = simulate(instance, "lp-np", online=online, options=options, record=True)
    assert run.counts["preemptions"] == 0
    assert set(run.completion) == set(range(len(instance.jobs)))
    check_schedule(instance, run, preemptive=False)
    # offline, every task is mapped once, to a machine it may run on and fits, in an
    # interval whose end is no sooner than its duration there (the LP's constraint 13b)
    policy = PACKING_POLICIES.make("lp-np", options=options)
    state = PackingState(instance)
    for j in range(len(instance.jobs)):
        state.release(j)
    started = dict(policy.decide(state, list(range(len(instance.jobs))), set()).starts)
    planned = {entry[2]: (m, entry[0]) for m, entries in policy.plan.items()
               for entry in entries}
    assert not set(planned) & set(started)
    assert set(planned) | set(started) == set(state.left)
    ends = policy.lp.solution.ends
    for key, (machine, level) in planned.items():
        task = state.task(key)
        assert task.duration_on(machine) is not None
        assert all(d <= c for d, c in zip(task.demand, instance.capacities[machine],
                                          strict=True))
        assert task.duration_on(machine) <= ends[level] - instance.jobs[key[0]].release + 1e-6


# -- the direction, in the paper's model ---------------------------------------------------------


def test_lp_np_beats_tetris_np_offline_in_the_papers_model() -> None:
    """The paper's non-preemptive headline: lp-np's weighted completion time below Tetris's.

    Our default offline preset, one resource (the paper's), equal weights: 25 YH1_sub jobs
    (370 tasks) on 10 machines, 3 local each, 1.5x slower remote. Measured: lp-np / tetris-np
    = 0.948 (seed 0; seeds 1 and 2: 0.926, 0.915). It does not hold everywhere: priority
    weights 1.05 at seed 0, and at 6-10 jobs on 3-4 machines lp-np wins 23 of 72 instances
    (docs/packing.md, "Where the paper's order does not hold")."""
    trace = read_trace(YH1_SUB).jobs
    instance = build_instance(trace, jobs=25, max_tasks=50, machines=10, setting="placement",
                              weights="equal", seed=0)
    ours = simulate(instance, "lp-np").weighted_jct
    tetris = simulate(instance, "tetris-np").weighted_jct
    assert ours < 0.98 * tetris, (ours, tetris, ours / tetris)


# -- bad input -----------------------------------------------------------------------------------


def test_a_slow_motion_factor_outside_0_1_is_refused_naming_it() -> None:
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(InvalidInput) as caught:
            PackingOptions(lp_np_lambda=bad)
        assert caught.value.field == "lp_np_lambda"


def test_bad_workload_resources_are_refused_naming_the_option() -> None:
    with pytest.raises(InvalidInput) as caught:
        build_instance(TRACE, jobs=5, max_tasks=4, machines=3, setting="placement",
                       weights="equal", seed=1, resources=3)
    assert caught.value.field == "--resources"
    one = build_instance(TRACE, jobs=5, max_tasks=4, machines=3, setting="placement",
                         weights="equal", seed=1)
    two = build_instance(TRACE, jobs=5, max_tasks=4, machines=3, setting="placement",
                         weights="equal", seed=1, resources=2)
    assert one.resources == 1 and two.resources == 2  # the paper's one resource by default
    # the same draws: the one-resource model is the two-resource one without its cpu
    assert [t.demand for t in one.tasks()] == [t.demand[1:] for t in two.tasks()]


@pytest.mark.parametrize("argv, option", [
    (["--resources", "3"], "--resources"),
    (["--remote-factor", "1.5,0.5"], "--remote-factor"),
    (["--remote-factor", "fast"], "--remote-factor"),
    (["--loads", "0"], "--loads"),
])
def test_the_study_refuses_bad_sweeps_naming_the_option(argv: list[str], option: str) -> None:
    from simulator.experiments.packing import Packing

    parser = argparse.ArgumentParser()
    Packing().add_options(parser)
    with pytest.raises(InvalidInput) as caught:
        Packing().options(parser.parse_args(argv))
    assert caught.value.field == option
