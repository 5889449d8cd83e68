"""`megha replay` as a user runs it, against real GM, LM and worker processes: the open loop
keeps its schedule, and replaying the same run again does not run any job twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter

import pytest
from test_federation import CONFIG, ROOT, free_port_block, read_events

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ARRIVALS = [0.0, 0.5, 1.0, 1.0, 1.5, 2.5]  # two jobs at 1.0: both go out at once
SMALL_TASKS = ("--cpu-m", "400", "--mem-mib", "128")


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    logs = tmp_path_factory.mktemp("replay")
    with LocalFederation(CONFIG, logs, base_port=free_port_block(6), amqp_url=amqp_url) as fed:
        yield fed


def replay(fed: LocalFederation, trace, results, *extra: str) -> subprocess.CompletedProcess:
    gms = [f"--gm={gm}={fed.endpoints.url(gm)}" for gm in fed.federation.gms]
    return subprocess.run(
        [sys.executable, "-m", "megha", "replay", "--trace", str(trace), "--config", str(CONFIG),
         *gms, "--results", str(results), "--tokens", str(fed.tokens_file), *extra],
        capture_output=True, text=True, timeout=180, cwd=ROOT)


def test_open_loop_replay_keeps_its_schedule_and_retries_are_idempotent(federation, tmp_path):
    fed = federation
    trace = tmp_path / "six.tr"
    trace.write_text("".join(f"{100 + t} 3 0.3 0.2 0.3 0.4\n" for t in ARRIVALS))

    first = replay(fed, trace, tmp_path / "first.json", "--run-id", "idem", *SMALL_TASKS)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "6 completed, 0 failed, 0 unfinished" in first.stdout
    results = json.loads((tmp_path / "first.json").read_text())
    assert results["summary"]["tasks_with_start_time"] == 18
    for job in results["jobs"]:
        assert job["late_by_s"] < 0.1, job
        assert len(job["allocation_times_s"]) == 3 and min(job["allocation_times_s"]) >= 0

    time.sleep(0.5)
    accepted = {e["job"]: e["ts"] for e in read_events(fed.logs) if e["event"] == "job_accepted"}
    assert set(accepted) == {f"idem-{line}" for line in range(1, 7)}
    origin = accepted["idem-1"]
    for line, arrival in enumerate(ARRIVALS, start=1):
        assert accepted[f"idem-{line}"] - origin == pytest.approx(arrival, abs=0.15)

    # The same run again: every submission is a retry of a job the GMs already hold.
    second = replay(fed, trace, tmp_path / "second.json", "--run-id", "idem", *SMALL_TASKS)
    assert second.returncode == 0, second.stdout + second.stderr
    time.sleep(0.5)
    events = read_events(fed.logs)
    assert Counter(e["job"] for e in events if e["event"] == "job_accepted") == dict.fromkeys(
        accepted, 1)
    done = Counter(e["task"] for e in events if e["event"] == "task_done")
    assert len(done) == 18 and set(done.values()) == {1}


def test_a_refused_job_is_reported_with_its_reason(federation, tmp_path):
    trace = tmp_path / "wide.tr"
    trace.write_text("0 1 1 1\n")
    done = replay(federation, trace, tmp_path / "r.json", "--cpu-m", "64000")
    assert done.returncode == 1
    assert "0 accepted, 1 rejected" in done.stdout
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    reason = next(iter(summary["rejection_reasons"]))
    assert reason.startswith("tasks[0]: ") and "cpu" in reason, reason  # one line, not a dict


def test_a_synthesized_constrained_workload_runs_every_task_where_its_constraints_hold(
        federation, tmp_path):
    """`megha synth` then `megha replay --trace FILE.jsonl`: every task of a workload in which
    every task is constrained starts only on a node that has all its constraints."""
    fed = federation
    work = tmp_path / "constrained.jsonl"
    made = subprocess.run(
        [sys.executable, "-m", "megha", "synth", "--out", str(work), "--config", str(CONFIG),
         "--poisson", "10", "--count", "12", "--width", "choice:1,3", "--duration", "0.2",
         "--unconstrained-share", "0", "--cpu-m", "uniform:200,600", "--seed", "8"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    assert "(100.0% constrained)" in made.stdout
    done = replay(fed, work, tmp_path / "c.json", "--run-id", "cons")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "12 completed" in done.stdout

    wanted = {}
    lines = work.read_text().splitlines()
    for line in lines:
        job = json.loads(line)
        for k, task in enumerate(job["tasks"]):
            wanted[f"cons-{job['job_id']}/{k}"] = set(task["constraints"])
    assert len(lines) == 12 and all(wanted.values())
    has = {node.node_id: set(node.constraints) for lm in fed.federation.lms for node in lm.nodes}
    time.sleep(0.5)
    started = [e for e in read_events(fed.logs)
               if e["event"] == "task_started" and e["task"] in wanted]
    assert {e["task"] for e in started} == set(wanted)
    for event in started:
        assert wanted[event["task"]] <= has[event["node"]], event
