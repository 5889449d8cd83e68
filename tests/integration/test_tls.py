"""TLS between the services, over real processes: a federation (2 GMs, 2 LMs, 2 workers) whose
every service serves HTTPS with a certificate of the CA scripts/make-certs.sh made, talking to
each other over it; a job submitted over HTTPS completes, `megha replay`'s client does as well
given the CA (MEGHA_TLS_CA), and a client without the CA, or speaking plain HTTP, gets nothing.
RabbitMQ stays plain AMQP (out of scope)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_federation import CONFIG, free_port_block

from loadgen.replay import Replayer
from loadgen.workload import ReplayJob, ReplayTask
from services.local import LocalFederation

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.timeout(240),
              pytest.mark.skipif(shutil.which("openssl") is None,
                                 reason="scripts/make-certs.sh needs the openssl command")]


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    logs = tmp_path_factory.mktemp("tls") / "logs"
    with LocalFederation(CONFIG, logs, base_port=free_port_block(6), amqp_url=amqp_url,
                         tls=True) as fed:
        yield fed


def test_a_job_submitted_over_https_completes(federation) -> None:
    fed = federation
    assert all(url.startswith("https://127.0.0.1:") for url in fed.endpoints.table.values())
    gm = fed.endpoints.url(fed.federation.queue_gm("u1"))
    job = {"job_id": "tls-1", "user": "u1",
           "tasks": [{"cpu_m": 100, "mem_mib": 64, "duration": 0.1} for _ in range(3)]}
    with fed.http_client(timeout=10, headers=fed.headers("u1")) as client:
        accepted = client.post(gm + "/v1/jobs", json=job)
        assert accepted.status_code == 202, accepted.text
        deadline = time.monotonic() + 60
        # done means the GM reached its LM, the LM its worker and the worker its LM, all
        # over HTTPS (RabbitMQ carries the task events back)
        while (state := client.get(gm + "/v1/jobs/tls-1").json()["state"]) != "done":
            assert state != "failed" and time.monotonic() < deadline, state
            time.sleep(0.2)


def test_a_client_without_the_ca_or_without_tls_is_refused(federation) -> None:
    fed = federation
    gm = fed.endpoints.url("gm-1")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(gm + "/healthz", timeout=10)  # the system's CAs only
    with pytest.raises(httpx.TransportError):
        httpx.get(gm.replace("https://", "http://") + "/healthz", timeout=10)
    with fed.http_client(timeout=10) as client:
        assert client.get(gm + "/healthz").status_code == 200


def test_megha_replay_talks_https_given_the_ca(federation, monkeypatch) -> None:
    fed = federation
    monkeypatch.setenv("MEGHA_TLS_CA", str(fed.ca_file))
    jobs = [ReplayJob(f"tls-replay-{k}", user, 0.0, (ReplayTask(100, 64, 0.1),))
            for k, user in enumerate(("u1", "u2"))]
    gm_for_user = {q.name: (q.gm, fed.endpoints.url(q.gm)) for q in fed.federation.queues}
    replayer = Replayer(jobs, gm_for_user, completion_timeout=60, log=lambda _: None,
                        tokens=fed.user_tokens)
    result = asyncio.run(asyncio.wait_for(replayer.run(), 90))
    assert [o.state for o in result.outcomes] == ["done", "done"]


def test_the_container_health_check_speaks_tls_to_an_https_service(federation) -> None:
    """services/healthcheck.py, as compose runs it in each container: over TLS when the
    service's endpoint is https://, verified against MEGHA_TLS_CA; a CA that did not sign the
    certificate fails the check."""
    fed = federation
    env = {"MEGHA_ID": "gm-1", "MEGHA_ENDPOINTS": fed.endpoints.render(),
           "MEGHA_TLS_CA": str(fed.ca_file), "PATH": "/usr/bin:/bin"}
    check = [sys.executable, "-S", "-m", "services.healthcheck"]
    healthy = subprocess.run(check, env=env, cwd=ROOT, capture_output=True, text=True)
    assert healthy.returncode == 0, healthy.stderr
    wrong = subprocess.run(check, env={**env, "MEGHA_TLS_CA": "/etc/ssl/certs/ca-certificates.crt"},
                           cwd=ROOT, capture_output=True, text=True)
    assert wrong.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in wrong.stderr
