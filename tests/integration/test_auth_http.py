"""Authentication and request limits against real GM, LM and worker processes.

Every route a service lists in its OpenAPI document (read with the cluster token) is called
without a token and with a wrong one: a route added without authentication fails here. Then
role tokens (the federation runs with them, each process holding only its own role's token
and the others' digests), user tokens against other queues, the body cap, the task cap, the
submission rate (and the replayer waiting it out like a full backlog), and services started
without their tokens.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_federation import CONFIG, ROOT, free_port_block

from api.endpoints import Endpoints
from loadgen.replay import Replayer
from loadgen.workload import ReplayJob, ReplayTask
from services.auth import OPEN_PATHS, generate_token
from services.job_body import submission_body_cap
from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MAX_BODY = 65_536
LIMITS = "\n[limits]\nmax_tasks_per_job = 5\nsubmit_rate_per_token = 1.0\nsubmit_burst = 4\n"
SERVICES = ("gm-1", "lm-1", "lm-1/w0")
WRONG = {"Authorization": f"Bearer {generate_token()}"}


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    folder = tmp_path_factory.mktemp("auth")
    config = folder / "federation.toml"
    config.write_text(CONFIG.read_text() + LIMITS)
    with LocalFederation(config, folder / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url,
                         extra_env={"MEGHA_MAX_BODY_BYTES": str(MAX_BODY)}) as fed:
        yield fed


def job(job_id: str, user: str, tasks: int = 1) -> dict:
    return {"job_id": job_id, "user": user,
            "tasks": [{"cpu_m": 100, "mem_mib": 64, "duration": 0.1} for _ in range(tasks)]}


def routes(fed: LocalFederation, service: str) -> list[tuple[str, str]]:
    """(method, path with its parameters filled in) of every route in the service's OpenAPI."""
    url = fed.endpoints.url(service)
    document = httpx.get(url + "/openapi.json", headers=fed.headers(), timeout=10)
    assert document.status_code == 200, document.text
    found = [(method.upper(), path.replace("{", "").replace("}", ""))
             for path, methods in document.json()["paths"].items() for method in methods]
    assert len(found) >= 4, found
    return [*found, ("GET", "/openapi.json")]


def test_every_route_but_the_open_ones_needs_a_token(federation) -> None:
    fed = federation
    with httpx.Client(timeout=10) as client:
        for service in SERVICES:
            url = fed.endpoints.url(service)
            listed = routes(fed, service)
            assert {path for _, path in listed} >= OPEN_PATHS, (service, listed)
            for method, path in listed:
                if path in OPEN_PATHS:
                    assert client.request(method, url + path).status_code == 200, path
                    continue
                for headers in ({}, WRONG, {"Authorization": "Basic x"}):
                    answer = client.request(method, url + path, headers=headers)
                    assert answer.status_code == 401, (service, method, path, answer.text)
                    assert answer.headers["www-authenticate"] == "Bearer"
                    assert answer.json()["detail"]
            # a user token is no key to the cluster's internals
            user = fed.headers("u1")
            internal = client.get(url + "/v1/debug/story/x", headers=user)
            assert internal.status_code == (403 if service.startswith("gm") else 401)
    fed_gm = fed.endpoints.url("gm-1")
    refused = httpx.get(fed_gm + "/v1/debug/story/x", headers=fed.headers("u1"), timeout=10)
    assert "needs the cluster token" in refused.json()["detail"]


def test_a_role_token_opens_only_the_routes_its_role_calls(federation) -> None:
    fed = federation
    gm1, lm1, w0 = (fed.endpoints.url(s) for s in SERVICES)
    as_worker, as_lm, as_gm = (fed.headers(role=r) for r in ("worker", "lm", "gm"))
    with httpx.Client(timeout=10) as client:
        # a stolen worker token can neither act as a GM on an LM nor call a GM
        for method, url, route in (("POST", lm1 + "/v1/launch", "POST /v1/launch"),
                                   ("POST", lm1 + "/v1/preempt", "POST /v1/preempt"),
                                   ("GET", gm1 + "/v1/queues", "GET /v1/queues"),
                                   ("POST", gm1 + "/v1/jobs", "POST /v1/jobs"),
                                   ("POST", w0 + "/v1/tasks/batch", "POST /v1/tasks/batch")):
            refused = client.request(method, url, headers=as_worker, json={})
            assert refused.status_code == 403, (route, refused.text)
            detail = refused.json()["detail"]
            assert f"the worker token (MEGHA_WORKER_TOKEN) may not call {route}; " in detail
            assert fed.role_tokens["worker"] not in detail
        # ... and is taken on its own routes: past the token check, the body is judged
        stranger = client.post(lm1 + "/v1/worker/heartbeat", headers=as_worker,
                               json={"worker": "lm-9/w9"})
        assert stranger.status_code == 422, stranger.text
        assert "'lm-9/w9' is not a worker of lm-1" in stranger.text
        # the LM's token starts nothing on an LM or a GM, and is taken by the worker
        assert client.post(lm1 + "/v1/launch", headers=as_lm, json={}).status_code == 403
        assert client.get(gm1 + "/v1/queues", headers=as_lm).status_code == 403
        batch = client.post(w0 + "/v1/tasks/batch", headers=as_lm, json={})
        assert batch.status_code == 200, batch.text
        # the GM's token is taken by the LM, not by a worker
        cancel = client.post(lm1 + "/v1/cancel", headers=as_gm,
                             json={"gm": "gm-1", "attempt_id": "au-none#0.0"})
        assert cancel.status_code == 202 and cancel.json()["cancelled"] is False, cancel.text
        assert client.post(w0 + "/v1/tasks/batch", headers=as_gm, json={}).status_code == 403
        # the operator's state routes take the cluster token only
        state = client.get(lm1 + "/v1/state", headers=as_gm)
        assert state.status_code == 403 and "it needs the cluster token" in state.text
    # each process holds its own role's token and only the digests of the others'
    worker_env = fed.env_for("lm-1/w0")
    assert worker_env["MEGHA_WORKER_TOKEN"] == fed.role_tokens["worker"]
    assert "MEGHA_LM_TOKEN" not in worker_env and "MEGHA_CLUSTER_TOKEN" not in worker_env
    assert not any(token in worker_env.values()
                   for token in (fed.role_tokens["lm"], fed.role_tokens["gm"],
                                 fed.cluster_token, *fed.user_tokens.values()))


def test_a_user_token_submits_and_reads_its_own_queue_only(federation) -> None:
    fed = federation
    gm1, gm2 = fed.endpoints.url("gm-1"), fed.endpoints.url("gm-2")
    with httpx.Client(timeout=10, headers=fed.headers("u1")) as u1:
        other = u1.post(gm1 + "/v1/jobs", json=job("au-other", "u2"))
        assert other.status_code == 403
        assert "queue 'u1' may not submit jobs of queue 'u2'" in other.json()["detail"]
        own = u1.post(gm1 + "/v1/jobs", json=job("au-own", "u1"))
        assert own.status_code == 202, own.text
        # the operator submits for any queue
        as_operator = httpx.post(gm2 + "/v1/jobs", json=job("au-op", "u2"),
                                 headers=fed.headers(), timeout=10)
        assert as_operator.status_code == 202, as_operator.text
        deadline = time.monotonic() + 30
        while u1.get(gm1 + "/v1/jobs/au-own").json()["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        read = u1.get(gm2 + "/v1/jobs/au-op")
        assert read.status_code == 403
        assert "job 'au-op' is of queue 'u2'; the token of queue 'u1'" in read.json()["detail"]
        assert u1.get(gm1 + "/v1/jobs/au-nope").status_code == 404
        feed = u1.get(gm1 + "/v1/jobs").json()
        assert [item["job"] for item in feed["jobs"]] == ["au-own"]
        assert {q["queue"] for q in u1.get(gm1 + "/v1/queues").json()} == {"u1", "u2"}
        # another queue's token on the same GM's feed sees none of u1's jobs
        feed_u2 = httpx.get(gm1 + "/v1/jobs", headers=fed.headers("u2"), timeout=10).json()
        assert feed_u2["jobs"] == [] and feed_u2["cursor"] == feed["cursor"]
        assert feed_u2["forgotten"] == 0  # left out for its queue, not forgotten


def test_bodies_over_the_cap_and_jobs_over_the_task_cap_are_refused(federation) -> None:
    fed = federation
    gm1, lm1 = fed.endpoints.url("gm-1"), fed.endpoints.url("lm-1")
    with httpx.Client(timeout=10, headers=fed.headers("u1")) as u1:
        # the GM's submission route has its own cap, from limits.max_tasks_per_job (5 here)
        cap = submission_body_cap(5)
        big = json.dumps(job("au-big", "u1")) + " " * cap
        declared = u1.post(gm1 + "/v1/jobs", content=big,
                           headers={"content-type": "application/json"})
        assert declared.status_code == 413
        assert (f"limit of {cap} bytes (1024 bytes per task of limits.max_tasks_per_job)"
                in declared.json()["detail"])

        def chunks():
            for _ in range(3):
                yield b" " * (MAX_BODY // 2)

        streamed = httpx.post(lm1 + "/v1/launch", content=chunks(), headers=fed.headers(),
                              timeout=10)
        assert streamed.status_code == 413 and "MEGHA_MAX_BODY_BYTES" in streamed.text
        wide = u1.post(gm1 + "/v1/jobs", json=job("au-wide", "u1", tasks=6))
        assert wide.status_code == 422
        (detail,) = wide.json()["detail"]
        assert detail["loc"] == ["body", "tasks"]
        assert detail["msg"] == ("more than 5 tasks: a job may have at most 5 "
                                 "(limits.max_tasks_per_job)")
        assert u1.get(gm1 + "/v1/jobs/au-wide").status_code == 404  # nothing accepted


def test_a_token_over_its_rate_gets_429_and_the_replayer_waits_it_out(federation) -> None:
    fed = federation
    gm2 = fed.endpoints.url("gm-2")
    with httpx.Client(timeout=10, headers=fed.headers("u2")) as u2:
        answers = [u2.post(gm2 + "/v1/jobs", json=job(f"au-rate-{k}", "u2")) for k in range(6)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[:4] == [202] * 4 and 429 in statuses[4:], statuses
    limited = answers[statuses.index(429)]
    assert int(limited.headers["retry-after"]) >= 1
    assert "the token of 'u2' submits more than 1 jobs/s" in limited.json()["detail"]
    assert "limits.submit_rate_per_token" in limited.json()["detail"]

    jobs = [ReplayJob(f"au-replay-{k}", "u2", 0.0, (ReplayTask(100, 64, 0.1),))
            for k in range(4)]
    gm_for_user = {q.name: (q.gm, fed.endpoints.url(q.gm)) for q in fed.federation.queues}
    replayer = Replayer(jobs, gm_for_user, completion_timeout=60, log=lambda _: None,
                        tokens=fed.user_tokens)
    result = asyncio.run(asyncio.wait_for(replayer.run(), 90))
    assert [o.status for o in result.outcomes] == ["accepted"] * 4
    assert [o.state for o in result.outcomes] == ["done"] * 4
    assert sum(o.deferrals for o in result.outcomes) >= 1  # 429s, retried as told
    with pytest.raises(ValueError, match="no token for user queue\\(s\\) u2"):
        Replayer(jobs, gm_for_user, tokens={"u1": fed.user_tokens["u1"]})


def _start(service: str, module: str, env: dict[str, str], out: Path) -> subprocess.Popen:
    with open(out, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", module], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT)


def test_a_service_without_its_tokens_refuses_to_start(tmp_path, amqp_url) -> None:
    port = free_port_block(1)
    endpoints = Endpoints({name: f"http://127.0.0.1:{port}"
                           for name in ("gm-1", "gm-2", "lm-1", "lm-2", "lm-1/w0", "lm-2/w0")})
    base = {key: value for key, value in os.environ.items() if not key.startswith("MEGHA_")}
    base.update(MEGHA_CONFIG=str(CONFIG), MEGHA_ENDPOINTS=endpoints.render(),
                MEGHA_AMQP_URL=amqp_url, MEGHA_STATE_DIR=str(tmp_path / "state"),
                PYTHONPATH=str(ROOT))
    cases = [("lm-1", "services.lm", {}, "MEGHA_CLUSTER_TOKEN: is not set"),
             ("lm-1/w0", "services.worker", {}, "MEGHA_CLUSTER_TOKEN: is not set"),
             ("gm-1", "services.gm", {}, "MEGHA_CLUSTER_TOKEN: is not set"),
             ("gm-1", "services.gm", {"MEGHA_CLUSTER_TOKEN": generate_token()},
              "MEGHA_USER_TOKENS: is not set"),
             ("lm-1/w0", "services.worker", {"MEGHA_CLUSTER_TOKEN": generate_token(),
                                             "MEGHA_LM_TOKEN_SHA256": "0" * 64},
              "MEGHA_WORKER_TOKEN: is not set, but role tokens are in use here"),
             ("lm-1", "services.lm", {"MEGHA_CLUSTER_TOKEN_FILE": str(tmp_path / "none")},
              f"MEGHA_CLUSTER_TOKEN_FILE: cannot read {tmp_path / 'none'}"),
             ("lm-1", "services.lm", {"MEGHA_CLUSTER_TOKEN": generate_token(),
                                      "MEGHA_TLS_CERT": str(tmp_path / "cert.pem")},
              "MEGHA_TLS_KEY: is not set, but MEGHA_TLS_CERT is")]
    for k, (service, module, extra, message) in enumerate(cases):
        out = tmp_path / f"{k}.log"
        process = _start(service, module, {**base, **extra, "MEGHA_ID": service}, out)
        assert process.wait(timeout=60) == 2, out.read_text()
        (error,) = [json.loads(line) for line in out.read_text().splitlines()
                    if '"config_error"' in line]
        assert message in error["error"], error

    # MEGHA_AUTH=off starts, says so loudly, and answers without a token
    out = tmp_path / "off.log"
    process = _start("lm-1/w0", "services.worker",
                     {**base, "MEGHA_ID": "lm-1/w0", "MEGHA_AUTH": "off"}, out)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(endpoints.url("lm-1/w0") + "/v1/state", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=20)
    events = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    warning = next(e for e in events if e["event"] == "auth_disabled")
    assert "MEGHA_AUTH=off" in warning["warning"] and warning["level"] == "warning"
