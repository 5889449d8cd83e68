"""Job policies (fifo, slearn; the other predictors in test_job_predictors.py) and fairness
(Algorithm 2) as plain objects."""

from __future__ import annotations

import random

import pytest

from common.cluster import RunningInfo
from common.errors import InvalidInput
from common.policies.fairness import (
    FAIRNESS_POLICIES,
    FairShare,
    UserQueue,
    choose_victims,
    dominant_usage,
)
from common.policies.job import JOB_POLICIES, JobOptions, JobProgress, SamplingOptions
from common.policies.jobs.predictors import SLearnPolicy


def progress(tasks: int, seq: int = 1) -> JobProgress:
    return JobProgress(num_tasks=tasks, seq=seq, arrival=0.0, trace_estimate=None)


def test_unknown_policies_are_named_in_the_error() -> None:
    known = ("3sigma, 3sigma-mean, 3sigma-tl, fewest-tasks, fifo, las, lp, oracle, point-est, "
             "psrs, slearn, wspt")
    with pytest.raises(InvalidInput, match=f"unknown policy 'lifo' \\(known: {known}\\)"):
        JOB_POLICIES.make("lifo")
    with pytest.raises(InvalidInput, match="fairness"):
        FAIRNESS_POLICIES.make("drf", queues=[])


def test_slearn_samples_three_percent_at_least_one_and_skips_thin_jobs() -> None:
    policy = SLearnPolicy()
    rng = random.Random(1)
    thin, wide, wider = progress(2), progress(40), progress(1000)
    for job in (thin, wide, wider):
        policy.admit(job, rng)
    assert thin.pilots == frozenset() and len(wide.pilots) == 1 and len(wider.pilots) == 30
    assert policy.order_key(thin) < policy.order_key(wide)  # thin jobs go first


def test_slearn_estimates_from_the_mean_pilot_runtime_then_queues_by_estimated_work() -> None:
    policy = SLearnPolicy(JobOptions(slearn=SamplingOptions(sampling_ratio=0.1)))
    short, long = progress(20, seq=1), progress(20, seq=2)
    for job in (short, long):
        policy.admit(job, random.Random(3))
        assert job.level == 1  # the sampling queue, second highest
    runtimes = {"short": [1.0, 3.0], "long": [100.0, 300.0]}
    for job, name in ((short, "short"), (long, "long")):
        pilots = sorted(job.pilots)
        job.finish(runtimes[name][0])
        assert policy.task_finished(job, pilots[0], runtimes[name][0]) is False
        job.finish(runtimes[name][1])
        assert policy.task_finished(job, pilots[1], runtimes[name][1]) is True  # released
    assert short.estimated_task_duration == 2.0 and long.estimated_task_duration == 200.0
    assert (short.estimate, long.estimate) == (40.0, 4000.0)  # mean pilot runtime x 20 tasks
    assert short.estimated_remaining_work == 2.0 * 18
    assert (short.level, long.level) == (0, 1)  # below 1,000 task-seconds; below 10,000
    assert policy.order_key(short) < policy.order_key(long)
    assert policy.task_finished(short, 5, 100.0) is False  # non-pilots do not move it


def test_fair_share_takes_from_the_largest_violation_first() -> None:
    queues = [UserQueue("q1", 0.10, "gm-1"), UserQueue("q2", 0.25, "gm-2"),
              UserQueue("q3", 0.15, "gm-2"), UserQueue("q4", 0.50, "gm-3")]
    fair = FairShare(queues)
    usage = {"q1": (0.02, 0.01), "q2": (0.30, 0.1), "q3": (0.1, 0.40), "q4": (0.28, 0.2)}
    assert fair.victim_queues("q1", usage) == ["q3", "q2"]  # memory makes q3 the largest
    assert fair.victim_queues("q3", usage) == []  # above its share: it waits
    assert fair.victim_queues("q1", {"q1": (0.10, 0.0)}) == []


def test_no_preemption_that_would_only_swap_who_is_over_share() -> None:
    fair = FairShare([UserQueue("a", 0.5, "g1"), UserQueue("b", 0.5, "g2")])
    usage = {"a": (0.4, 0.0), "b": (0.6, 0.0)}
    assert fair.victim_queues("a", usage, demand=(0.1, 0.0)) == ["b"]
    assert fair.victim_queues("a", usage, demand=(0.2, 0.0)) == []  # a would exceed 0.5
    assert fair.may_take("b", usage, freed=(0.1, 0.0))
    assert not fair.may_take("b", usage, freed=(0.2, 0.0))  # b would fall below 0.5


def test_queue_shares_are_validated() -> None:
    with pytest.raises(InvalidInput, match=r"queues\[1\].share"):
        FairShare([UserQueue("a", 0.5, "g"), UserQueue("b", 0.0, "g")])
    with pytest.raises(InvalidInput, match="add up to"):
        FairShare([UserQueue("a", 0.7, "g"), UserQueue("b", 0.7, "g")])
    with pytest.raises(InvalidInput, match="duplicate queue"):
        FairShare([UserQueue("a", 0.2, "g"), UserQueue("a", 0.2, "g")])


def test_victims_are_the_fewest_that_make_room_and_usage_is_dominant_share() -> None:
    running = [RunningInfo(f"v{k}", 0, "gm-2", "q2", cpu, 100, False)
               for k, cpu in enumerate((500, 2000, 1000))]
    assert choose_victims(running, 500, 1000, 2400, 100) == ("v1",)
    assert choose_victims(running, 0, 1000, 3000, 100) == ("v1", "v2")
    assert choose_victims(running, 0, 0, 5000, 100) is None
    usage = dominant_usage(running, total_cpu=10_000, total_mem=600)
    assert usage == {"q2": pytest.approx(0.5)}  # memory (300 of 600) dominates cpu (0.35)
