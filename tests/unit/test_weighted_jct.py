"""The weighted JCT (sum of weight x JCT over the sum of weights, over the jobs done): from
hand-made logs worked out by hand, in the reports, and from a simulated run with `wspt`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from common.models import JobSpec, TaskSpec
from common.resources import Resources
from inspection.analysis import RunAnalysis
from inspection.compare import FIGURES, compare
from inspection.html import render_html
from inspection.terminal import render_comparison, render_run
from simulator.cluster import SLOT, shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation
from simulator.run_settings import Overrides

ROOT = Path(__file__).resolve().parents[2]
READ = {"events": 1, "lines": 1, "malformed": 0, "examples": []}


def ev(ts: float, event: str, **fields) -> dict:
    return {"ts": ts, "svc": "gm-1", "event": event, "gm": "gm-1", **fields}


def report_of(events: list[dict], name: str = "run") -> dict:
    run = RunAnalysis(name)
    for event in events:
        run.feed(event)
    return run.report()


def log(weights: dict[str, float | None]) -> list[dict]:
    """Four jobs of u1: (job, arrival, JCT) a 0 10, b 1 20, c 2 40, d 3 (fails at 5). A job's
    weight is left out of its job_arrived where `weights` says None (a log from before)."""
    events = []
    for job, arrival, jct in (("a", 0.0, 10.0), ("b", 1.0, 20.0), ("c", 2.0, 40.0),
                              ("d", 3.0, 2.0)):
        ids = {"job": job, "user": "u1", "tasks": 1, "arrival": arrival}
        weight = weights.get(job)
        events.append(ev(arrival, "job_arrived", **ids, pilots=0,
                         **({} if weight is None else {"weight": weight})))
        events.append(ev(arrival + jct, "job_failed" if job == "d" else "job_done", **ids,
                         reason=""))
    return events


def test_the_weighted_mean_of_a_hand_made_log():
    # a 3 x 10, b 1 x 20, c 0.5 x 40 over 3 + 1 + 0.5: 70 / 4.5; d failed: not counted
    jct = report_of(log({"a": 3.0, "b": 1.0, "c": 0.5, "d": 100.0}))["jct"]
    assert jct["weighted_mean"] == pytest.approx(70.0 / 4.5)
    assert jct["weighted"] is True
    assert jct["overall"]["mean"] == pytest.approx(70.0 / 3)  # the plain mean is kept


def test_an_arrival_without_weight_counts_as_one():
    # a weighs 3, b and c carry none (as an old log): (30 + 20 + 40) / (3 + 1 + 1)
    jct = report_of(log({"a": 3.0}))["jct"]
    assert jct["weighted_mean"] == pytest.approx(90.0 / 5)
    old = report_of(log({}))["jct"]  # no weight anywhere: the mean, and not `weighted`
    assert old["weighted_mean"] == pytest.approx(old["overall"]["mean"])
    assert old["weighted"] is False
    # the job_done after it (no weight field) does not reset the arrival's weight
    events = log({"a": 3.0})
    events.reverse()
    assert report_of(events)["jct"]["weighted_mean"] == pytest.approx(90.0 / 5)


def test_no_job_done_has_no_weighted_mean():
    jct = report_of([ev(0.0, "job_arrived", job="a", user="u1", tasks=1, arrival=0.0,
                        weight=2.0)])["jct"]
    assert jct["weighted_mean"] is None and jct["weighted"] is False


def test_reports_show_the_weighted_jct_only_when_some_weight_is_not_one():
    weighted = report_of(log({"a": 3.0, "b": 1.0, "c": 0.5}), "wspt") | {"read": READ}
    plain = report_of(log({}), "fifo") | {"read": READ}

    table = compare([plain, weighted])
    labels = [row["figure"] for row in table["rows"]]
    assert labels[labels.index("JCT mean (s)") + 1] == "weighted JCT mean (s)"
    row = next(row for row in table["rows"] if row["figure"] == "weighted JCT mean (s)")
    assert row["values"] == pytest.approx([70.0 / 3, 70.0 / 4.5])
    assert row["ratios"][1] == pytest.approx(3 / 4.5)
    assert [row["figure"] for row in compare([plain, plain])["rows"]] == [
        label for label, _ in FIGURES]

    console = Console(record=True, width=160)
    render_run(console, weighted, READ)
    render_comparison(console, table)
    text = console.export_text()
    assert "weighted JCT mean 15.56 s" in text and "over 3 jobs done" in text
    assert "weighted JCT mean (s)" in text
    console = Console(record=True, width=160)
    render_run(console, plain, READ)
    assert "weighted JCT" not in console.export_text()

    page = render_html({"runs": [plain, weighted], "comparison": table}, {})
    assert 'id="weighted-jct-wspt"' in page and 'id="weighted-jct-fifo"' not in page
    assert "weighted JCT mean (s)" in page


# -- from the simulator ---------------------------------------------------------------------


def job(job_id: str, arrival: float, duration: float, weight: float) -> JobSpec:
    return JobSpec(job_id, "q1", (TaskSpec(f"{job_id}/0", job_id, Resources(*SLOT),
                                           duration=duration),), arrival, weight=weight)


def simulate(policy: str, path: Path) -> dict:
    """One slot, busy with `first` until 10 s; a light long job (1, 20 s) arrives before a
    heavy short one (4, 5 s), both waiting for it."""
    federation = shaped_federation(1, 1, 1, slots=True, heartbeat_interval=1.0)
    federation = Overrides(job_policy=policy).apply(federation)
    jobs = [job("first", 0.0, 10.0, 1.0), job("light-long", 1.0, 20.0, 1.0),
            job("heavy-short", 2.0, 5.0, 4.0)]
    log = SimLog(policy, path)
    sim = FederatedSimulation(federation, jobs, log)
    sim.run()
    sim.check_invariants()
    log.close()
    return log.report()


def by_hand(path: Path) -> tuple[float, dict[str, float]]:
    """The weighted mean JCT from the log's own lines, and each job's JCT."""
    arrived, done = {}, {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "job_arrived":
            arrived[event["job"]] = (event["arrival"], event["weight"])
        elif event["event"] == "job_done":
            done[event["job"]] = event["ts"]
    jct = {name: done[name] - arrived[name][0] for name in done}
    total = sum(arrived[name][1] for name in done)
    return sum(arrived[name][1] * jct[name] for name in done) / total, jct


def test_a_simulated_run_logs_weights_and_wspt_lowers_the_weighted_jct(tmp_path):
    means = {}
    for policy in ("fifo", "wspt"):
        path = tmp_path / f"{policy}.log"
        report = simulate(policy, path)
        mean, jct = by_hand(path)
        assert report["jct"]["weighted"] is True
        assert report["jct"]["weighted_mean"] == pytest.approx(mean)
        means[policy] = mean
        if policy == "wspt":
            assert jct["heavy-short"] < jct["light-long"]
        else:
            assert jct["light-long"] < jct["heavy-short"]
    assert means["wspt"] < means["fifo"]


def test_the_simulate_command_writes_the_weighted_mean(tmp_path):
    results = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "20", "--gms", "1", "--lms", "1",
         "--slots", "--poisson", "1", "--count", "60", "--width", "uniform:1,4",
         "--weight", "choice:1,4", "--job-policy", "wspt", "--target-load", "0.9",
         "--no-log", "--results", str(results), "--seed", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    jct = json.loads(results.read_text())["jct"]
    assert jct["weighted"] is True and jct["overall"]["count"] == 60
    assert jct["weighted_mean"] > 0
