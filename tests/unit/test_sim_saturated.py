"""The simulator in the saturated regime: tasks wait, queues preempt each other, requests are
refused and retried. A seed still gives the same event log, byte for byte, so a change to the
scheduling core that claims to keep policy semantics can be checked against the log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(path: Path) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--config", "deploy/federation.toml",
         "--poisson", "10", "--count", "150", "--width", "const:8", "--constraints",
         "--target-load", "1.5", "--seed", "3", "--delay", "exp:0.0005", "--log", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return path.read_bytes()


def test_a_saturated_run_is_a_function_of_its_seed(tmp_path):
    first, second = run(tmp_path / "a.log"), run(tmp_path / "b.log")
    assert first == second
    # and it is saturated: tasks waited, queues preempted, launches were refused and requeued
    assert first.count(b'"event":"preemption_requested"') > 20
    assert first.count(b'"event":"task_requeued"') > 50
