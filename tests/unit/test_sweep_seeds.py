"""`--seeds N` of the Megha paper's sweeps (cluster_sweep.py): each value runs once per seed,
every run is kept in results.json, and each value gets the mean over its seeds with a 95%
confidence interval (Student's t, worked by hand here); without it, one run per value as
before."""

from __future__ import annotations

import json
import math

import pytest

from megha.cli import main
from simulator.experiments.common import mean_interval, plus_minus

TINY = ["--values", "1x2,2x2", "--nodes", "200", "--jobs", "10", "--workers", "1", "--no-log"]


def test_mean_interval_by_hand():
    # 1, 2, 3: mean 2, sample standard deviation 1, t(0.975, 2 degrees of freedom) 4.302653
    interval = mean_interval([1.0, 2.0, 3.0])
    assert interval["n"] == 3 and interval["mean"] == pytest.approx(2.0)
    assert interval["half_width"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert plus_minus(interval) == "2.00 ± 2.48"
    # two values 10 and 14: s = 2*sqrt(2), t(0.975, 1) = 12.706205
    assert mean_interval([10.0, 14.0])["half_width"] == pytest.approx(
        12.706205 * 2 * math.sqrt(2) / math.sqrt(2), rel=1e-6)
    # equal values: no spread
    assert mean_interval([5.0, 5.0, 5.0])["half_width"] == pytest.approx(0.0)


def test_mean_interval_of_too_few_values_has_no_half_width():
    assert mean_interval([4.0]) | {} == {"n": 1, "mean": 4.0, "half_width": None,
                                         "confidence": 0.95}
    assert mean_interval([])["mean"] is None
    assert plus_minus(mean_interval([4.0])) == "4.00"
    assert plus_minus(mean_interval([])) == "-"


def test_gms_lms_over_two_seeds_keeps_every_run_and_sums_each_value_up(tmp_path, capsys):
    out = tmp_path / "seeds"
    assert main(["experiment", "gms-lms", *TINY, "--seeds", "2", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    names = [run["name"] for run in data["runs"]]
    assert names == ["1gm-2lm/seed-0", "1gm-2lm/seed-1", "2gm-2lm/seed-0", "2gm-2lm/seed-1"]
    for run in data["runs"]:
        assert {"jct", "allocation", "counts", "shape", "seed"} <= set(run)
    summary = data["figures"]["seeds"]
    assert summary["seeds"] == [0, 1] and set(summary["by_value"]) == {"1gm-2lm", "2gm-2lm"}
    for name, figures in summary["by_value"].items():
        runs = [run for run in data["runs"] if run["name"].startswith(f"{name}/")]
        assert figures["runs"] == [run["name"] for run in runs]
        means = [run["jct"]["overall"]["mean"] for run in runs]
        assert figures["jct_mean"]["values"] == means
        assert figures["jct_mean"]["mean"] == pytest.approx(sum(means) / 2)
        for key in ("jct_mean", "allocation_p50", "allocation_p99"):
            assert figures[key]["n"] == 2 and figures[key]["half_width"] is not None
    # paired: each value over the first, seed by seed; the first over itself is exactly 1
    paired = summary["paired"]
    assert paired["over"] == "1gm-2lm"
    assert paired["by_value"]["1gm-2lm"]["allocation_p50"]["mean"] == pytest.approx(1.0)
    assert paired["by_value"]["1gm-2lm"]["allocation_p50"]["half_width"] == pytest.approx(0.0)
    runs = {run["name"]: run["allocation"]["overall"]["p99"] for run in data["runs"]}
    ratios = [runs[f"2gm-2lm/seed-{seed}"] / runs[f"1gm-2lm/seed-{seed}"] for seed in (0, 1)]
    assert paired["by_value"]["2gm-2lm"]["allocation_p99"] == pytest.approx(
        mean_interval(ratios))
    # the seeds drew different workloads: the two runs of a value differ
    first = summary["by_value"]["1gm-2lm"]["jct_mean"]["values"]
    assert first[0] != first[1]
    shown = capsys.readouterr().out
    assert "±" in shown and "seeds 0 to 1" in shown and "paired over the 2 seeds" in shown


def test_one_seed_is_one_run_per_value_as_before(tmp_path):
    out = tmp_path / "one"
    assert main(["experiment", "gms-lms", *TINY, "--seed", "3", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert [run["name"] for run in data["runs"]] == ["1gm-2lm", "2gm-2lm"]
    assert "figures" not in data and all("seed" not in run for run in data["runs"])


def test_seeds_must_be_at_least_one(tmp_path, capsys):
    assert main(["experiment", "gms-lms", *TINY, "--seeds", "0", "--out",
                 str(tmp_path / "none")]) != 0
    assert "--seeds" in capsys.readouterr().err
