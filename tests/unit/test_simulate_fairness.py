"""`megha simulate --fairness`: the GMs' fairness policy chosen on the command line (none: no
preemption at all), and the run's first line saying which policies are in force and how the
jobs were given to the user queues."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from common.errors import InvalidInput
from loadgen.paper_workloads import YH1_SUB
from simulator.cluster import shaped_federation
from simulator.run_settings import Overrides

ROOT = Path(__file__).resolve().parents[2]
PREEMPTION = ("task_preempted", "preemption_requested", "preemption_refused")


def simulate(*extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--slots", "--nodes", "300", "--gms", "2",
         "--lms", "3", "--trace", str(YH1_SUB), "--jobs", "200", "--target-load", "1.5",
         *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300)


def saturated_run(log: Path, *extra: str) -> tuple[str, Counter]:
    """The first line printed and the count of each event of the log."""
    done = simulate("--log", str(log), *extra)
    assert done.returncode == 0, done.stderr[-2000:]  # the invariants are checked at the end
    events = Counter(json.loads(line)["event"] for line in log.read_text().splitlines())
    return done.stdout.splitlines()[0], events


def test_fairness_none_preempts_nothing_where_the_default_does(tmp_path) -> None:
    first, events = saturated_run(tmp_path / "default.log")
    assert "fairness fair_share," in first
    assert events["task_preempted"] and events["preemption_requested"]  # saturated: it preempts

    first, events = saturated_run(tmp_path / "none.log", "--fairness", "none")
    assert not any(events[kind] for kind in PREEMPTION)
    assert events["job_done"] == 200  # every job still ends
    assert "job policy fifo, fairness none, placement first_fit" in first
    # what the line said before is still there
    assert first.startswith("simulating megha on 300 nodes, 2 GMs, 3 LMs: 200 jobs")
    assert "slot mode" in first
    # and how the jobs went to the queues: both of the shape's queues, at random
    assert "jobs to the federation's 2 queues at random, equally (q1 " in first
    counts = first.rsplit("(", 1)[1].rstrip(")").split(", ")
    assert sum(int(item.split()[1]) for item in counts) == 200


def test_an_unknown_fairness_policy_is_refused_by_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "30", "--lms", "3", "--no-log",
         "--fairness", "fairest"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode != 0
    assert "--fairness" in done.stderr and "'fairest'" in done.stderr
    assert "fair_share" in done.stderr and "none" in done.stderr  # the known ones are listed


def test_overrides_set_the_federations_fairness_and_keep_its_options() -> None:
    federation = shaped_federation(30, 2, 3, slots=True)
    assert federation.policies.fairness == "fair_share"
    assert Overrides().apply(federation) is federation
    changed = Overrides(fairness="none").apply(federation)
    assert changed.policies.fairness == "none"
    assert changed.policies.fairness_options == federation.policies.fairness_options
    assert Overrides(fairness="none").describe() == "fairness none"
    with pytest.raises(InvalidInput, match="fairness"):
        Overrides(fairness="fairest").apply(federation)


def test_the_cluster_experiments_offer_it_too() -> None:
    done = subprocess.run([sys.executable, "-m", "megha", "experiment", "baselines", "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--fairness {fair_share,fair_share_paper,none}" in done.stdout


def test_refused_sends_a_refused_task_to_its_jobs_tail_whatever_the_fairness() -> None:
    federation = shaped_federation(30, 2, 3, slots=True)
    assert federation.policies.fairness_options.resolve("fair_share").refused == "front"
    changed = Overrides(refused="tail").apply(federation)
    assert changed.policies.fairness_options.resolve("fair_share").refused == "tail"
    assert changed.gm_config("gm-1").fairness_options.refused_to_tail
    assert changed.policies.fairness == federation.policies.fairness  # nothing else moves
    assert Overrides(refused="tail").describe() == "refused tail"
    with pytest.raises(InvalidInput, match="refused"):
        Overrides(refused="sideways").apply(federation)


def test_the_first_line_says_where_a_refused_task_goes(tmp_path) -> None:
    first, events = saturated_run(tmp_path / "tail.log", "--fairness", "none", "--refused",
                                  "tail")
    assert "fairness none, placement first_fit, refused tasks to their job's tail" in first
    assert events["job_done"] == 200


def test_the_megha_figures_run_the_papers_setup_unless_told(tmp_path) -> None:
    """The figures' sweeps draw a profile per LM and send refused tasks to the tail (the
    paper's setup); `--profile A --refused front` is `megha simulate --nodes`'s."""
    def first_line(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "megha", "experiment", "heartbeat", "--values", "10",
             "--nodes", "60", "--gms", "2", "--lms", "6", "--jobs", "5", "--workers", "1",
             "--no-log", "--out", str(tmp_path / "out"), *extra],
            capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.splitlines()[0]

    paper = first_line()
    assert "profiles A, B or C drawn per LM" in paper and "refused tail" in paper
    ours = first_line("--profile", "A", "--refused", "front")
    assert "profile A on every LM" in ours and "refused front" in ours
