"""Redundant copies in the simulated federated cluster: the same LM, GM and worker cores as
the services, on a trace with machine variability (docs/redundancy.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from loadgen.paper_workloads import YH1_SUB

ROOT = Path(__file__).resolve().parents[2]


def simulate(log: Path, *extra: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "60", "--gms", "2", "--lms", "2",
         "--nodes-per-worker", "10", "--slots", "--trace", str(YH1_SUB),
         "--jobs", "25", "--duration-scale", "0.01", "--variability", "two-state",
         "--log", str(log), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]  # the invariants are checked at the end
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_copies_race_and_every_task_completes_once_the_same_way_every_time(tmp_path) -> None:
    events = simulate(tmp_path / "a.log", "--redundancy", "srpt+r")
    simulate(tmp_path / "b.log", "--redundancy", "srpt+r")
    assert (tmp_path / "a.log").read_bytes() == (tmp_path / "b.log").read_bytes()
    kinds = Counter(e["event"] for e in events)
    assert kinds["copy_launched"] and kinds["task_checkpointed"] and kinds["task_restored"]
    wins = [e for e in events if e["event"] == "copy_won"]
    assert any(e["by_copy"] for e in wins) and any(not e["by_copy"] for e in wins)
    done = Counter(e["task"] for e in events if e["event"] == "task_done")
    assert done and set(done.values()) == {1}
    assert kinds["job_done"] == 25
    # copies and their checkpoints are an LM's business: GMs hear one start and one end
    copies = {e["attempt"] for e in events if e["event"] == "copy_launched"}
    gm_attempts = {e["attempt"] for e in events if e["svc"].startswith("gm")
                   and "attempt" in e}
    assert not copies & gm_attempts


def test_without_a_policy_no_copy_runs(tmp_path) -> None:
    events = simulate(tmp_path / "none.log")
    assert not any(e["event"].startswith("copy_") or e.get("copy_of") for e in events)
