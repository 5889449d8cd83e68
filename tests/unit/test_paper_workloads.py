"""The Megha paper's workloads as stand-ins (`--like`, loadgen/paper_workloads.py) and the
`--max-tasks` cut they are sized with (loadgen/workload.py)."""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import InvalidInput
from loadgen.jobfile import read_jobs
from loadgen.paper_workloads import PAPER_WORKLOADS, YH1_SUB, apply_like
from loadgen.sources import Workload, add_workload_arguments, build_workload, load_config
from loadgen.trace import read_trace
from loadgen.workload import JobShape, ReplayJob, ReplayTask, Scaling, select

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "federation.toml"
PAPER_TASKS = {"google_19": 4550, "alibaba": 8000, "cloudera": 10173}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    return parser.parse_args([*argv, "--config", str(CONFIG)])


def _build(*argv: str) -> Workload:
    args = _args(*argv)
    federation, path = load_config(args.config)
    return build_workload(args, federation, path, prefix="")


def _tasks(workload: Workload) -> list[ReplayTask]:
    return [task for job in workload.jobs for task in job.tasks]


def _shape(key: int, width: int) -> JobShape:
    return JobShape(str(key), key, float(key), tuple(float(k + 1) for k in range(width)))


# -- --max-tasks -------------------------------------------------------------------------------


def test_max_tasks_keeps_jobs_in_order_and_cuts_the_one_that_crosses():
    shapes = [_shape(k, width) for k, width in enumerate((3, 4, 5, 6))]
    kept = select(shapes, Scaling(max_tasks=9), seed=0)
    assert [job.key for job in kept] == ["0", "1", "2"]
    assert [job.width for job in kept] == [3, 4, 2]  # 3 + 4 + 2 of the third's 5 = 9
    assert kept[2].durations == (1.0, 2.0)  # its first tasks
    exact = select(shapes, Scaling(max_tasks=7), seed=0)
    assert [job.width for job in exact] == [3, 4]  # a job that lands exactly on N is whole


def test_max_tasks_counts_after_max_width_and_cuts_complete_jobs_too():
    shapes = [_shape(k, 10) for k in range(5)]
    assert [j.width for j in select(shapes, Scaling(max_width=4, max_tasks=10), seed=0)] == [
        4, 4, 2]
    task = ReplayTask(cpu_m=500, mem_mib=512, duration=1.0)
    jobs = [ReplayJob(f"j{k}", "q1", float(k), (task,) * 5) for k in range(3)]
    assert [j.width for j in select(jobs, Scaling(max_tasks=7), seed=0)] == [5, 2]
    assert sum(j.width for j in select(jobs, Scaling(max_tasks=99), seed=0)) == 15  # all


@pytest.mark.parametrize("value", [0, -3])
def test_a_max_tasks_below_one_is_refused_by_its_option(value):
    with pytest.raises(InvalidInput, match="--max-tasks: must be at least 1"):
        Scaling(max_tasks=value)


# -- the presets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PAPER_TASKS))
def test_each_preset_has_exactly_the_papers_tasks_with_constraints(name):
    workload = _build("--like", name)
    tasks = _tasks(workload)
    assert len(tasks) == PAPER_TASKS[name] == PAPER_WORKLOADS[name].paper_tasks
    constrained = sum(bool(task.constraints) for task in tasks) / len(tasks)
    assert 0.80 < constrained < 0.92  # the model leaves about 14% unconstrained
    assert workload.name.startswith(f"{name} stand-in")


def test_presets_keep_the_sources_resources():
    ali = _tasks(_build("--like", "alibaba"))
    assert len({(task.cpu_m, task.mem_mib) for task in ali}) > 1  # the sample's own requests
    google = _tasks(_build("--like", "google_19"))
    assert {(task.cpu_m, task.mem_mib) for task in google} == {(500, 512)}  # the defaults


def test_google_19s_numbers_are_the_log_normals_fitted_to_yh1_sub():
    """The docstring's derivation: log-normals with YH1_sub's median and mean, its rate."""
    settings = PAPER_WORKLOADS["google_19"].settings
    jobs = read_trace(YH1_SUB).jobs
    for spec, values in ((settings["width"], [job.width for job in jobs]),
                         (settings["duration"], [d for job in jobs for d in job.durations])):
        median, sigma = (float(v) for v in spec.removeprefix("lognormal:").split(","))
        assert median == pytest.approx(statistics.median(values), rel=0.01)
        fitted = math.sqrt(2 * math.log(statistics.mean(values) / statistics.median(values)))
        assert sigma == pytest.approx(fitted, abs=0.005)
    rate = (len(jobs) - 1) / (jobs[-1].arrival - jobs[0].arrival)
    assert settings["poisson"] == pytest.approx(rate, abs=0.0005)


def test_explicit_options_win_over_the_presets():
    assert len(_tasks(_build("--like", "cloudera", "--max-tasks", "500"))) == 500
    plain = _tasks(_build("--like", "google_19", "--no-constraints", "--max-tasks", "300"))
    assert len(plain) == 300 and not any(task.constraints for task in plain)
    faster = _build("--like", "google_19", "--poisson", "2", "--max-tasks", "300")
    assert "Poisson(2/s)" in faster.name
    narrow = _build("--like", "alibaba", "--max-width", "20")
    assert len(_tasks(narrow)) == 8000 and len(narrow.jobs) > 100


def test_the_preset_fills_a_copy_and_leaves_the_given_options_alone():
    args = _args("--like", "cloudera", "--jobs", "7")
    filled = apply_like(args)
    assert args.trace is None and args.max_tasks is None  # not changed in place
    assert filled.trace == YH1_SUB and filled.max_tasks == 10173 and filled.jobs == 7
    assert filled.constraints is True
    assert apply_like(_args("--poisson", "1")).like is None


@pytest.mark.parametrize("argv, option", [
    (("--like", "alibaba", "--poisson", "2"), "--poisson"),
    (("--like", "google_19", "--trace", "deploy/workloads/YH_small.tr"), "--trace"),
    (("--like", "cloudera", "--alibaba"), "--alibaba"),
    (("--like", "cloudera", "--trace", "deploy/workloads/alibaba-100.jsonl"), "--trace"),
])
def test_a_source_that_contradicts_the_preset_is_refused_by_its_option(argv, option):
    with pytest.raises(InvalidInput) as refused:
        _build(*argv)
    assert refused.value.field == option and "--like" in refused.value.message


def test_fewer_tasks_than_asked_are_all_used_and_said_so(capsys):
    workload = _build("--like", "google_19", "--count", "5")
    assert len(workload.jobs) == 5 and len(_tasks(workload)) < 4550
    assert "fewer than --max-tasks 4,550" in capsys.readouterr().err


# -- the commands --------------------------------------------------------------------------------


def megha(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MEGHA_CONFIG"}
    return subprocess.run([sys.executable, "-m", "megha", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, env=env)


def test_synth_writes_a_preset_with_its_headline(tmp_path):
    out = tmp_path / "cloudera.jsonl"
    made = megha("synth", "--like", "cloudera", "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert "222 jobs, 10173 tasks from cloudera stand-in" in made.stdout
    assert "of tasks constrained" in made.stdout
    jobs, _, _ = read_jobs(out)
    assert sum(len(job.tasks) for job in jobs) == 10173
    refused = megha("synth", "--like", "alibaba", "--poisson", "2", "--out", str(out))
    assert refused.returncode == 2 and "--poisson: --like alibaba" in refused.stderr


def test_simulate_runs_the_google_19_stand_in():
    done = megha("simulate", "--like", "google_19", "--nodes", "500", "--no-log")
    assert done.returncode == 0, done.stderr
    assert "4550 tasks from google_19 stand-in" in done.stdout and "jct s over" in done.stdout
