"""The packing paper's algorithms as a GM's policies: the pooled LP (`lp`), the modified Smith
ratio (`psrs`) and Tetris's alignment (`tetris` placement), on their own, in a GM core, and
chosen by the federation file."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from bitarray import bitarray
from harness import Federation
from hypothesis import given, settings
from hypothesis import strategies as st
from one_gm_federation import one_gm_file
from test_wspt_policy import job, one_node_full_with_a_blocker

from common.cluster import ClusterState, ClusterTopology
from common.errors import InvalidInput
from common.federation import load_federation
from common.models import JobSpec, NodeSpec, Resources, TaskSpec
from common.policies.job import JOB_POLICIES, JobOptions, JobProgress, LPOrderOptions
from common.policies.jobs.lp_order import LPOrderPolicy, PsrsPolicy
from common.policies.jobs.pooled import PooledJob, pooled_lp
from common.policies.placement import PLACEMENT_POLICIES

ROOT = Path(__file__).resolve().parents[2]

# -- the pooled LP ------------------------------------------------------------------------------


def test_a_job_alone_completes_at_its_release_plus_its_span() -> None:
    solution = pooled_lp([PooledJob(1, 1.0, 3.0, (0.5, 0.2), 4.0)])
    assert solution.completion[1] == pytest.approx(7.0)


def test_between_equal_jobs_the_heavier_goes_first() -> None:
    """The interval measure (left points) may let it tie with one other: the policy breaks
    ties by weight."""
    solution = pooled_lp([PooledJob(1, 1.0, 0.0, (5.0,), 5.0), PooledJob(2, 3.0, 0.0, (5.0,), 5.0),
                          PooledJob(3, 1.0, 0.0, (5.0,), 5.0)])
    assert solution.completion[2] <= min(solution.completion[1], solution.completion[3])
    assert max(solution.completion.values()) > solution.completion[2]


def test_the_lp_sees_a_long_task_that_smiths_ratio_does_not() -> None:
    """Equal volumes, the first heavier: by weight over volume it goes first, but its one long
    task cannot end before 100 s whatever it gets, while the wide job can be done by 25."""
    long_thin = PooledJob(1, 10.0, 0.0, (25.0,), 100.0)
    wide_short = PooledJob(2, 9.0, 0.0, (25.0,), 25.0)
    solution = pooled_lp([long_thin, wide_short])
    assert solution.completion[2] < solution.completion[1]
    assert solution.completion[1] >= 100.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 5.0), st.floats(0.0, 20.0), st.floats(0.1, 10.0),
                          st.floats(0.1, 10.0), st.floats(0.1, 15.0)), min_size=1, max_size=12))
def test_the_lp_never_costs_more_than_a_schedule_and_never_ends_a_job_too_soon(jobs) -> None:
    """Its optimum is below the cost of one job after another, each with the pool to itself
    for as long as its longest task or its volume needs: a schedule, so a point of the LP."""
    pooled = [PooledJob(i, w, r, (a, b), span) for i, (w, r, a, b, span) in enumerate(jobs)]
    solution = pooled_lp(pooled)
    for item in pooled:
        assert (solution.completion[item.key]
                >= item.release + max(item.span, *item.volume) - 1e-6)
    clock = serial = 0.0
    for item in sorted(pooled, key=lambda item: item.release):
        clock = max(clock, item.release) + max(item.span, *item.volume)
        serial += item.weight * clock
    lp_cost = sum(item.weight * solution.completion[item.key] for item in pooled)
    assert lp_cost <= serial * (1 + 1e-6)


def test_a_solve_that_runs_out_of_time_keeps_the_previous_order() -> None:
    policy = LPOrderPolicy(JobOptions(lp=LPOrderOptions(time_limit=1e-9, resolve_first=1.0)))
    rng = random.Random(0)
    jobs = [progress(seq, width=rng.randint(1, 40), duration=rng.uniform(1, 100))
            for seq in range(1, 301)]
    for admitted in jobs:
        policy.admit(admitted, rng)
    assert policy.reorder(0.0, (4000.0, 4096.0)) is True  # the capacity: Smith's keys
    before = [policy.order_key(job) for job in jobs]
    assert policy.reorder(2.0, (4000.0, 4096.0)) is False  # HiGHS stops at once
    assert policy.timeouts == 1 and policy.last["timed_out"] is True
    assert [policy.order_key(job) for job in jobs] == before


# -- the policies ---------------------------------------------------------------------------------


def progress(seq: int, width: int, duration: float, weight: float = 1.0,
             cpu_m: int = 1000, mem_mib: int = 1024) -> JobProgress:
    tasks = tuple(TaskSpec(f"j{seq}/{i}", f"j{seq}", Resources(cpu_m, mem_mib), frozenset(),
                           duration) for i in range(width))
    return JobProgress.of(JobSpec(f"j{seq}", "u1", tasks, 0.0, weight=weight), seq, 0.0)


def test_job_progress_sums_the_room_a_job_takes() -> None:
    job = progress(1, width=3, duration=10.0, cpu_m=500, mem_mib=2048)
    assert (job.true_work, job.cpu_work, job.mem_work, job.longest_stated) == (
        30.0, 15_000.0, 61_440.0, 10.0)


def test_psrs_orders_by_weight_over_remaining_volume_and_rekeys_on_capacity() -> None:
    policy = JOB_POLICIES.make("psrs")
    assert isinstance(policy, PsrsPolicy)
    small_light = progress(1, width=1, duration=10.0, weight=1.0)  # 10 core-s / 1
    big_heavy = progress(2, width=4, duration=10.0, weight=8.0)  # 40 core-s / 8
    assert policy.reorder(0.0, (4000.0, 4096.0)) is True  # the first capacity re-keys
    assert policy.order_key(big_heavy) < policy.order_key(small_light)
    assert policy.reorder(1.0, (4000.0, 4096.0)) is False  # unchanged: nothing to do
    big_heavy.finish(10.0)
    big_heavy.finish(10.0)
    big_heavy.finish(10.0)  # 10 core-s left, over 8
    assert policy.order_key(big_heavy)[1] == pytest.approx(10.0 / 4.0 / 8.0)


def test_lp_solves_at_growing_intervals_only_when_jobs_changed() -> None:
    policy = LPOrderPolicy(JobOptions(lp=LPOrderOptions(resolve_first=2.0, resolve_growth=2.0,
                                                        resolve_max=5.0)))
    a, b = progress(1, width=1, duration=100.0, weight=10.0), progress(2, 4, 25.0, weight=9.0)
    policy.admit(a, random.Random(0))
    policy.admit(b, random.Random(0))
    capacity = (4000.0, 4096.0)
    policy.reorder(0.5, capacity)
    assert policy.solves == 0 and policy.order_key(a) < policy.order_key(b)  # Smith's, unsolved
    assert policy.reorder(2.0, capacity) is True and policy.solves == 1
    assert policy.order_key(b) < policy.order_key(a)  # the LP sees a's 100-s task
    assert policy.last["jobs"] == 2 and policy.next_solve == pytest.approx(6.0)  # 2 x 2
    assert policy.reorder(6.0, capacity) is False and policy.solves == 1  # nothing changed
    assert policy.next_solve == pytest.approx(11.0)  # capped at resolve_max
    late = progress(3, width=1, duration=1.0)
    policy.admit(late, random.Random(0))
    assert policy.order_key(late)[0] == 1  # after every solved job until the next solve
    policy.job_ended(a)
    assert policy.reorder(11.0, capacity) is True and policy.solves == 2
    assert set(policy.completion) == {2, 3}


# -- in a GM core ---------------------------------------------------------------------------------


def placed_after_the_blocker(policy: str) -> tuple[Federation, list[str]]:
    """One node of 4 cores full with a blocker; a heavy job with one 100-s task and a lighter
    one with four 25-s tasks (the same volume) wait; the GM's first solve is due after 1 s;
    the blocker ends and frees the 4 cores."""
    fed = one_node_full_with_a_blocker(policy)
    fed.submit("gm-1", job("long-thin", 1, 100.0, weight=10.0))
    fed.submit("gm-1", job("wide-short", 4, 25.0, weight=9.0))
    fed.run_until_quiet()
    fed.tick(2.0)  # past the first interval: the next pass solves
    fed.run_until_quiet()
    fed.finish_all(runtime=1.0)
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)
    fed.run_until_quiet()
    placed = [log.fields["job"] for _, log in fed.logs if log.event == "task_placed"]
    return fed, placed[4:]


def test_in_a_gm_lp_places_the_job_its_lp_finishes_first() -> None:
    fed, placed = placed_after_the_blocker("lp")
    assert placed == ["wide-short"] * 4
    solves = [log.fields for _, log in fed.logs if log.event == "jobs_reordered"]
    assert solves and solves[0]["gm"] == "gm-1" and solves[0]["jobs"] == 3  # the blocker too
    fed.drain()
    assert {ended.job_id for ended in fed.ended_jobs} == {"blocker", "long-thin", "wide-short"}
    assert not fed.gms["gm-1"].policy.live  # ended jobs leave the LP's view


def test_in_a_gm_psrs_places_by_weight_over_volume() -> None:
    _, placed = placed_after_the_blocker("psrs")
    assert placed[0] == "long-thin" and placed[1:] == ["wide-short"] * 3


# -- tetris placement -----------------------------------------------------------------------------


def test_tetris_sends_a_task_where_its_kind_of_room_is() -> None:
    nodes = [NodeSpec(name, "lm", "w1", Resources(4000, 8192))
             for name in ("cpu-rich", "mem-rich")]
    state = ClusterState(ClusterTopology("lm", nodes, ["g1"]))
    state.take(0, 0, 6144)  # 4000 m and 2048 MiB left
    state.take(1, 3000, 0)  # 1000 m and 8192 MiB left
    everyone = bitarray("11")
    tetris = PLACEMENT_POLICIES.make("tetris")
    assert tetris.choose(state, everyone, 1000, 512, 0) == 0  # a cpu-heavy task
    assert tetris.choose(state, everyone, 250, 2048, 0) == 1  # a memory-heavy one
    assert tetris.choose(state, everyone, 4000, 4096, 0) == -1  # fits nowhere


# -- the federation file --------------------------------------------------------------------------

def lp_file(lp: str) -> str:
    return one_gm_file('[policies]\njob = "lp"\nplacement = "tetris"\n\n'
                       f"[policies.lp]\n{lp}")


def test_the_federation_file_chooses_lp_with_its_options() -> None:
    federation = load_federation(lp_file("resolve_first = 3.0\nmax_jobs = 50"))
    config = federation.gm_config("g1")
    assert (config.job_policy, config.placement) == ("lp", "tetris")
    assert config.job_policy_options.lp == LPOrderOptions(resolve_first=3.0, max_jobs=50)
    policy = JOB_POLICIES.make("lp", config.job_policy_options)
    assert (policy.resolve_first, policy.max_jobs, policy.resolve_max) == (3.0, 50, 10.0)


@pytest.mark.parametrize(("line", "key"), [("resolve_first = 0", "resolve_first"),
                                           ("resolve_max = 0.5", "resolve_max"),
                                           ("max_jobs = 0", "max_jobs"),
                                           ("resolve_growth = 0.9", "resolve_growth")])
def test_bad_lp_options_are_refused_by_name(line: str, key: str) -> None:
    with pytest.raises(InvalidInput, match=key):
        load_federation(lp_file(line))


# -- in the simulator, saturated ------------------------------------------------------------------


def test_a_saturated_simulation_with_lp_and_tetris_finishes_every_job(tmp_path) -> None:
    """Offered load 1.5 until the arrivals stop, then the backlog drains: every job ends, the
    end-of-run invariants hold, the GMs solved, and the summary shows the weighted mean."""
    log, results = tmp_path / "lp.log", tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "40", "--gms", "2", "--lms", "2",
         "--poisson", "2", "--count", "150", "--width", "uniform:1,12",
         "--cpu-m", "choice:500,2000,8000", "--mem-mib", "choice:512,4096,16384",
         "--weight", "uniform:1,10", "--target-load", "1.5", "--job-policy", "lp",
         "--placement", "tetris", "--log", str(log), "--results", str(results)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "weighted mean" in done.stdout
    report = json.loads(results.read_text())
    assert report["jct"]["overall"]["count"] == 150
    assert report["policies"]["job"] == "lp" and report["policies"]["placement"] == "tetris"
    solves = [json.loads(line) for line in log.read_text().splitlines()
              if '"jobs_reordered"' in line]
    assert {solve["gm"] for solve in solves} == {"gm-1", "gm-2"}
    assert all(solve.get("timed_out") is None for solve in solves)
