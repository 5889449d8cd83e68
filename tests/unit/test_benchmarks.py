"""The benchmark scripts still run and print their `name=value` lines (at toy sizes: the
figures themselves are measured by running the scripts, not here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script, args, names", [
    ("bench_core.py", ["--nodes", "400", "--lms", "4", "--gms", "2", "--tasks", "300",
                       "--occupancy", "0.5"],
     ["gm_decisions_per_s_occ50", "gm_decisions_per_s_wide", "lm_validations_per_s"]),
    ("bench_inspect.py", ["--events", "20000"],
     ["inspect_events_per_s", "inspect_peak_rss_mb"]),
    ("bench_sim.py", ["--nodes", "200", "--gms", "2", "--lms", "4", "--trace",
                      str(ROOT / "deploy" / "workloads" / "YH_small.tr"),
                      "--saturated-jobs", "20", "--growth", "10,40"],
     ["sim_tasks_per_s_unsaturated", "sim_tasks_per_s_saturated",
      "sim_saturated_over_unsaturated", "sim_cost_growth", "sim_queued_over_saturated",
      "sim_copies_over_varied", "sim_megha_over_sparrow.unsaturated",
      "sim_megha_over_sparrow.saturated", "sim_megha_over_sparrow.saturated_long"]),
])
def test_a_benchmark_prints_its_figures(script, args, names):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = dict(re.findall(r"^([\w.]+)=(\S+)$", done.stdout, flags=re.MULTILINE))
    for name in names:
        assert float(figures[name]) > 0, done.stdout


def test_the_simulator_benchmark_repeats_a_case_in_pairs_and_reports_medians():
    small = ["--nodes", "200", "--gms", "2", "--lms", "4", "--trace",
             str(ROOT / "deploy" / "workloads" / "YH_small.tr"), "--saturated-jobs", "20",
             "--only", "saturated"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sim.py"), *small,
                           "--repeat", "2"], capture_output=True, text=True, timeout=240,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = dict(re.findall(r"^([\w.]+)=(\S+)$", done.stdout, flags=re.MULTILINE))
    low, high = (float(x) for x in figures["sim_megha_over_sparrow_range.saturated"].split("-"))
    # two pairs: the ratio of the median walls is a mean of the pairs' ratios, weighted
    assert 0 < low <= float(figures["sim_megha_over_sparrow.saturated"]) <= high
    refused = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sim.py"), *small,
                              "--repeat", "0"], capture_output=True, text=True, timeout=60,
                             cwd=ROOT)
    assert refused.returncode == 2 and "--repeat must be at least 1, got 0" in refused.stderr
