"""The compose testbed end to end: the sample replay as the quick start runs it, then an LM,
a worker and a GM container killed, and RabbitMQ restarted, in the middle of a replay. Each
test restarts what it broke, so the next test starts from a whole testbed again.

What "nothing accepted was lost" means here: every job a GM answered 202 for ends `done`, the
logs show each of its tasks finishing exactly once at its GM, and replaying each LM's own
events never finds a node holding more cpu or memory than it has (`no_node_overcommitted`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import pytest
from conftest import (
    ROOT,
    SERVICES,
    ComposeProject,
    accepted_jobs_all_done,
    no_node_overcommitted,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# The sample at a third of its pace: about 25 s of arrivals, tasks of a few seconds, so a kill
# 8 s in lands while tasks run everywhere.
KILL_REPLAY = ("--time-scale", "0.35", "--duration-scale", "0.35", "--cpu-m", "1000",
               "--mem-mib", "1024")
BREAK_AFTER = 8.0  # seconds into the replay


def test_sample_replay_completes_and_logs_time_every_allocation(testbed: ComposeProject) -> None:
    testbed.compose("up", "-d")
    loadgen = testbed.container("loadgen")
    exit_status = loadgen.wait(timeout=600)["StatusCode"]
    output = loadgen.logs().decode()
    assert exit_status == 0, output[-3000:]
    assert "10 accepted, 0 rejected" in output and "10 completed, 0 failed" in output, output

    events = testbed.events()
    arrivals = {e["job"]: (e["arrival"], e["tasks"]) for e in events
                if e["event"] == "job_accepted"}
    assert len(arrivals) == 10
    first_start: dict[str, float] = {}
    tasks_of: dict[str, set[str]] = defaultdict(set)
    for event in events:
        if event["event"] == "task_started" and event["job"] in arrivals:
            first_start.setdefault(event["task"], event["ts"])
            tasks_of[event["job"]].add(event["task"])
    allocations = []
    for job, (arrival, tasks) in arrivals.items():
        assert len(tasks_of[job]) == tasks, f"{job}: {len(tasks_of[job])} of {tasks} started"
        for task in tasks_of[job]:
            allocation = first_start[task] - arrival
            assert 0 <= allocation < 30, (task, allocation)
            allocations.append(allocation)

    # `docker compose logs` as a user pipes it (prefixes and all) into `megha inspect`
    logs = testbed.compose("logs", "--no-color").stdout
    inspected = subprocess.run([sys.executable, "-m", "megha", "inspect", "-", "--json", "-"],
                               input=logs, capture_output=True, text=True, timeout=120,
                               cwd=ROOT)
    assert inspected.returncode == 0, inspected.stderr
    report = json.loads(inspected.stdout)["runs"][0]
    assert report["counts"]["jobs_done"] == 10
    assert report["allocation"]["overall"]["count"] == len(allocations) == 183
    assert report["allocation"]["overall"]["max"] == pytest.approx(max(allocations), abs=1e-5)
    breakdown = report["breakdown"]
    assert breakdown["tasks"] == 183 and breakdown["incomplete"] == 0
    assert sum(breakdown["mean_s"].values()) == pytest.approx(
        report["allocation"]["overall"]["mean"], abs=1e-6)
    assert report["fairness"]["capacity_cpu_m"] == 3 * 40 * 2000


def _break_mid_replay(testbed: ComposeProject, service: str,
                      break_it: Callable[[], float | None]) -> tuple[dict, float]:
    """Replay, `break_it()` `BREAK_AFTER` s in (it leaves `service` started again), wait until
    `service` passes its health check; the replay's results, checked, and when it broke:
    the time `break_it` returns, if it knows better than the time it was called."""
    # up already when the sample test ran first; this makes each test runnable on its own
    testbed.compose("up", "-d", *SERVICES)
    testbed.wait_healthy(SERVICES)
    replay, results = testbed.replay(*KILL_REPLAY)
    # a point in the replay, not a condition: the arrivals run on the replay's own clock
    time.sleep(BREAK_AFTER)
    broken_at = time.time()
    when = break_it()
    if when is not None:
        broken_at = when
    testbed.wait_healthy([service])
    output, _ = replay.communicate(timeout=600)
    assert replay.returncode == 0, output[-4000:]
    return accepted_jobs_all_done(testbed, results), broken_at


def _kill_mid_replay(testbed: ComposeProject, service: str, down_for: float) -> tuple[dict, float]:
    """Kill `service` mid-replay and start it again `down_for` s later; when it was killed
    is when the kill returned: a task that ended while the engine was still looking up and
    signalling the container ended normally (it was once counted as a victim the kill lost)."""
    def kill_and_start() -> float:
        container = testbed.container(service)
        container.kill()
        killed_at = time.time()
        time.sleep(down_for)  # the outage itself: how long the service stays dead
        container.start()
        return killed_at

    return _break_mid_replay(testbed, service, kill_and_start)


def _each_task_done_once(testbed: ComposeProject, outcome: dict) -> list[dict]:
    """Every task of the replay's jobs logged `task_done` exactly once, by its job's GM; every
    event of the run, for further checks."""
    events = testbed.events()
    gm_of = {job["job"]: job["gm"] for job in outcome["jobs"]}
    done = Counter(e["task"] for e in events if e["event"] == "task_done"
                   and e["job"] in gm_of and e["svc"] == gm_of[e["job"]])
    assert len(done) == sum(job["tasks"] for job in outcome["jobs"])
    assert set(done.values()) == {1}, [t for t, n in done.items() if n > 1]
    return events


def _nothing_overcommitted(events: list[dict]) -> dict[str, int]:
    counts = no_node_overcommitted(events)
    assert counts["launched"] > 0, counts  # the check saw the run, not an empty log
    return counts


def _running_on(events: list[dict], worker_or_lm: str, key: str, at: float) -> set[str]:
    """Attempts started on `worker_or_lm` before `at` and not finished by then."""
    started = {e["attempt"] for e in events if e["event"] == "task_started"
               and e.get(key) == worker_or_lm and e["ts"] < at}
    ended = {e["attempt"] for e in events if e["event"] in ("task_finished", "task_cancelled")
             and e["ts"] < at}
    return started - ended


def test_killed_worker_its_tasks_run_elsewhere_and_nothing_is_lost(testbed: ComposeProject) -> None:
    outcome, killed_at = _kill_mid_replay(testbed, "lm-2-w0", down_for=8)
    events = _each_task_done_once(testbed, outcome)
    victims = _running_on(events, "lm-2/w0", "worker", killed_at)
    assert victims, "the kill should land while tasks run on lm-2/w0"
    assert any(e["event"] == "node_down" and e["ts"] > killed_at for e in events)
    lost = {e["task"] for e in events if e["event"] == "task_requeued" and e["ts"] > killed_at}
    assert {attempt.rpartition("#")[0] for attempt in victims} <= lost
    _nothing_overcommitted(events)


def test_killed_lm_recovers_from_its_workers_and_nothing_is_lost(testbed: ComposeProject) -> None:
    outcome, killed_at = _kill_mid_replay(testbed, "lm-1", down_for=3)
    events = _each_task_done_once(testbed, outcome)
    assert _running_on(events, "lm-1", "lm", killed_at), "tasks should run under lm-1"
    restarted = [e for e in events if e["svc"] == "lm-1" and e["event"] == "lm_started"
                 and e["ts"] > killed_at]
    assert restarted, "lm-1 should have started again"
    # the restarted lm-1 re-took what its workers still ran (job 3's tasks run up to 12 s),
    # so the check also replays adoptions, the LM's one way to take resources without a launch
    assert _nothing_overcommitted(events)["adopted"] > 0, "lm-1 should adopt running attempts"


def test_killed_gm_resumes_its_accepted_jobs_and_nothing_is_lost(testbed: ComposeProject) -> None:
    outcome, killed_at = _kill_mid_replay(testbed, "gm-1", down_for=3)
    events = _each_task_done_once(testbed, outcome)
    gm1_jobs = {job["job"] for job in outcome["jobs"] if job["gm"] == "gm-1"}
    accepted_before = {e["job"] for e in events if e["event"] == "job_accepted"
                       and e["svc"] == "gm-1" and e["ts"] < killed_at}
    assert accepted_before & gm1_jobs, "gm-1 should hold jobs when it is killed"
    # a restarted GM takes its jobs back from its store, or from its queue those it had not
    # consumed yet when it died
    recovered = {e["job"] for e in events if e["svc"] == "gm-1" and e["ts"] > killed_at
                 and e["event"] in ("job_replayed", "job_arrived")}
    finished_before = {e["job"] for e in events if e["event"] == "job_done"
                       and e["ts"] < killed_at}
    assert accepted_before - finished_before <= recovered
    # a GM that restarts with a stale idea of what runs must not make an LM over-commit
    _nothing_overcommitted(events)


def test_rabbitmq_restarted_mid_replay_nothing_accepted_is_lost(testbed: ComposeProject) -> None:
    """The broker restarts while jobs arrive and tasks run: submissions, heartbeats and task
    events all stop for a while. The GMs accept nothing meanwhile (a job is accepted once
    RabbitMQ has it on disk; the replay retries), the services reconnect, and every job
    accepted before or after completes, each task once."""
    def restart() -> None:
        testbed.compose("restart", "rabbitmq", timeout=120)

    outcome, restarted_at = _break_mid_replay(testbed, "rabbitmq", restart)
    events = _each_task_done_once(testbed, outcome)
    _nothing_overcommitted(events)
    accepted_at = [e["ts"] for e in events if e["event"] == "job_accepted"
                   and e["job"] in {job["job"] for job in outcome["jobs"]}]
    assert min(accepted_at) < restarted_at < max(accepted_at), "the restart should be mid-replay"
    # every GM and LM lost the broker and found it again (the restart really cut them off)
    for svc in ("gm-1", "gm-2", "lm-1", "lm-2", "lm-3"):
        mine = [e for e in events if e["svc"] == svc and e["ts"] > restarted_at]
        lost_at = next((e["ts"] for e in mine if e["event"] == "broker_disconnected"), None)
        assert lost_at is not None, f"{svc} never noticed the broker going away"
        assert any(e["event"] == "broker_connected" and e["ts"] > lost_at for e in mine), (
            f"{svc} never reconnected to the broker")
