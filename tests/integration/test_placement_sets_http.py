"""Placement sets over HTTP, on the small federation as real processes (2 GMs, 2 LMs, 2 worker
agents, RabbitMQ): a task submitted with `nodes` runs only there, waits (saying why) while they
are busy, and a job naming an unknown node is refused whole.

In deploy/federation-small.toml lm-2's nodes n0 and n1 are gm-1's partition, n2 and n3 gm-2's;
every node has 2000 millicores, so two tasks of 1500 never share one.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from test_federation import CONFIG, free_port_block, read_events, wait_done

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    logs = tmp_path_factory.mktemp("placement_sets")
    with LocalFederation(CONFIG, logs, base_port=free_port_block(6), amqp_url=amqp_url) as fed:
        yield fed


def post(client: httpx.Client, fed: LocalFederation, body: dict) -> httpx.Response:
    gm = fed.federation.queue_gm(body["user"])
    return client.post(fed.endpoints.url(gm) + "/v1/jobs", json=body)


def tasks(count: int, nodes: list[str], duration: float) -> list[dict]:
    return [{"cpu_m": 1500, "mem_mib": 256, "duration": duration, "nodes": nodes}
            for _ in range(count)]


def test_tasks_run_only_on_their_sets_and_a_busy_set_says_so(federation) -> None:
    fed = federation
    own, borrowed = ["lm-2/n1"], ["lm-2/n2", "lm-2/n3"]  # gm-1's node; gm-2's two
    jobs = {"ps-own": "u1", "ps-borrow": "u1", "ps-u2": "u2"}
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        for job_id, user, body_tasks in (("ps-own", "u1", tasks(3, own, 1.0)),
                                         ("ps-borrow", "u1", tasks(3, borrowed, 0.5)),
                                         ("ps-u2", "u2", tasks(2, own, 0.3))):
            response = post(client, fed, {"job_id": job_id, "user": user, "tasks": body_tasks})
            assert response.status_code == 202, response.text
        # one of ps-own's tasks runs on its single node, the others wait and say why
        deadline, seen = time.monotonic() + 10, []
        while time.monotonic() < deadline:
            status = client.get(fed.endpoints.url("gm-1") + "/v1/jobs/ps-own").json()
            waiting = [t for t in status.get("tasks", []) if t["reason"] == "placement_set_busy"]
            if waiting:
                seen.append(status["why_pending"][waiting[0]["task"]]["placement_set"])
                if seen[-1]["summary"] == "placement set: 1 node, all busy":
                    break
            time.sleep(0.05)
        assert seen and seen[-1]["summary"] == "placement set: 1 node, all busy", seen[-5:]
        assert seen[-1]["nodes"] == seen[-1]["up"] == 1 and seen[-1]["with_room"] == 0
        final = wait_done(client, fed, jobs, timeout=60)
    assert {job: status["state"] for job, status in final.items()} == dict.fromkeys(jobs, "done")
    time.sleep(0.5)  # let the last log lines land
    allowed = {"ps-own": own, "ps-borrow": borrowed, "ps-u2": own}
    launched = [e for e in read_events(fed.logs)
                if e["event"] == "task_launched" and e["svc"].startswith("lm-")
                and e.get("job") in allowed]
    assert {e["task"] for e in launched} >= {f"{job}/{i}" for job, n in
                                             (("ps-own", 3), ("ps-borrow", 3), ("ps-u2", 2))
                                             for i in range(n)}
    for event in launched:
        assert event["node"] in allowed[event["job"]], event
    # gm-1 borrowed gm-2's nodes for ps-borrow (repartitions), gm-2 gm-1's for ps-u2
    assert {e["gm"] for e in launched if e["job"] == "ps-borrow"} == {"gm-1"}
    assert all(e["logical"] for e in launched if e["job"] in ("ps-borrow", "ps-u2"))


def test_a_job_naming_an_unknown_or_no_node_is_refused_whole(federation) -> None:
    fed = federation
    url = fed.endpoints.url("gm-1") + "/v1/jobs"
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        for job_id, nodes, expected in (("ps-unknown", ["lm-2/n1", "lm-9/n0"], "lm-9/n0"),
                                        ("ps-empty", [], "at least one node")):
            body = {"job_id": job_id, "user": "u1", "tasks": [
                {"cpu_m": 100, "mem_mib": 64, "duration": 0.1},
                {"cpu_m": 100, "mem_mib": 64, "duration": 0.1, "nodes": nodes}]}
            response = client.post(url, json=body)
            assert response.status_code == 422, response.text
            detail = json.dumps(response.json()["detail"])
            assert '"nodes"' in detail and expected in detail, detail
            assert client.get(fed.endpoints.url("gm-1") + f"/v1/jobs/{job_id}"
                              ).status_code == 404
