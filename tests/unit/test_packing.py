"""Packing with placement sets: the LPs on instances whose optimum is known by hand, the LP
bound below every schedule any algorithm makes (property), and every schedule checked again
from its run segments: capacity never exceeded, no task outside its placement set unless it may
run remotely, every task done exactly once."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.errors import InvalidInput
from loadgen.trace import TraceJob
from simulator.models.packing import lp
from simulator.models.packing.model import Instance, Job, Task
from simulator.models.packing.schedulers import PACKING_POLICIES
from simulator.models.packing.state import PackingState, PackingViolation
from simulator.packing import PackingRun, simulate
from simulator.packing_workload import build_instance, offered_load


def job(j: int, durations, *, weight=1.0, release=0.0, machines=(0,), demand=(1.0,),
        remote=None) -> Job:
    return Job(j, f"j{j}", weight, release, tuple(
        Task(j, i, demand, d, frozenset(machines), remote) for i, d in enumerate(durations)))


# -- the LPs on hand-solvable instances ----------------------------------------------------------


def test_ordering_lp_finds_smiths_order_on_one_machine() -> None:
    # one machine, each task takes all of it: the optimum is shortest first, 1 + 3 = 4
    instance = Instance(((1.0,),), (job(0, [1.0]), job(1, [2.0]))).validate()
    solution = lp.ordering_lp(instance)
    assert solution.objective == pytest.approx(4.0)
    assert solution.order(instance) == [0, 1]


def test_ordering_lp_weighs_jobs() -> None:
    # heavy long job first: 3*2 + 1*3 = 9 beats 1*1 + 3*3 = 10
    instance = Instance(((1.0,),), (job(0, [2.0], weight=3.0), job(1, [1.0]))).validate()
    solution = lp.ordering_lp(instance)
    assert solution.objective == pytest.approx(9.0)
    assert solution.order(instance) == [0, 1]


@pytest.mark.parametrize("migration", [True, False])
def test_interval_lp_on_a_job_of_parallel_tasks_is_its_longest_task(migration: bool) -> None:
    # two machines, one task on each: the job ends with its 3-second task
    instance = Instance(((1.0,), (1.0,)), (Job(0, "j", 2.0, 0.0, (
        Task(0, 0, (1.0,), 1.0, frozenset({0})), Task(0, 1, (1.0,), 3.0, frozenset({1})))),)
    ).validate()
    solution = lp.interval_lp(instance, migration=migration)
    assert solution.objective == pytest.approx(6.0)
    assert solution.completion == {0: pytest.approx(3.0)}


def test_a_full_machine_serializes_the_ordering_lp_sees_it_the_interval_lp_less() -> None:
    # both jobs need the whole machine for 4 s: the optimum is 4 + 8 = 12. The ordering LP
    # finds it; the interval LP measures completions by intervals' left points, and its first
    # interval starts at 0, so it only knows that each job lasts 4 s
    instance = Instance(((1.0,),), (job(0, [4.0]), job(1, [4.0]))).validate()
    assert lp.ordering_lp(instance).objective == pytest.approx(12.0)
    for migration in (True, False):
        objective = lp.interval_lp(instance, migration=migration).objective
        assert 8.0 - 1e-6 <= objective <= 12.0 + 1e-6


def test_the_pooled_lp_is_a_relaxation_of_the_exact_one() -> None:
    instance = _placement_instance(seed=3)
    exact = lp.interval_lp(instance, migration=False, exact_columns=10**6)
    pooled = lp.interval_lp(instance, migration=False, exact_columns=0)
    assert exact.reduced is None and pooled.reduced
    assert pooled.objective <= exact.objective + 1e-6


def test_the_ordering_lp_refuses_placement_sets_of_several_machines() -> None:
    instance = Instance(((1.0,), (1.0,)), (job(0, [1.0], machines=(0, 1)),)).validate()
    with pytest.raises(InvalidInput, match="exactly one machine"):
        lp.ordering_lp(instance)


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("task, field", [
    (Task(0, 0, (0.5,), 1.0, frozenset()), "jobs[0].tasks[0].local"),
    (Task(0, 0, (0.5,), 1.0, frozenset({7})), "jobs[0].tasks[0].local"),
    (Task(0, 0, (2.0,), 1.0, frozenset({0})), "jobs[0].tasks[0].demand"),
    (Task(0, 0, (0.5,), -1.0, frozenset({0})), "jobs[0].tasks[0].duration"),
    (Task(0, 0, (0.5,), 1.0, frozenset({0}), 0.5), "jobs[0].tasks[0].remote_factor"),
])
def test_a_bad_instance_is_refused_naming_the_field(task: Task, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Instance(((1.0,),), (Job(0, "j", 1.0, 0.0, (task,)),)).validate()
    assert caught.value.field == field


def test_the_state_refuses_what_the_model_forbids() -> None:
    instance = Instance(((1.0,), (1.0,)), (job(0, [1.0, 1.0], demand=(0.6,)),)).validate()
    state = PackingState(instance)
    state.release(0)
    with pytest.raises(PackingViolation, match="may not run on machine 1"):
        state.start((0, 0), 1, migration=False)
    state.start((0, 0), 0, migration=False)
    with pytest.raises(PackingViolation, match="does not fit"):
        state.start((0, 1), 0, migration=False)


# -- every algorithm's schedule, checked from its segments ----------------------------------------


def check_schedule(instance: Instance, run: PackingRun, preemptive: bool) -> None:
    """Capacity, placement and completion, from the segments alone."""
    done: dict[tuple[int, int], float] = defaultdict(float)
    machines_used: dict[tuple[int, int], set[int]] = defaultdict(set)
    for segment in run.segments:
        task = instance.jobs[segment.key[0]].tasks[segment.key[1]]
        duration = task.duration_on(segment.machine)
        assert duration is not None, f"{segment.key} ran outside its placement set"
        assert segment.start >= instance.jobs[segment.key[0]].release - 1e-9
        done[segment.key] += (segment.end - segment.start) / duration
        machines_used[segment.key].add(segment.machine)
    for task in instance.tasks():
        assert done[(task.job, task.index)] == pytest.approx(1.0, abs=1e-6)
        if not preemptive:
            assert len(machines_used[(task.job, task.index)]) == 1
    for m, capacity in enumerate(instance.capacities):
        mine = [s for s in run.segments if s.machine == m and s.end > s.start]
        for moment in {s.start for s in mine}:
            load = [0.0] * len(capacity)
            for s in mine:
                if s.start <= moment < s.end - 1e-12:
                    task = instance.jobs[s.key[0]].tasks[s.key[1]]
                    load = [a + b for a, b in zip(load, task.demand, strict=True)]
            assert all(a <= c + 1e-6 for a, c in zip(load, capacity, strict=True)), (m, moment)
    for j, completion in run.completion.items():
        last = max(s.end for s in run.segments if s.key[0] == j)
        assert completion == pytest.approx(last)


@st.composite
def instances(draw, single: bool) -> Instance:
    machines = draw(st.integers(1, 3))
    capacities = tuple((draw(st.sampled_from([1.0, 2.0])), 1.0) for _ in range(machines))
    jobs = []
    for j in range(draw(st.integers(1, 4))):
        tasks = []
        for i in range(draw(st.integers(1, 3))):
            demand = (draw(st.sampled_from([0.2, 0.5, 1.0])), draw(st.sampled_from([0.3, 0.7])))
            if single:
                local, remote = frozenset({draw(st.integers(0, machines - 1))}), None
            else:
                local = frozenset(draw(st.lists(st.integers(0, machines - 1), min_size=1,
                                                max_size=2, unique=True)))
                remote = draw(st.sampled_from([None, 1.5, 3.0]))
            tasks.append(Task(j, i, demand, draw(st.sampled_from([1.0, 2.5, 4.0, 7.0])),
                              local, remote))
        jobs.append(Job(j, f"j{j}", draw(st.sampled_from([1.0, 2.0, 5.0])),
                        draw(st.sampled_from([0.0, 0.0, 1.0, 3.5])), tuple(tasks)))
    return Instance(capacities, tuple(jobs)).validate()


def _algorithms(setting: str) -> list[str]:
    return [name for name in PACKING_POLICIES.names()
            if setting in PACKING_POLICIES.get(name).settings]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(single=True), st.booleans())
def test_single_machine_sets_every_schedule_is_valid_and_above_the_bounds(
        instance: Instance, online: bool) -> None:
    bounds = [lp.ordering_lp(instance).objective,
              lp.interval_lp(instance, migration=True).objective]
    for algorithm in _algorithms("single"):
        run = simulate(instance, algorithm, online=online, record=True)
        check_schedule(instance, run, PACKING_POLICIES.get(algorithm).preemptive)
        cost = sum(instance.jobs[j].weight * c for j, c in run.completion.items())
        assert all(bound <= cost + 1e-6 for bound in bounds), (algorithm, cost, bounds)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(single=False), st.booleans())
def test_placement_sets_every_schedule_is_valid_and_above_its_bound(
        instance: Instance, online: bool) -> None:
    migrating = lp.interval_lp(instance, migration=True).objective
    fixed = lp.interval_lp(instance, migration=False).objective
    assert migrating <= fixed + 1e-6  # migration relaxes the problem further
    for algorithm in _algorithms("placement"):
        policy = PACKING_POLICIES.get(algorithm)
        run = simulate(instance, algorithm, online=online, record=True)
        check_schedule(instance, run, policy.preemptive)
        cost = sum(instance.jobs[j].weight * c for j, c in run.completion.items())
        bound = migrating if policy.migration else fixed
        assert bound <= cost + 1e-6, (algorithm, cost, bound)


@pytest.mark.parametrize("algorithm", ["lp-np", "lp-np-greedy"])
def test_a_non_preemptive_scheduler_never_preempts_and_lp_np_follows_the_lp(
        algorithm: str) -> None:
    instance = _placement_instance(seed=5)
    run = simulate(instance, algorithm, record=True)
    assert run.counts["preemptions"] == 0 and run.figures["lp_solves"] == 1
    check_schedule(instance, run, preemptive=False)


@pytest.mark.parametrize("algorithm", ["lp-np", "lp-np-greedy"])
def test_lp_np_waits_for_the_local_machine_the_lp_chose_where_greedy_goes_remote(
        algorithm: str) -> None:
    # both tasks fill machine 0, their data's; machine 1 would take 10x as long
    instance = Instance(((1.0,), (1.0,)), (job(0, [1.0], remote=10.0),
                                           job(1, [1.0], remote=10.0))).validate()
    greedy = simulate(instance, "wspt")
    assert greedy.counts["remote_starts"] == 1 and max(greedy.completion.values()) == 10.0
    run = simulate(instance, algorithm, record=True)
    assert run.counts["remote_starts"] == 0
    assert sorted(run.completion.values()) == [1.0, 2.0]
    check_schedule(instance, run, preemptive=False)


# -- workloads and the experiment ---------------------------------------------------------------


TRACE = [TraceJob(n + 1, 2.0 * n, 1.0, tuple(1.0 + (n * 7 + i) % 5 for i in range(1 + n % 4)))
         for n in range(30)]


def _placement_instance(seed: int) -> Instance:
    return build_instance(TRACE, jobs=8, max_tasks=4, machines=5, setting="placement",
                          weights="random", seed=seed)


def test_an_online_instance_is_scaled_to_the_offered_load() -> None:
    instance = build_instance(TRACE, jobs=20, max_tasks=4, machines=3, setting="single",
                              weights="priority", seed=1, load=1.2)
    assert offered_load(instance) == pytest.approx(1.2)
    assert all(1.0 <= job.weight <= 12.0 for job in instance.jobs)


def test_bad_workload_options_are_refused_naming_the_option() -> None:
    with pytest.raises(InvalidInput) as caught:
        build_instance(TRACE, jobs=5, max_tasks=4, machines=2, setting="placement",
                       weights="equal", seed=1, local=3)
    assert caught.value.field == "--local"
    with pytest.raises(InvalidInput) as caught:
        build_instance(TRACE, jobs=5, max_tasks=4, machines=2, setting="single",
                       weights="heavy", seed=1)
    assert caught.value.field == "--weights"


def test_the_experiment_runs_end_to_end_at_a_tiny_size(tmp_path) -> None:
    from megha.cli import main

    trace = tmp_path / "tiny.tr"
    trace.write_text("".join(f"{job.arrival} {job.width} 1.0 "
                             f"{' '.join(str(d) for d in job.durations)}\n" for job in TRACE))
    out = tmp_path / "out"
    assert main(["experiment", "packing", "--trace", str(trace), "--offline-jobs", "6",
                 "--jobs", "12", "--machines", "3", "--weights", "equal,priority",
                 "--loads", "1.2", "--out", str(out), "--html", str(out / "r.html")]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"] == "packing"
    names = {run["name"] for run in results["runs"]}
    # (6 single + 7 placement algorithms) x (offline, online) x 2 weight schemes
    assert len(names) == len(results["runs"]) == (6 + 7) * 2 * 2
    for run in results["runs"]:
        assert {"jct", "allocation", "counts", "weighted_jct", "lp_bound"} <= set(run)
        assert run["ratio_to_bound"] >= 1.0 - 1e-6, run["name"]
        # a migrating schedule is measured against the LP that allows migration
        assert run["bound_lp"] == ("migration" if run["algorithm"] == "lp-migrate" else
                                   "ordering" if run["setting"] == "single" else "no-migration")
    placement = [b for b in results["bounds"] if b["setting"] == "placement"]
    for bound in placement:  # migration relaxes: its bound is never above the other
        assert bound["lp_migration_bound"] <= bound["lp_bound"] * (1 + 1e-6)
    assert (out / "table.txt").read_text().count("LP bound with migration") == 1
    assert "<img" in (out / "r.html").read_text()


def test_packing_cluster_runs_the_gms_policies_saturated(tmp_path) -> None:
    """`packing-cluster`: the GMs' job policies with each placement, at an offered load past
    saturation; every run's log is in --out and the lp runs say what their solves did."""
    from megha.cli import main

    out = tmp_path / "out"
    assert main(["experiment", "packing-cluster", "--jobs", "40",
                 "--nodes", "12", "--loads", "1.3", "--weights", "random",
                 "--values", "wspt,lp", "--workers", "1", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["experiment"] == "packing-cluster"
    runs = {run["name"]: run for run in results["runs"]}
    assert set(runs) == {f"{policy}+{placement} load 1.3 random" for policy in ("wspt", "lp")
                         for placement in ("first_fit", "tetris")}
    for name, run in runs.items():
        assert run["jct"]["overall"]["count"] == 40 and run["jct"]["weighted"] is True
        assert run["policies"]["placement"] == name.split("+")[1].split()[0]
        assert (out / f"{name.replace(' ', '_')}.log").exists()
        solved = run["lp"]["solves"]
        assert (solved > 0) if name.startswith("lp+") else solved == 0
    assert "Weighted mean JCT" in (out / "table.txt").read_text()
