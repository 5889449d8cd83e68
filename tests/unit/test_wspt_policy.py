"""The `wspt` job policy: Smith's rule (highest weight / remaining work first), on its own and
in a GM core whose cluster is short of capacity."""

from __future__ import annotations

import random

import pytest
from harness import Federation
from one_gm_federation import one_gm_file

from common.federation import load_federation
from common.models import JobSpec, TaskSpec
from common.policies.job import JOB_POLICIES, JobProgress
from common.policies.jobs.weighted import WeightedShortestFirstPolicy, remaining_work
from common.resources import Resources


def progress(seq: int, work: float, weight: float = 1.0, tasks: int = 1,
             trace_estimate: float | None = None) -> JobProgress:
    return JobProgress(tasks, seq, float(seq), trace_estimate, true_work=work, weight=weight)


def order(policy, jobs: list[JobProgress]) -> list[int]:
    return [job.seq for job in sorted(jobs, key=policy.order_key)]


def test_wspt_is_registered_without_a_ladder_or_pilots() -> None:
    policy = JOB_POLICIES.make("wspt")
    assert isinstance(policy, WeightedShortestFirstPolicy) and policy.name == "wspt"
    assert policy.ladder is None  # one queue, by `order_key`; it reads none of its options
    job = progress(1, 10.0)
    policy.admit(job, random.Random(0))
    assert job.pilots == frozenset() and job.estimate is None


def test_a_heavy_short_job_goes_ahead_of_a_light_long_one() -> None:
    policy = JOB_POLICIES.make("wspt")
    light_long = progress(1, work=100.0, weight=1.0)  # ratio 100
    heavy_short = progress(2, work=20.0, weight=4.0)  # ratio 5
    assert order(policy, [light_long, heavy_short]) == [2, 1]
    assert policy.worker_priority(heavy_short) == pytest.approx(5.0)
    assert policy.worker_priority(light_long) == pytest.approx(100.0)
    # weight outweighs size: 10x the work but 20x the weight still goes first
    heavy_long = progress(3, work=200.0, weight=20.0)  # ratio 10
    assert order(policy, [progress(4, work=20.0), heavy_long]) == [3, 4]


def test_equal_weights_reduce_to_shortest_first_then_arrival() -> None:
    policy = JOB_POLICIES.make("wspt")
    jobs = [progress(1, 30.0, 2.0), progress(2, 10.0, 2.0), progress(3, 20.0, 2.0),
            progress(4, 10.0, 2.0)]
    assert order(policy, jobs) == [2, 4, 3, 1]


def test_the_key_follows_the_remaining_work_as_tasks_finish() -> None:
    policy = JOB_POLICIES.make("wspt")
    wide = progress(1, work=40.0, tasks=4)  # 4 tasks of 10 s
    single = progress(2, work=30.0)
    assert order(policy, [wide, single]) == [2, 1]
    wide.finish(10.0)
    wide.finish(10.0)
    assert remaining_work(wide) == pytest.approx(20.0)
    assert order(policy, [wide, single]) == [1, 2]  # nearly done: it overtakes
    wide.finish(25.0)  # ran longer than it said: the rest is not negative
    assert remaining_work(wide) == 0.0 and policy.worker_priority(wide) == 0.0


def test_without_stated_durations_the_trace_estimate_then_weight_and_arrival_order() -> None:
    policy = JOB_POLICIES.make("wspt")
    estimated = progress(1, work=0.0, tasks=3, trace_estimate=5.0)
    assert remaining_work(estimated) == pytest.approx(15.0)
    light = progress(2, work=0.0)
    heavy = progress(3, work=0.0, weight=3.0)
    light_later = progress(4, work=0.0)
    assert remaining_work(light) is None
    assert order(policy, [light_later, heavy, light, estimated]) == [1, 3, 2, 4]
    assert policy.worker_priority(light) == light.arrival  # as fifo, without a size


def test_the_federation_file_selects_wspt() -> None:
    federation = load_federation(one_gm_file('[policies]\njob = "wspt"'))
    assert federation.policies.job == "wspt"
    assert federation.gm_config("g1").job_policy == "wspt"


# -- in a GM core ------------------------------------------------------------------------------


def job(job_id: str, width: int, duration: float, weight: float = 1.0) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(1000, 1024), frozenset(),
                           duration) for i in range(width))
    return JobSpec(job_id, "u1", tasks, 0.0, weight=weight)


def placed_jobs(fed: Federation) -> list[str]:
    return [log.fields["job"] for _, log in fed.logs if log.event == "task_placed"]


def one_node_full_with_a_blocker(policy: str) -> Federation:
    """One GM, one LM of one node of 4 cores, full with a blocker of 4 one-core tasks of 1 s:
    jobs submitted now wait for it to end, then compete for those 4 cores."""
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=1, job_policy=policy,
                            constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    fed.submit("gm-1", job("blocker", 4, 1.0))
    fed.run_until_quiet()
    return fed


def run_short_of_capacity(policy: str) -> tuple[Federation, list[str]]:
    """A light long job then a heavy short one, 4 one-core tasks each, wait behind the
    blocker; it ends: 4 cores for their 8 tasks."""
    fed = one_node_full_with_a_blocker(policy)
    assert placed_jobs(fed) == ["blocker"] * 4
    fed.submit("gm-1", job("light-long", 4, 25.0, weight=1.0))  # 100 task-s / 1
    fed.submit("gm-1", job("heavy-short", 4, 5.0, weight=4.0))  # 20 task-s / 4
    fed.run_until_quiet()
    assert placed_jobs(fed) == ["blocker"] * 4  # nothing fits yet
    fed.finish_all(runtime=1.0)
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)  # the LM's heartbeat shows the freed cores
    fed.run_until_quiet()
    return fed, placed_jobs(fed)[4:]


def test_with_wspt_the_higher_weight_per_work_job_is_placed_first() -> None:
    fed, placed = run_short_of_capacity("wspt")
    assert placed == ["heavy-short"] * 4
    gm = fed.gms["gm-1"]
    assert gm.jobs["heavy-short"].key < gm.jobs["light-long"].key
    arrived = {log.fields["job"]: log.fields for _, log in fed.logs
               if log.event == "job_arrived"}
    assert arrived["heavy-short"]["weight"] == 4.0 and arrived["light-long"]["weight"] == 1.0
    # a finish shrinks the remaining work, and the GM refiles the job under its new key
    attempt = next(iter(fed.executing))
    fed.finish(attempt, runtime=5.0)
    fed.run_until_quiet()
    assert gm.jobs["heavy-short"].key[1] == pytest.approx((20.0 - 5.0) / 4.0)
    fed.drain()
    assert {ended.job_id for ended in fed.ended_jobs} == {"blocker", "light-long",
                                                           "heavy-short"}


def test_with_fifo_the_same_jobs_go_by_arrival() -> None:
    _, placed = run_short_of_capacity("fifo")
    assert placed == ["light-long"] * 4
