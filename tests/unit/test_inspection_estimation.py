"""`megha inspect` on job-size estimation (slearn, 3sigma, ...): hand-made logs whose every
estimation figure is worked out by hand below."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from inspection.analysis import RATIO_POINTS, RunAnalysis
from inspection.compare import FIGURES, compare
from inspection.html import render_html
from inspection.plots import write_plots
from inspection.terminal import render_comparison, render_run

ROOT = Path(__file__).resolve().parents[2]


def ev(ts: float, event: str, **fields) -> dict:
    return {"ts": ts, "svc": "gm-1", "event": event, "gm": "gm-1", **fields}


# Six jobs of u1: (job, tasks, arrival, JCT under slearn, sampling ratio, estimate, work,
# level at the end, true level, thin, when the estimate was known). Wide jobs a, b, c have an
# estimate from their pilots; thin jobs d, e, f have none.
#   estimate / work: a 20/10 = 2, b 50/100 = 0.5, c 40/400 = 0.1 -> sorted 0.1, 0.5, 2:
#     p10 = 0.1 + 0.2 * 0.4 = 0.18, p50 = 0.5, p90 = 0.5 + 0.8 * 1.5 = 1.7,
#     mean |log10| = (log10 2 + log10 2 + 1) / 3
#   wide jobs in their true queue: a (0 = 0), b (1 = 1), not c (1 != 2): 2 of 3
#   JCT bins (long: true level >= 1): thin short d 2, f 4 (mean 3, p50 3); thin long e 20;
#     wide short a 10; wide long b 30, c 60 (mean 45, p50 45)
#   JCT overall: 2, 4, 10, 20, 30, 60: mean 21, p50 (10 + 20) / 2 = 15
#   estimate known after arrival: a 2 - 0, b 4 - 1, c 3 - 2: 2, 3, 1 (mean 2, p50 2)
#   sampling ratios at arrivals 0, 1, 2: 0.1, 0.05, 0.1 (0.1 for two jobs, 0.05 for one)
JOBS = [
    ("a", 10, 0.0, 10.0, 0.1, 20.0, 10.0, 0, 0, False, 2.0),
    ("b", 20, 1.0, 30.0, 0.05, 50.0, 100.0, 1, 1, False, 4.0),
    ("c", 30, 2.0, 60.0, 0.1, 40.0, 400.0, 1, 2, False, 3.0),
    ("d", 2, 3.0, 2.0, None, None, 2.0, 0, 0, True, None),
    ("e", 1, 4.0, 20.0, None, None, 30.0, 1, 1, True, None),
    ("f", 2, 5.0, 4.0, None, None, 3.0, 0, 0, True, None),
]


def log(predictor: str | None = "slearn", jct_scale: float = 1.0) -> list[dict]:
    """The six jobs' events; with `predictor` None, as a job policy without priority queues
    logs them (no estimation field at all)."""
    events = [ev(-1.0, "gm_starting", shares={"u1": 1.0}, policies={"job": predictor or "fifo"})]
    for job, tasks, arrival, jct, ratio, estimate, work, level, true, thin, known in JOBS:
        ids = {"job": job, "user": "u1", "tasks": tasks, "arrival": arrival}
        arrived = ev(arrival, "job_arrived", **ids, pilots=0)
        done = ev(arrival + jct * jct_scale, "job_done", **ids, reason="")
        if predictor is not None:
            arrived["sampling_ratio"] = ratio if predictor == "slearn" else None
            done |= {"predictor": predictor, "estimate": estimate, "work": work,
                     "level": level, "true_level": true, "thin": thin,
                     "sampling_ratio": arrived["sampling_ratio"]}
            if known is not None:
                events.append(ev(known, "job_estimated", job=job, user="u1",
                                 predictor=predictor, estimate=estimate, level=0,
                                 sampling_ratio=arrived["sampling_ratio"], pilots=1))
        events += [arrived, done]
    return events


def report_of(events: list[dict], name: str = "slearn") -> dict:
    run = RunAnalysis(name)
    for event in events:
        run.feed(event)
    return run.report()


def test_every_estimation_figure_of_the_hand_made_log():
    report = report_of(log())
    estimation = report["estimation"]
    assert set(estimation) == {
        "predictor", "jobs_done", "jobs", "jobs_thin", "jobs_estimated", "error",
        "correct_queue_share_wide", "correct_queue_wide_jobs", "jct_by_bin",
        "estimation_delay", "sampling_ratio_over_time", "sampling_ratio_counts"}
    assert estimation["predictor"] == "slearn"
    assert (estimation["jobs_done"], estimation["jobs"], estimation["jobs_thin"],
            estimation["jobs_estimated"]) == (6, 3, 3, 3)

    error = estimation["error"]
    assert error["count"] == 3
    assert error["p10"] == pytest.approx(0.18)
    assert error["p50"] == pytest.approx(0.5)
    assert error["p90"] == pytest.approx(1.7)
    assert error["mean_abs_log10"] == pytest.approx((2 * math.log10(2) + 1) / 3)
    assert error["cdf"] == {"x": [0.1, 0.5, 2.0], "y": [0.3333, 0.6667, 1.0]}

    assert estimation["correct_queue_share_wide"] == pytest.approx(2 / 3)
    assert estimation["correct_queue_wide_jobs"] == 3
    assert estimation["jct_by_bin"] == {
        "thin_short": {"count": 2, "mean": 3.0, "p50": 3.0},
        "thin_long": {"count": 1, "mean": 20.0, "p50": 20.0},
        "wide_short": {"count": 1, "mean": 10.0, "p50": 10.0},
        "wide_long": {"count": 2, "mean": 45.0, "p50": 45.0},
    }
    delay = estimation["estimation_delay"]
    assert (delay["count"], delay["mean"], delay["p50"], delay["max"]) == (3, 2.0, 2.0, 3.0)
    assert estimation["sampling_ratio_over_time"] == [[0.0, 0.1], [1.0, 0.05], [2.0, 0.1]]
    assert estimation["sampling_ratio_counts"] == {"0.05": 1, "0.1": 2}

    # the rest of the report is the one it always was
    assert report["jct"]["overall"]["mean"] == pytest.approx(21.0)
    assert report["jct"]["overall"]["p50"] == pytest.approx(15.0)
    assert report["counts"]["events_missing_fields"] == 0
    json.dumps(report)  # every figure is JSON


def test_a_log_without_estimation_fields_has_no_estimation_section():
    plain = report_of(log(predictor=None), "fifo")
    assert "estimation" not in plain
    assert set(plain) == {"name", "policies", "allocation", "breakdown", "jct", "counts",
                          "fairness"}
    # the same jobs with the estimation fields give the same figures but for the new section
    with_fields = report_of(log(), "fifo")
    with_fields.pop("estimation")
    with_fields["policies"] = plain["policies"]
    assert with_fields == plain
    table = compare([plain, plain | {"name": "again"}])
    assert [row["figure"] for row in table["rows"]] == [label for label, _ in FIGURES]
    assert "reference" not in table
    console = Console(record=True, width=120)
    render_run(console, plain, {"events": 1, "lines": 1, "malformed": 0, "examples": []})
    assert "Estimation" not in console.export_text()


def test_estimates_and_levels_that_are_missing_are_left_out():
    events = log()
    for e in events:
        if e["event"] == "job_done" and e["job"] == "b":
            e["estimate"] = None  # the estimate of job_estimated (50) stands in
        if e["event"] == "job_done" and e["job"] == "c":
            del e["level"]  # neither in the queue share nor left out of the bins
        if e["event"] == "job_done" and e["job"] == "a":
            e["work"] = 0.0  # no ratio to take, but a job with an estimate
    estimation = report_of(events)["estimation"]
    assert estimation["jobs"] == 3
    assert estimation["error"]["count"] == 2  # b 0.5 and c 0.1
    assert estimation["error"]["p50"] == pytest.approx(0.3)
    assert estimation["correct_queue_share_wide"] == 1.0  # a and b
    assert estimation["correct_queue_wide_jobs"] == 2
    assert estimation["jct_by_bin"]["wide_long"]["count"] == 2
    # a job_done with a predictor but no work is counted as missing fields, not a crash
    run = RunAnalysis("x")
    run.feed(ev(1.0, "job_done", job="z", user="u1", tasks=1, arrival=0.0, predictor="las"))
    assert run.report()["counts"]["events_missing_fields"] == 1


def test_the_sampling_ratio_series_is_kept_small():
    run = RunAnalysis("many")
    jobs = 3 * RATIO_POINTS + 7
    for k in range(jobs):
        run.feed(ev(float(k), "job_arrived", job=f"j{k}", user="u1", tasks=50,
                    arrival=float(k), sampling_ratio=0.01 * (1 + k % 3)))
    run.feed(ev(float(jobs), "job_done", job="j0", user="u1", tasks=50, arrival=0.0,
                predictor="slearn", estimate=1.0, work=1.0, level=0, true_level=0,
                thin=False, sampling_ratio=0.01))
    estimation = run.report()["estimation"]
    series = estimation["sampling_ratio_over_time"]
    assert len(series) == RATIO_POINTS
    assert series[0] == [0.0, 0.01] and series[-1][0] == float(jobs - 1)
    assert sum(estimation["sampling_ratio_counts"].values()) == jobs


def test_a_comparison_gives_jct_ratios_to_slearn():
    # slearn last: the reference is found by name, not position. 3sigma's JCTs are 1.5 times
    # slearn's (mean 31.5 / 21, p50 22.5 / 15), fifo's twice (no estimation section at all).
    slearn = report_of(log(), "slearn")
    three_sigma = report_of(log("3sigma", jct_scale=1.5), "3sigma")
    fifo = report_of(log(None, jct_scale=2.0), "fifo")
    table = compare([fifo, three_sigma, slearn])
    assert table["reference"] == "slearn"
    rows = {row["figure"]: row for row in table["rows"]}
    assert rows["JCT mean (s)"]["values"] == pytest.approx([42.0, 31.5, 21.0])
    assert rows["JCT mean / slearn"]["values"] == pytest.approx([2.0, 1.5, 1.0])
    assert rows["JCT p50 / slearn"]["values"] == pytest.approx([2.0, 1.5, 1.0])
    assert rows["JCT mean / slearn"]["ratios"] == [None, None, None]
    # 3sigma's estimates are those of slearn (only the times differ)
    assert rows["estimate/work p50"]["values"] == [None, pytest.approx(0.5),
                                                   pytest.approx(0.5)]
    assert rows["correct queue share (wide jobs)"]["values"] == [
        None, pytest.approx(2 / 3), pytest.approx(2 / 3)]
    console = Console(record=True, width=160)
    render_comparison(console, table)
    text = console.export_text()
    assert "JCT mean / slearn" in text and "1.50x" in text and "above 1, slearn" in text

    # no run named slearn: the one run whose predictor is slearn is the reference
    renamed = compare([three_sigma, slearn | {"name": "new"}])
    assert renamed["reference"] == "new"
    rows = {row["figure"]: row for row in renamed["rows"]}
    assert rows["JCT mean / new"]["values"] == pytest.approx([1.5, 1.0])
    # no slearn at all: the estimation rows, and no ratio rows
    alone = compare([three_sigma, fifo])
    assert alone["reference"] is None
    assert not any("/ " in row["figure"] for row in alone["rows"])


def test_terminal_html_and_plots_show_estimation(tmp_path):
    result = {"runs": [report_of(log(), "slearn") | {"read": {
        "events": 1, "lines": 1, "malformed": 0, "examples": []}},
        report_of(log("3sigma", 1.5), "3sigma") | {"read": {
            "events": 1, "lines": 1, "malformed": 0, "examples": []}}]}
    result["comparison"] = compare(result["runs"])
    console = Console(record=True, width=120)
    render_run(console, result["runs"][0], result["runs"][0]["read"])
    text = console.export_text()
    assert "Estimation" in text and "predictor slearn" in text
    assert "p50 0.5, p90 1.7" in text and "66.7% of 3" in text
    assert "wide" in text and "45.00" in text  # the wide / long cell

    pngs = write_plots(result, tmp_path / "plots")
    for name in ("jct_cdf", "estimation_error_cdf", "sampling_ratio_over_time"):
        assert pngs[name].startswith(b"\x89PNG")
        assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 1000
    page = render_html(result, pngs)
    assert 'id="estimation-slearn"' in page and 'id="jct-bins-3sigma"' in page
    assert 'id="plot-estimation_error_cdf"' in page
    assert 'id="plot-sampling_ratio_over_time"' in page
    assert "JCT mean / slearn" in page

    # runs without estimation get none of these plots
    plain = {"runs": [report_of(log(None), "fifo")]}
    assert not {"estimation_error_cdf", "sampling_ratio_over_time"} & set(
        write_plots(plain, None))


def test_the_command_reports_estimation_as_json(tmp_path):
    path = tmp_path / "slearn.log"
    path.write_text("".join(json.dumps(e) + "\n" for e in log()))
    done = subprocess.run([sys.executable, "-m", "megha", "inspect", str(path), "--json", "-"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    estimation = json.loads(done.stdout)["runs"][0]["estimation"]
    assert estimation["correct_queue_share_wide"] == pytest.approx(2 / 3)
    assert estimation["jct_by_bin"]["wide_long"] == {"count": 2, "mean": 45.0, "p50": 45.0}
