"""The size-aware job policies (common/policies/jobs/): the queue ladder and its weighted
sharing, SLearn's adaptive sampling ratio, the history predictors, against hand-computed
cases; and a property of the GM's pass: no priority queue starves."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidInput
from common.gm_records import JobRecord
from common.lifecycle import TaskState
from common.models import JobSpec, TaskSpec
from common.pending import Backlog
from common.policies.job import (
    JOB_POLICIES,
    JobOptions,
    JobProgress,
    LadderOptions,
    SamplingOptions,
)
from common.policies.jobs.history import RuntimeHistory, features
from common.policies.jobs.ladder import LevelShares, QueueLadder
from common.policies.jobs.predictors import OraclePolicy
from common.policies.jobs.sampling import AdaptiveSampling
from common.reasons import Reason
from common.resources import Resources


def progress(tasks: int, seq: int = 1, *, name: str | None = None, user: str = "u1",
             true_work: float = 0.0) -> JobProgress:
    return JobProgress(tasks, seq, 0.0, None, user=user, name=name, true_work=true_work)


# -- the ladder ---------------------------------------------------------------------------------


def test_levels_grow_tenfold_from_a_thousand_task_seconds() -> None:
    ladder = QueueLadder()  # the paper's: 10 levels, 10^6 ms, factor 10
    assert [ladder.level_of(w) for w in (0, 999.9, 1000, 9999, 10_000, 1e5, 1e20)] == \
        [0, 0, 1, 1, 2, 3, 9]
    assert ladder.weights[:3] == (1.0, 0.1, 0.01) and len(ladder.weights) == 10
    assert ladder.sampling_level == 1 and QueueLadder(levels=1).sampling_level == 0
    with pytest.raises(InvalidInput, match="growth"):
        QueueLadder(growth=1.0)


def test_the_next_resource_goes_to_the_level_furthest_below_its_weighted_share() -> None:
    shares = LevelShares(QueueLadder(levels=3))
    shares.running[:] = [5, 0, 0]
    assert shares.pick([0, 1]) == 1  # 5 per unit of weight against 0
    shares.running[:] = [10, 1, 0]
    assert shares.pick([0, 1]) == 0  # 10 against 1 / 0.1 = 10: a tie goes up
    shares.running[:] = [11, 1, 0]
    assert shares.pick([0, 1]) == 1
    assert shares.pick([0, 1, 2]) == 2  # nothing running there
    shares.move(1, 2, 1)
    assert shares.running == [11, 0, 1]


# -- adaptive sampling (the paper's Figure 4) ---------------------------------------------------


def test_the_first_three_windows_try_three_two_then_four_percent() -> None:
    sampling = AdaptiveSampling(window=2)
    assert [sampling.next_ratio() for _ in range(6)] == [0.03, 0.03, 0.02, 0.02, 0.04, 0.04]
    assert sampling.next_ratio() == 0.03  # no job finished yet: the middle


def scored(window: int, scores: dict[float, list[float]]) -> AdaptiveSampling:
    sampling = AdaptiveSampling(window)
    for _ in range(3 * window):
        sampling.next_ratio()
    for ratio, jcts in scores.items():
        for jct in jcts:
            sampling.record(ratio, jct)
    return sampling


def test_going_down_that_pays_by_more_than_ten_percent_tries_one_percent() -> None:
    # 2% scores 1.5, 3% 2.0: 1.1 x 1.5 = 1.65 < 2.0, so the next job tries 1%
    assert scored(2, {0.03: [2.0, 2.0], 0.02: [1.0, 2.0], 0.04: [3.0]}).next_ratio() == 0.01
    # 2% at 1.9: 2.09 is not below 2.0, so 2% itself
    assert scored(2, {0.03: [2.0, 2.0], 0.02: [1.9, 1.9], 0.04: [3.0]}).next_ratio() == 0.02


def test_going_up_that_pays_tries_five_percent_and_the_best_then_stays() -> None:
    assert scored(2, {0.03: [2.0], 0.02: [2.5], 0.04: [1.5]}).next_ratio() == 0.05
    assert scored(2, {0.03: [2.0], 0.02: [2.5], 0.04: [1.9]}).next_ratio() == 0.04
    # once 1% has the lowest score, it is used
    assert scored(2, {0.03: [2.0], 0.02: [1.5], 0.01: [1.0]}).next_ratio() == 0.01


def test_a_score_is_the_mean_of_the_last_window_of_jobs() -> None:
    sampling = scored(2, {0.03: [10.0, 1.0, 3.0]})  # 10 has left the window
    assert sampling.scores() == {0.03: 2.0}


# -- history -------------------------------------------------------------------------------------


def test_history_predicts_from_the_least_varying_feature() -> None:
    history = RuntimeHistory(window=3, min_history=2)
    assert features("etl", "u1", 12) == [("name", "etl"), ("user", "u1"), ("width", 8)]
    assert history.samples(features("etl", "u1", 12)) is None  # nothing seen yet
    for name, mean in (("etl", 10.0), ("etl", 12.0), ("ml", 100.0)):
        history.record(features(name, "u1", 12), mean)
    # the user and width have seen 10, 12 and 100 (CoV ~1.2); the name etl 10 and 12 (~0.09)
    assert history.samples(features("etl", "u1", 12)) == [10.0, 12.0]
    assert history.samples(features("new", "u1", 12)) == [10.0, 12.0, 100.0]


def test_3sigma_mean_takes_the_histories_mean_point_est_its_median() -> None:
    rng = random.Random(0)
    for policy_name, expected in (("3sigma-mean", 40.0 * 4), ("point-est", 10.0 * 4)):
        policy = JOB_POLICIES.make(policy_name)
        for runtime in (10.0, 10.0, 100.0):
            done = progress(4, name="etl")
            done.attained = runtime * 4  # a mean task runtime of `runtime`
            policy.job_finished(done, 1.0)
        job = progress(4, name="etl")
        policy.admit(job, rng)
        assert job.estimate == pytest.approx(expected), policy_name
        assert job.level == 0  # both below 1,000 task-seconds
        fresh = progress(4, name="other", user="u9")
        policy.admit(fresh, rng)  # width 4 has history: the stand-in category
        assert fresh.estimate == pytest.approx(expected)


def test_3sigma_tl_sends_thin_jobs_to_the_top_unestimated() -> None:
    policy = JOB_POLICIES.make("3sigma-tl", JobOptions(slearn=SamplingOptions(thin_threshold=3)))
    for _ in range(2):
        done = progress(2, name="tiny")
        done.attained = 2 * 5000.0
        policy.job_finished(done, 1.0)
    thin = progress(2, name="tiny")
    policy.admit(thin, random.Random(0))
    assert thin.estimate is None and thin.level == 0
    plain = JOB_POLICIES.make("3sigma")
    for _ in range(2):
        plain.job_finished(done, 1.0)
    placed = progress(2, name="tiny")
    plain.admit(placed, random.Random(0))
    assert placed.estimate == 10_000.0 and placed.level == 2


def test_las_moves_a_job_down_as_its_attained_service_grows() -> None:
    policy = JOB_POLICIES.make("las")
    job = progress(100)
    policy.admit(job, random.Random(0))
    assert job.level == 0 and job.estimate is None
    for runtime, level in ((600.0, 0), (600.0, 1), (9000.0, 2)):
        job.finish(runtime)
        policy.task_finished(job, 0, runtime)
        assert job.level == level


def test_the_oracle_places_by_true_work() -> None:
    policy = JOB_POLICIES.make("oracle")
    job = progress(10, true_work=25_000.0)
    policy.admit(job, random.Random(0))
    assert (job.estimate, job.level) == (25_000.0, 2)


def test_slearn_adaptive_ratio_is_learnt_from_normalized_jcts() -> None:
    policy = JOB_POLICIES.make("slearn", JobOptions(slearn=SamplingOptions(score_window=1)))
    rng = random.Random(0)
    jobs = [progress(100, seq=n) for n in range(3)]
    for job in jobs:
        policy.admit(job, rng)
    assert [job.sampling_ratio for job in jobs] == [0.03, 0.02, 0.04]
    assert [len(job.pilots) for job in jobs] == [3, 2, 4]
    for job, jct in zip(jobs, (20.0, 10.0, 40.0), strict=True):
        job.finish(10.0)  # the longest task: JCT 20 is a normalized JCT of 2
        job.admitted_at = 0.0
        policy.job_finished(job, jct)
    assert policy.sampler.scores() == {0.03: 2.0, 0.02: 1.0, 0.04: 4.0}
    nxt = progress(100, seq=9)
    policy.admit(nxt, rng)
    assert nxt.sampling_ratio == 0.01  # 2% beat 3% by more than 10%
    with pytest.raises(InvalidInput, match="sampling_ratio"):
        SamplingOptions(sampling_ratio=2)


# -- no level starves ---------------------------------------------------------------------------

SLOT = Resources(1000, 1024)


def job_at_level(n: int, level: int, tasks: int) -> JobRecord:
    job_id = f"j{n}"
    specs = tuple(TaskSpec(f"{job_id}/{i}", job_id, SLOT, frozenset(), 1.0)
                  for i in range(tasks))
    # the oracle places a job by its true work: 10^(level+2.5) task-seconds is in `level`
    true_work = 10 ** (level + 2.5)
    record = JobRecord(JobSpec(job_id, "u1", specs, 0.0),
                       progress(tasks, seq=n, true_work=true_work))
    return record


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), min_size=1, max_size=10),
       st.lists(st.integers(0, 30), min_size=4, max_size=4),  # tasks already running per level
       st.integers(0, 40))  # free slots
def test_a_pass_shares_slots_by_weight_and_no_waiting_level_starves(jobs_spec, running, free):
    policy = OraclePolicy(JobOptions(queues=LadderOptions(levels=4)))
    backlog = Backlog(policy)
    backlog.shares.running[:] = running
    jobs = {}
    for n, (level, tasks) in enumerate(jobs_spec):
        job = job_at_level(n, level, tasks)
        policy.admit(job.progress, random.Random(0))
        assert job.progress.level == level
        job.level = level
        job.add_tasks()
        jobs[job.spec.job_id] = job
        for task in job.tasks:
            backlog.add(task)
    waiting = [sum(t for lv, t in jobs_spec if lv == level) for level in range(4)]
    placed_per_level = [0] * 4
    left = [free]

    def try_place(task) -> bool:
        if left[0] == 0:
            backlog.block((task.job.spec.user, task.shape), Reason.NO_CAPACITY)
            return False
        left[0] -= 1
        task.state = TaskState.PLACING
        placed_per_level[task.job.level] += 1
        backlog.occupy(task.job, 1)  # as the GM's _move does
        return True

    backlog.place(jobs, try_place, None)
    assert sum(placed_per_level) == min(free, sum(waiting))  # work-conserving
    weights = policy.ladder.weights
    final = backlog.shares.running
    for a in range(4):
        if not placed_per_level[a]:
            continue
        for b in range(4):
            if b == a or placed_per_level[b] == waiting[b]:
                continue  # b had nothing more to place
            # a's last slot went to it when it was no further above its share than b was
            assert ((final[a] - 1) / weights[a], a) < (final[b] / weights[b], b)
    # a level with waiting work and nothing running gets a slot whenever the pass has as many
    # slots as there are such levels
    idle = [level for level in range(4) if waiting[level] and not running[level]]
    if free >= len(idle):
        assert all(placed_per_level[level] for level in idle)
