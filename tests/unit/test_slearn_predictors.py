"""The SLearn paper's baselines as it specifies them: 3Sigma trained on the first half of a
workload and estimating by expected utility, LAS by the service attained so far (running
tasks included); and the experiment's held-out split, sweeps and prediction-error table.
Hand-worked cases, no simulation."""

from __future__ import annotations

import random

import pytest
from harness import Federation

from common.errors import InvalidInput
from common.models import JobSpec, TaskSpec
from common.policies.job import JOB_POLICIES, JobOptions, JobProgress, RuntimeHistoryOptions
from common.policies.jobs.history import FinishedJob, history_mean, point, utility_estimate
from common.resources import Resources
from megha.cli import build_parser
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.slearn import (
    Cluster,
    Variant,
    _federation,
    held_out,
    prediction_error,
)


def progress(tasks: int, seq: int = 1, *, name: str | None = None,
             user: str = "u1") -> JobProgress:
    return JobProgress(tasks, seq, 0.0, None, user=user, name=name)


def job(job_id: str, width: int, duration: float) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(1000, 1024), frozenset(), duration)
                  for i in range(width))
    return JobSpec(job_id, "u1", tasks, 0.0)


def trained(policy: str, history: list[FinishedJob]) -> object:
    return JOB_POLICIES.make(policy, JobOptions(history=RuntimeHistoryOptions(
        training=tuple(history))))


# -- 3Sigma's estimate ---------------------------------------------------------------------------


def test_3sigmas_estimate_is_the_runtime_of_the_histories_expected_utility() -> None:
    # utility 1/t^2 over the history {1 s, 7 s}: (1 + 1/49) / 2 = 25/49, the utility of 7/5 s.
    # The mean (4 s) and the median (4 s) both ignore that half the runs take 1 s.
    history = [1.0, 7.0]
    assert utility_estimate(history) == pytest.approx(1.4)
    assert history_mean(history) == point(history) == 4.0
    runs = [FinishedJob("etl", "u1", 4, runtime) for runtime in history]
    for policy, per_task in (("3sigma", 1.4), ("3sigma-mean", 4.0)):
        job = progress(4, name="etl")
        trained(policy, runs).admit(job, random.Random(0))
        assert job.estimate == pytest.approx(per_task * 4), policy
    assert utility_estimate([0.0, 5.0]) == 0.0  # a zero runtime: unbounded utility
    assert utility_estimate([3.0, 3.0]) == pytest.approx(3.0)  # no spread: the runtime


# -- trained against online ----------------------------------------------------------------------


def test_trained_3sigma_places_a_known_job_type_where_online_3sigma_starts_it_at_the_top() -> None:
    # the first half ran "etl" at 5,000 s a task: 4 tasks are 20,000 task-seconds, level 2
    history = [FinishedJob("etl", "u1", 4, 5000.0), FinishedJob("etl", "u1", 4, 5000.0)]
    known, online = progress(4, name="etl"), progress(4, name="etl")
    trained("3sigma", history).admit(known, random.Random(0))
    JOB_POLICIES.make("3sigma").admit(online, random.Random(0))
    assert (known.estimate, known.level) == (pytest.approx(20_000.0), 2)
    assert (online.estimate, online.level) == (None, 0)  # unknown: the top-queue default
    with pytest.raises(InvalidInput, match="training.width"):
        FinishedJob("etl", "u1", 0, 1.0)


CLUSTER = Cluster(nodes=20, gms=1, lms=1, heartbeat=10.0, nodes_per_worker=10,
                  variability=None)


def tiny(count: int, history: str = "trained"):
    args = build_parser("experiment").parse_args(
        ["experiment", "slearn", "--count", str(count), "--jobs", "10", "--history", history])
    return EXPERIMENTS.get("slearn").options(args)


def test_the_held_out_half_meets_a_trained_3sigma_that_knows_its_recurring_jobs() -> None:
    options = tiny(80)
    settings = options.workloads["drifting"]
    held = held_out("drifting", settings, CLUSTER, trained=True)
    assert len(held.training) == len(held.jobs) == 80  # twice --count, split in halves
    assert [job.arrival for job in held.jobs] == sorted(job.arrival for job in held.jobs)
    # the training reaches the GM's policy through [policies.history], nothing else
    federation = _federation(CLUSTER, Variant("3sigma", "3sigma"), held.training, 0)
    config = federation.gm_config(next(iter(federation.gms)))
    assert config.job_policy_options.history.training == held.training
    policy = JOB_POLICIES.make("3sigma", config.job_policy_options)
    online = JOB_POLICIES.make("3sigma")
    estimated = {"trained": 0, "online": 0}
    below_top = 0
    families = {job.name for job in held.jobs if job.name and job.name.startswith("fam-")}
    trained_families = {job.name for job in held.training}
    assert families & trained_families  # recurring families run in both halves
    for seq, spec in enumerate(held.jobs, start=1):
        for name, made in (("trained", policy), ("online", online)):
            job = progress(spec.width, seq, name=spec.name, user=spec.user)
            made.admit(job, random.Random(0))
            estimated[name] += job.estimate is not None
            below_top += name == "trained" and job.level > 0
    assert estimated["online"] == 0  # nothing finished yet: every job at the top, unestimated
    assert estimated["trained"] == len(held.jobs)  # every job like one of the first half
    assert below_top > 0  # and not all at the top-queue default
    assert held_out("drifting", tiny(80, "online").workloads["drifting"], CLUSTER,
                    trained=False).training == ()


# -- LAS by attained service ------------------------------------------------------------------


def test_las_demotes_a_wide_job_while_its_long_tasks_run() -> None:
    # 20 of 100 tasks run from t = 0; the first bound is 1,000 task-seconds. At t = 10 the
    # job has attained 200, at t = 60 1,200: level 1, though no task has finished.
    las = JOB_POLICIES.make("las")
    wide = progress(100)
    las.admit(wide, random.Random(0))
    for index in range(20):
        wide.ran(index, 0.0)
    assert las.reorder(10.0, (0.0, 0.0)) is False and wide.level == 0
    # it looks again at the predicted crossing (t = 50), or within LAS_LOOK_EVERY
    assert las.reorder(10.5, (0.0, 0.0)) is False
    assert las.reorder(60.0, (0.0, 0.0)) is True and wide.level == 1 and wide.done == 0
    wide.ran(0, None)  # preempted: the service it had is not taken back
    assert las.reorder(70.0, (0.0, 0.0)) is False and wide.level == 1
    # a finish counts at once: 19 x 70 running + 9,000 finished passes 10,000
    wide.ran(1, None)
    wide.finish(9000.0)
    las.task_finished(wide, 1, 9000.0)
    assert wide.level == 2


def test_las_in_the_gm_demotes_a_running_wide_job_before_the_next_job_is_placed() -> None:
    """Through the GM: 8 tasks start at t = 0 and run; at t = 200 the job has attained 1,600
    task-seconds and a new job arrives: the wide job is in level 1 before any task of it
    ended, and the newcomer at the top."""
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=4, job_policy="las",
                            constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("wide", 8, 1000.0))
    fed.run_until_quiet()
    wide = gm.jobs["wide"]
    assert len(wide.progress.running) == 8 and wide.level == 0
    fed.now = 200.0
    fed.submit("gm-1", job("next", 1, 1.0))
    assert wide.progress.done == 0 and wide.level == 1 and gm.jobs["next"].level == 0


# -- the experiment's own figures and options ----------------------------------------------------


def test_prediction_error_is_the_papers_over_wide_jobs(tmp_path) -> None:
    log = tmp_path / "events.log"
    lines = [
        '{"ts":1,"event":"job_done","tasks":4,"estimate":150.0,"work":100.0}',  # 50% over
        '{"ts":2,"event":"job_done","tasks":3,"estimate":90.0,"work":100.0}',  # 10% under
        '{"ts":3,"event":"job_done","tasks":2,"estimate":900.0,"work":100.0}',  # thin: out
        '{"ts":4,"event":"job_done","tasks":5,"estimate":null,"work":100.0}',  # no estimate
        '{"ts":5,"event":"task_done","job_done":1}',
    ]
    log.write_text("\n".join(lines) + "\n")
    error = prediction_error(log)
    assert (error["wide_jobs"], error["estimated"]) == (3, 2)
    assert error["p50"] == pytest.approx(0.3) and error["mean"] == pytest.approx(0.3)


@pytest.mark.parametrize(("argv", "option"), [
    (["--sampling-ratios", "0.03,0"], "--sampling-ratios"),
    (["--sampling-ratios", "0.03,often"], "--sampling-ratios"),
    (["--thin-limits", "2,0"], "--thin-limits"),
    (["--thin-limits", "2.5"], "--thin-limits"),
])
def test_the_sweeps_refuse_bad_values_by_their_option(argv, option) -> None:
    args = build_parser("experiment").parse_args(["experiment", "slearn", *argv])
    with pytest.raises(InvalidInput) as refused:
        EXPERIMENTS.get("slearn").options(args)
    assert refused.value.field == option


def test_a_sweep_adds_slearn_runs_at_each_value() -> None:
    args = build_parser("experiment").parse_args(
        ["experiment", "slearn", "--values", "slearn,3sigma", "--sampling-ratios",
         "0.01,adaptive", "--thin-limits", "4"])
    variants = EXPERIMENTS.get("slearn").options(args).variants
    assert [(v.name, v.policy) for v in variants] == [
        ("slearn", "slearn"), ("3sigma", "3sigma"), ("slearn-ratio-0.01", "slearn"),
        ("slearn-ratio-adaptive", "slearn"), ("slearn-thin-4", "slearn")]
    federation = _federation(CLUSTER, variants[-1], (), 0)
    options = federation.gm_config(next(iter(federation.gms))).job_policy_options.slearn
    assert (options.thin_threshold, options.sampling_ratio) == (4, "adaptive")
