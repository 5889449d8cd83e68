"""The simulator in the saturated regime: tasks wait, queues preempt each other, requests are
refused and retried. A seed still gives the same event log, byte for byte, so a change to the
scheduling core that claims to keep policy semantics can be checked against the log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from simulator.command import retry_summary

ROOT = Path(__file__).resolve().parents[2]


def run(path: Path) -> tuple[bytes, str]:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--config", "deploy/federation.toml",
         "--poisson", "10", "--count", "150", "--width", "const:8", "--constraints",
         "--target-load", "1.5", "--seed", "3", "--delay", "exp:0.0005", "--log", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return path.read_bytes(), done.stdout


def test_a_saturated_run_is_a_function_of_its_seed(tmp_path):
    (first, printed), (second, _) = run(tmp_path / "a.log"), run(tmp_path / "b.log")
    assert first == second
    # and it is saturated: tasks waited, queues preempted, launches were refused and requeued
    assert first.count(b'"event":"preemption_requested"') > 20
    assert first.count(b'"event":"task_requeued"') > 50
    # the summary says what was done again, per task started, as the log counts it
    lines = [json.loads(line) for line in first.splitlines()]
    tasks = len({line["task"] for line in lines if line["event"] == "task_started"})
    requeues = sum(line["event"] == "task_requeued" for line in lines)
    assert f", {requeues / tasks:.2f} requeues" in printed, printed


def test_the_retry_summary_reads_the_counts():
    counts = {"tasks_started": 200, "launches_refused": 50, "preemption_attempts": 20,
              "preemptions_refused": 5, "requeues": 70,
              "launches_refused_by_reason": {"stale_view": 40, "node_down": 10}}
    assert retry_summary(counts) == (
        "per task started: 0.25 launches refused (node_down 0.05, stale_view 0.20), "
        "0.10 preemptions asked (0.03 refused), 0.35 requeues")
    assert retry_summary({"tasks_started": 200, "requeues": 0}) == ""  # nothing retried
    assert retry_summary({}) == ""  # a run that started nothing
