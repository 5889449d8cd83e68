"""The load generator's pure parts: trace parsing, workload fitting, summary figures."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from common.errors import InvalidInput
from loadgen.distributions import Distribution
from loadgen.jobfile import parse_job_lines, read_jobs, write_jobs
from loadgen.replay import JobOutcome, ReplayResult, reason_of
from loadgen.summary import SHOWN_REASONS, percentile, render, summarize
from loadgen.synthesis import Realization, realize
from loadgen.trace import parse_lines, read_trace
from loadgen.workload import (
    ReplayJob,
    ReplayTask,
    Scaling,
    from_trace,
    offered_load,
    scale,
    select,
)
from simulator.federated import job_specs

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_sample_matches_its_documented_size():
    read = read_trace(ROOT / "deploy" / "workloads" / "YH_small.tr")
    assert len(read.jobs) == 10
    assert sum(job.width for job in read.jobs) == 183
    assert max(job.width for job in read.jobs) == 51


def test_jobs_with_equal_arrivals_keep_file_order():
    read = parse_lines(["5 1 1 1", "2 1 1 1", "5 1 2 2", "2 1 3 3"], "t.tr")
    assert [(j.arrival, j.line) for j in read.jobs] == [(2, 2), (2, 4), (5, 1), (5, 3)]
    assert read.jobs[0].estimate == 1 and read.jobs[1].durations == (3.0,)


@pytest.mark.parametrize("line, message", [
    ("1 2", "got 2 field(s)"),
    ("x 1 1 1", "arrival_time is not a number: 'x'"),
    ("1 two 1 1", "num_tasks is not an integer"),
    ("1 0 1", "num_tasks must be at least 1"),
    ("1 3 1 1 1", "num_tasks says 3 but the line has 2 task duration(s)"),
    ("1 1 1 -4", "duration 1 must be a finite number >= 0"),
    ("1 1 1 nan", "duration 1 must be a finite number >= 0"),
])
def test_a_bad_line_names_file_line_and_fault(line, message):
    with pytest.raises(InvalidInput) as caught:
        parse_lines(["1 1 1 1", line], "w.tr")
    assert str(caught.value).startswith("w.tr:2: ")
    assert message in str(caught.value)


def test_skipping_bad_lines_counts_them_and_keeps_the_rest():
    read = parse_lines(["1 1 1 1", "oops", "", "# comment", "2 1 1 1", "3 2 1 1"], "w.tr",
                       skip_bad=True)
    assert [job.line for job in read.jobs] == [1, 5]
    assert read.skipped == 2
    assert read.errors[0].startswith("w.tr:2: ")


def test_unreadable_trace_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match="cannot read the trace"):
        read_trace(tmp_path / "missing.tr")
    (tmp_path / "bin.tr").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InvalidInput, match="not a text file"):
        read_trace(tmp_path / "bin.tr")


def _jobs(*specs: tuple[float, list[float]]) -> list[ReplayJob]:
    return [ReplayJob(f"j{k}", "u", arrival, tuple(ReplayTask(1000, 100, d) for d in durations),
                      estimate=1.0)
            for k, (arrival, durations) in enumerate(specs)]


def test_a_trace_realized_is_seeded_and_its_ids_are_stable():
    read = parse_lines([f"{t} 2 1 1 1" for t in range(10, 30)], "t.tr")
    plan = Realization(users=(("a", 1), ("b", 1), ("c", 1)), seed=3,
                       cpu_m=Distribution("const", (500,)), mem_mib=Distribution("const", (64,)))
    shapes = select(from_trace(read.jobs), Scaling(), seed=3)
    first = realize(shapes, plan, prefix="r")
    assert first == realize(shapes, plan, prefix="r")
    assert first[0].arrival == 0 and first[-1].arrival == 19  # shifted to start at zero
    assert first[0].job_id == "r-1"
    assert {job.user for job in first} == {"a", "b", "c"}
    assert {(t.cpu_m, t.mem_mib, t.constraints) for j in first for t in j.tasks} == {
        (500, 64, ())}


def test_offered_load_arithmetic():
    # 2 tasks x 1000 m x 10 s + 1 task x 1000 m x 20 s = 40 core-seconds over a 20 s span
    jobs = _jobs((0, [10, 10]), (20, [20]))
    assert offered_load(jobs, cluster_cpu_m=4000) == pytest.approx(40 / (20 * 4))
    assert offered_load(jobs[:1], cluster_cpu_m=4000) is None


def test_scaling_caps_scales_and_aims_at_a_load():
    jobs = _jobs((10, [10, 10, 10]), (30, [20]), (50, [4]))
    fitted = scale(jobs, Scaling(max_width=2, duration_scale=0.5, time_scale=0.1), seed=0,
                   cluster_cpu_m=1000)
    assert [len(job.tasks) for job in fitted] == [2, 1, 1]
    assert [t.duration for t in fitted[0].tasks] == [5, 5]
    assert fitted[0].estimate == 0.5
    assert [job.arrival for job in fitted] == pytest.approx([0, 2, 4])

    aimed = scale(jobs, Scaling(target_load=0.5), seed=0, cluster_cpu_m=1000)
    assert offered_load(aimed, 1000) == pytest.approx(0.5)
    assert len(scale(jobs, Scaling(max_jobs=2), seed=0, cluster_cpu_m=1000)) == 2


def test_sampling_is_seeded_and_never_empty_silently():
    jobs = _jobs(*[(t, [1]) for t in range(200)])
    kept = scale(jobs, Scaling(sample=0.25), seed=7, cluster_cpu_m=1000)
    assert kept == scale(jobs, Scaling(sample=0.25), seed=7, cluster_cpu_m=1000)
    assert 30 < len(kept) < 70
    with pytest.raises(InvalidInput, match="no job is left"):
        scale(jobs[:1], Scaling(sample=1e-9), seed=1, cluster_cpu_m=1000)


@pytest.mark.parametrize("plan", [dict(max_width=0), dict(sample=1.5), dict(duration_scale=0),
                                  dict(time_scale=1, target_load=1), dict(target_load=-1)])
def test_bad_scaling_is_refused(plan):
    with pytest.raises(InvalidInput):
        Scaling(**plan)


def test_percentile_interpolates_like_numpy():
    numpy = pytest.importorskip("numpy")
    values = sorted([0.3, 1.2, 0.01, 7.5, 2.2, 2.2, 9.0])
    for p in (0, 50, 90, 99, 100):
        assert percentile(values, p) == pytest.approx(numpy.percentile(values, p))


def test_summary_counts_and_times():
    jobs = _jobs((0, [1, 1]), (1, [1]), (2, [1]))
    done = JobOutcome(jobs[0], "gm-1", status="accepted", state="done", arrival=100.0,
                      finished_at=103.0, task_starts=[100.5, None])
    failed = JobOutcome(jobs[1], "gm-1", status="accepted", state="failed", arrival=101.0,
                        task_starts=[101.25])
    refused = JobOutcome(jobs[2], "gm-2", status="rejected", http_status=422,
                         detail="tasks[0].cpu_m: no node", late_by=0.5)
    summary = summarize(ReplayResult([done, failed, refused], 12.0, False))
    assert summary["accepted"] == 2 and summary["rejected"] == 1
    assert summary["completed"] == 1 and summary["failed"] == 1 and summary["unfinished"] == 0
    assert summary["rejection_reasons"] == {"tasks[0].cpu_m: no node": 1}
    assert summary["tasks_with_start_time"] == 2
    assert summary["allocation_time_s"]["max"] == 0.5
    assert summary["allocation_time_s"]["p50"] == pytest.approx(0.375)
    assert summary["jct_s"]["mean"] == 3.0
    assert summary["late_submissions"] == 1


# -- the JSON-lines job file --------------------------------------------------------------------


def test_job_file_round_trip_keeps_every_field(tmp_path):
    jobs = [ReplayJob("a", "q1", 0.0, (ReplayTask(500, 64, 1.5, (4, 20), "M1"),
                                       ReplayTask(500, 64, 2.5, (), "R2_1")),
                      weight=2.0, estimate=1.2, dag={"M1": (), "R2_1": ("M1",)},
                      name="fam-0003"),
            ReplayJob("b", "q2", 3.25, (ReplayTask(1000, 128, 0.0), ReplayTask(1, 1, 9.0)))]
    write_jobs(tmp_path / "w.jsonl", jobs)
    again, skipped, _ = read_jobs(tmp_path / "w.jsonl")
    assert again == jobs and skipped == 0
    assert [job.name for job in again] == ["fam-0003", None]
    lines = (tmp_path / "w.jsonl").read_text().splitlines()
    assert '"name":"fam-0003"' in lines[0] and '"name"' not in lines[1]  # written when set


def test_a_replayed_job_submits_its_name_when_it_has_one():
    task = (ReplayTask(500, 64, 1.0),)
    assert ReplayJob("a", "q1", 0.0, task, name="fam-1").submission()["name"] == "fam-1"
    assert "name" not in ReplayJob("b", "q1", 0.0, task).submission()
    # and the simulator's jobs carry it too
    specs = job_specs([ReplayJob("a", "q1", 0.0, task, name="fam-1"),
                       ReplayJob("b", "q1", 0.0, task)])
    assert [spec.name for spec in specs] == ["fam-1", None]


@pytest.mark.parametrize("line, message", [
    ('{"job_id": "a", "user": "q1", "arrival": 0, "tasks": []}', "tasks: "),
    ('{"job_id": "a", "user": "q1", "arrival": -1, "tasks": [{"cpu_m": 1, "mem_mib": 1, '
     '"duration": 1}]}', "arrival: "),
    ('{"job_id": "a", "user": "q1", "arrival": 0, "tasks": [{"cpu_m": 1, "mem_mib": 1, '
     '"duration": 1, "gpu": 1}]}', "tasks.0.gpu: "),
    ('{"job_id": "a", "user": "q1"', "line: "),
    ('{"job_id": "a", "user": "q1", "name": "", "arrival": 0, "tasks": [{"cpu_m": 1, '
     '"mem_mib": 1, "duration": 1}]}', "name: "),
    ('{"job_id": "x", "user": "q1", "arrival": 0, "tasks": [{"cpu_m": 1, "mem_mib": 1, '
     '"duration": 1}]}', "job_id 'x' repeats line 1"),
])
def test_a_bad_job_line_names_file_line_and_field(line, message):
    good = ('{"job_id": "x", "user": "q1", "arrival": 0, "tasks": [{"cpu_m": 1, "mem_mib": 1, '
            '"duration": 1}]}')
    with pytest.raises(InvalidInput) as caught:
        parse_job_lines([good, line], "w.jsonl")
    assert str(caught.value).startswith("w.jsonl:2: ") and message in str(caught.value)
    jobs, skipped, errors = parse_job_lines([good, line], "w.jsonl", skip_bad=True)
    assert [job.job_id for job in jobs] == ["x"] and skipped == 1 and errors


def test_a_gm_refusal_reads_as_one_line_and_the_summary_lists_a_few():
    body = {"detail": [{"loc": ["body", "tasks[7]"], "type": "invalid_input",
                        "msg": "no node in the federation satisfies constraints [6, 13]"}]}
    assert reason_of(httpx.Response(422, json=body)) == (
        "tasks[7]: no node in the federation satisfies constraints [6, 13]")
    assert reason_of(httpx.Response(400, json={"detail": "bad job id"})) == "bad job id"
    assert reason_of(httpx.Response(502, text="<html>gateway</html>")) == "<html>gateway</html>"

    jobs = _jobs(*[(k, [1]) for k in range(8)])
    refused = [JobOutcome(job, "gm-1", status="rejected", detail=f"reason {k}")
               for k, job in enumerate(jobs)]
    text = render(summarize(ReplayResult(refused, 1.0, False)))
    assert text.count("refused x1: reason") == SHOWN_REASONS
    assert f"refused x3: {8 - SHOWN_REASONS} other reason(s)" in text
