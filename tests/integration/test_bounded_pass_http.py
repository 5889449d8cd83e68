"""A GM's bounded pass in the services: the small federation as real processes with
`[limits] gm_pass_tasks = 2`. Jobs wider than the bound go in over HTTP; the GMs go on with
their passes in later turns of their event loops (`PassContinued`, counted in /metrics), and
every job ends."""

from __future__ import annotations

import re

import httpx
import pytest
from test_federation import CONFIG, free_port_block, wait_done

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_bounded_passes_go_on_and_every_job_ends(tmp_path, amqp_url) -> None:
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text() + "\n[limits]\ngm_pass_tasks = 2\n")
    jobs: dict[str, str] = {}
    with LocalFederation(config, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed, \
            httpx.Client(timeout=10, headers=fed.headers()) as client:
        for k in range(6):
            user = "u1" if k % 2 == 0 else "u2"
            body = {"job_id": f"bp-{k}", "user": user,
                    "tasks": [{"cpu_m": 200, "mem_mib": 64, "duration": 0.2}
                              for _ in range(5)]}
            gm = fed.federation.queue_gm(user)
            response = client.post(fed.endpoints.url(gm) + "/v1/jobs", json=body)
            assert response.status_code == 202, response.text
            jobs[body["job_id"]] = user
        final = wait_done(client, fed, jobs, timeout=60)
        continued = 0
        for gm in fed.federation.gms:
            metrics = client.get(fed.endpoints.url(gm) + "/metrics").text
            found = re.search(r'megha_core_events_total\{event="PassContinued"\} (\S+)', metrics)
            continued += float(found.group(1)) if found else 0
    assert {status["state"] for status in final.values()} == {"done"}
    assert continued >= 6  # every 5-task job took at least two more steps at its GM
