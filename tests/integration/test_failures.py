"""Breaking parts of a running federation on purpose: a GM, an LM or a worker agent killed
with SIGKILL mid-run, RabbitMQ restarted. Every accepted job must still complete, and no task
may complete twice. Real processes, real broker, checked over HTTP and from the event logs.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import httpx
import pytest
from test_federation import CONFIG, free_port_block, read_events, submit, wait_done

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def federation(tmp_path, amqp_url):
    with LocalFederation(CONFIG, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed:
        yield fed


def workload(client: httpx.Client, fed: LocalFederation, tag: str, jobs: int = 4,
             tasks: int = 4, duration: float = 1.5) -> dict[str, str]:
    submitted = {}
    for k in range(jobs):
        for user in ("u1", "u2"):
            job_id = f"{tag}-{user}-{k}"
            submit(client, fed, user, job_id, tasks=tasks, cpu=500, duration=duration)
            submitted[job_id] = user
    return submitted


def completions(fed: LocalFederation) -> Counter:
    """How often each task was completed, by every GM incarnation's own log."""
    return Counter(e["task"] for e in read_events(fed.logs)
                   if e["event"] == "task_done" and e["svc"].startswith("gm-"))


def wait_running(client: httpx.Client, fed: LocalFederation, lm: str,
                 timeout: float = 20.0) -> None:
    """Until a worker agent of `lm` runs tasks (an LM's launch may still be on its way)."""
    workers = [w for w, owner in fed.federation.workers().items() if owner == lm]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            if client.get(fed.endpoints.url(worker) + "/v1/state").json()["running"]:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing ever ran on {lm}")


def assert_all_done_once(fed: LocalFederation, final: dict, jobs: dict[str, str],
                         tasks: int = 4) -> None:
    assert {job: status["state"] for job, status in final.items()} == dict.fromkeys(jobs, "done")
    done = completions(fed)
    expected = {f"{job}/{i}" for job in jobs for i in range(tasks)}
    assert set(done) == expected
    assert max(done.values()) == 1, [t for t, n in done.items() if n > 1]


def test_a_killed_gm_restarts_without_losing_or_repeating_anything(federation) -> None:
    fed = federation
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        jobs = workload(client, fed, "gmkill")
        wait_running(client, fed, "lm-1")
        fed.kill("gm-1", signal.SIGKILL)
        time.sleep(1.0)  # its tasks keep running and finishing while it is gone
        fed.start_service("gm-1")
        fed.wait_healthy(["gm-1"])
        final = wait_done(client, fed, jobs)
    assert_all_done_once(fed, final, jobs)
    events = read_events(fed.logs)
    starts = [e for e in events if e["svc"] == "gm-1" and e["event"] == "gm_starting"]
    assert len(starts) == 2 and starts[0]["epoch"] < starts[1]["epoch"]
    replayed = [e for e in events if e["svc"] == "gm-1" and e["event"] == "job_replayed"]
    assert replayed, "the restarted GM did not replay its store"


def test_a_killed_lm_recovers_its_running_tasks_from_its_workers(federation) -> None:
    fed = federation
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        # tasks must outlive the restart (a second or two), or there is nothing to adopt
        jobs = workload(client, fed, "lmkill", duration=5.0)
        wait_running(client, fed, "lm-1")
        fed.kill("lm-1", signal.SIGKILL)
        fed.start_service("lm-1")
        fed.wait_healthy(["lm-1"])
        final = wait_done(client, fed, jobs)
    assert_all_done_once(fed, final, jobs)
    adopted = [e for e in read_events(fed.logs)
               if e["svc"] == "lm-1" and e["event"] == "attempt_adopted"]
    assert adopted, "the restarted LM adopted nothing from its workers"


def test_a_killed_worker_has_its_tasks_requeued_and_finished_elsewhere(federation) -> None:
    fed = federation
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        jobs = workload(client, fed, "workerkill", duration=2.0)
        wait_running(client, fed, "lm-1")
        fed.kill("lm-1/w0", signal.SIGKILL)
        final = wait_done(client, fed, jobs)
    assert_all_done_once(fed, final, jobs)
    events = read_events(fed.logs)
    lost = [e for e in events if e["svc"] == "lm-1" and e["event"] == "task_lost"]
    assert lost, "the LM never reported the dead worker's tasks lost"
    lost_tasks = {e["task"] for e in lost}
    finished_on = {e["task"]: e["lm"] for e in events
                   if e["event"] == "task_done" and e["svc"].startswith("gm-")}
    assert all(finished_on[task] == "lm-2" for task in lost_tasks)


def test_every_service_reconnects_after_rabbitmq_restarts(federation, restart_rabbitmq) -> None:
    fed = federation
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        jobs = workload(client, fed, "rabbit", duration=2.0)
        wait_running(client, fed, "lm-1")
        restart_rabbitmq()
        more = workload(client, fed, "after", jobs=2, duration=0.5)  # accepted again
        final = wait_done(client, fed, {**jobs, **more}, timeout=120)
    assert_all_done_once(fed, final, {**jobs, **more})
    connected = Counter(e["svc"] for e in read_events(fed.logs)
                        if e["event"] == "broker_connected")
    for service in ("gm-1", "gm-2", "lm-1", "lm-2"):
        assert connected[service] >= 2, (service, connected)
