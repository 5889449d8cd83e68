"""The whole federation as real processes (2 GMs, 2 LMs, 2 worker agents) on a real RabbitMQ,
driven over HTTP, checked from the JSON event logs the services write.

The small federation (deploy/federation-small.toml) has one node, lm-2/n0, that satisfies
every constraint; it lies in gm-1's partition. Tasks that need constraints 0 to 3 fit only
there, so gm-2 can run them only through repartitions, and both GMs' views race for it.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from services.local import LocalFederation, free_port_block  # noqa: F401 (the tests import it from here)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "federation-small.toml"
ONLY_ON_N0 = [0, 1, 2, 3]


def read_events(logs: Path) -> list[dict]:
    events = []
    for path in sorted(logs.glob("*.log")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            record = json.loads(line)  # every line a service prints is one JSON object
            assert {"ts", "svc", "event"} <= record.keys(), f"{path.name}:{number}: {line}"
            events.append(record)
    return events


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    logs = tmp_path_factory.mktemp("federation")
    with LocalFederation(CONFIG, logs, base_port=free_port_block(6), amqp_url=amqp_url) as fed:
        yield fed


def submit(client: httpx.Client, fed: LocalFederation, user: str, job_id: str, tasks: int,
           cpu: int, duration: float, constraints: list[int] | None = None) -> None:
    gm = fed.federation.queue_gm(user)
    body = {"job_id": job_id, "user": user, "tasks": [
        {"cpu_m": cpu, "mem_mib": 256, "duration": duration, "constraints": constraints or []}
        for _ in range(tasks)]}
    response = client.post(fed.endpoints.url(gm) + "/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    assert response.json()["job_id"] == job_id


def wait_done(client: httpx.Client, fed: LocalFederation, jobs: dict[str, str],
              timeout: float = 90.0) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    final: dict[str, dict] = {}
    while len(final) < len(jobs):
        for job_id, user in jobs.items():
            if job_id in final:
                continue
            gm = fed.federation.queue_gm(user)
            status = client.get(fed.endpoints.url(gm) + f"/v1/jobs/{job_id}").json()
            if status["state"] in ("done", "failed"):
                final[job_id] = status
        if time.monotonic() > deadline:
            waiting = {j: client.get(fed.endpoints.url(fed.federation.queue_gm(u))
                                     + f"/v1/jobs/{j}").json()
                       for j, u in jobs.items() if j not in final}
            raise AssertionError(f"jobs not done in {timeout}s: {json.dumps(waiting)[:3000]}")
        time.sleep(0.2)
    return final


def test_every_job_completes_and_the_logs_account_for_every_task(federation) -> None:
    fed = federation
    jobs: dict[str, str] = {}
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        for k in range(6):  # both GMs at once: they race for the same nodes
            for user in ("u1", "u2"):
                job_id = f"{user}-plain-{k}"
                submit(client, fed, user, job_id, tasks=4, cpu=500, duration=0.3)
                jobs[job_id] = user
        for k in range(3):
            for user in ("u1", "u2"):
                job_id = f"{user}-n0-{k}"
                submit(client, fed, user, job_id, tasks=2, cpu=700, duration=0.4,
                       constraints=ONLY_ON_N0)
                jobs[job_id] = user
        # a resubmission with the same id is the same job, not a second one
        submit(client, fed, "u1", "u1-plain-0", tasks=4, cpu=500, duration=0.3)
        final = wait_done(client, fed, jobs)
        assert {job: status["state"] for job, status in final.items()} == dict.fromkeys(
            jobs, "done")
        assert client.get(fed.endpoints.url("gm-1") + "/v1/jobs/nope").status_code == 404
    time.sleep(0.5)  # let the last log lines land
    events = read_events(fed.logs)
    by_name = defaultdict(list)
    for event in events:
        by_name[event["event"]].append(event)

    # each task completed exactly once, and its allocation time can be computed
    done = [e for e in by_name["task_done"] if e["svc"].startswith("gm-")]
    assert sorted(e["task"] for e in done) == sorted(
        f"{job}/{i}" for job in jobs for i in range(2 if "-n0-" in job else 4))
    arrival = {e["job"]: e["arrival"] for e in by_name["job_accepted"]}
    started = {e["attempt"]: e["ts"] for e in by_name["task_started"]
               if "/w" in e["svc"]}  # the worker agents' own record of each start
    allocation = [started[e["attempt"]] - arrival[e["job"]] for e in done]
    assert all(0 <= a < 30 for a in allocation), allocation

    # the constrained tasks forced repartitions, and the race produced stale launches that
    # were refused and placed again
    assert by_name["repartition"], "no repartition happened"
    refused = [e for e in by_name["launch_refused"] if e["reason"] == "stale_view"]
    assert refused, "no stale launch was refused"
    n0 = [e for e in by_name["task_launched"] if e["node"] == "lm-2/n0"]
    assert {e["gm"] for e in n0} == {"gm-1", "gm-2"}
    assert any(e["logical"] for e in n0 if e["gm"] == "gm-2")

    # no node was ever over-committed, replaying each LM's own log in order
    capacity = {node.node_id: node.capacity for t in fed.federation.topologies()
                for node in t.nodes}
    for lm in ("lm-1", "lm-2"):
        used: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        demand: dict[str, tuple[str, int, int]] = {}
        for event in (e for e in events if e["svc"] == lm):
            if event["event"] == "task_launched":
                demand[event["attempt"]] = (event["node"], event["cpu_m"], event["mem_mib"])
                node = used[event["node"]]
                node[0] += event["cpu_m"]
                node[1] += event["mem_mib"]
                cap = capacity[event["node"]]
                assert node[0] <= cap.cpu_m and node[1] <= cap.mem_mib, event
            elif event["event"] in ("task_finished", "task_preempted", "task_lost",
                                    "task_failed", "task_cancelled") \
                    and event["attempt"] in demand:
                node_id, cpu, mem = demand.pop(event["attempt"])
                used[node_id][0] -= cpu
                used[node_id][1] -= mem


def test_bad_jobs_are_refused_with_the_field_and_nothing_is_accepted(federation) -> None:
    fed = federation
    url = fed.endpoints.url("gm-1") + "/v1/jobs"
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        cases = {
            "cpu_m": {"user": "u1", "tasks": [{"cpu_m": 0, "mem_mib": 1}]},
            "usr": {"usr": "u1", "tasks": [{"cpu_m": 1, "mem_mib": 1}]},
            "constraints": {"user": "u1", "tasks": [{"cpu_m": 1, "mem_mib": 1,
                                                     "constraints": [99]}]},
            "tasks": {"user": "u1", "tasks": [{"cpu_m": 10**7, "mem_mib": 1}]},
            "user": {"user": "u2", "tasks": [{"cpu_m": 1, "mem_mib": 1}]},  # gm-2's queue
        }
        for field, body in cases.items():
            response = client.post(url, json={"job_id": f"bad-{field}", **body})
            assert response.status_code == 422, (field, response.text)
            assert field in json.dumps(response.json()["detail"]), (field, response.text)
            assert client.get(fed.endpoints.url("gm-1") + f"/v1/jobs/bad-{field}"
                              ).status_code == 404
