"""The packing paper's algorithms in the services: the small federation as real processes
(2 GMs, 2 LMs, 2 worker agents, RabbitMQ) whose federation file chooses the `lp` job policy
and the `tetris` placement. Weighted jobs with placement sets, more than the cluster runs at
once, go in over HTTP; the GMs solve their LPs (logged), every task runs inside its set, every
job ends, and the jobs' weights reach the log."""

from __future__ import annotations

import httpx
import pytest
from test_federation import CONFIG, free_port_block, read_events, wait_done

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LP_FEDERATION = CONFIG.read_text().replace(
    'job = "fifo"', 'job = "lp"').replace(
    'placement = "first_fit"', 'placement = "tetris"') + """
[policies.lp]
resolve_first = 0.2
resolve_max = 0.5
"""


def test_lp_and_tetris_schedule_weighted_jobs_with_placement_sets(tmp_path, amqp_url) -> None:
    config = tmp_path / "federation.toml"
    config.write_text(LP_FEDERATION)
    logs = tmp_path / "logs"
    sets = {"u1": ["lm-2/n0", "lm-2/n1"], "u2": ["lm-2/n2", "lm-2/n3"]}
    jobs: dict[str, str] = {}
    with LocalFederation(config, logs, base_port=free_port_block(6), amqp_url=amqp_url) as fed, \
            httpx.Client(timeout=10, headers=fed.headers()) as client:
        for k in range(12):
            user = "u1" if k % 2 == 0 else "u2"
            job_id = f"lp-{k}"
            width, duration = (1, 1.2) if k % 3 == 0 else (3, 0.3)  # long-thin or wide-short
            body = {"job_id": job_id, "user": user, "weight": 1 + k % 4,
                    "tasks": [{"cpu_m": 1500, "mem_mib": 256, "duration": duration,
                               "nodes": sets[user]} for _ in range(width)]}
            gm = fed.federation.queue_gm(user)
            response = client.post(fed.endpoints.url(gm) + "/v1/jobs", json=body)
            assert response.status_code == 202, response.text
            jobs[job_id] = user
        final = wait_done(client, fed, jobs, timeout=120)
    assert {status["state"] for status in final.values()} == {"done"}
    events = read_events(logs)
    solves = [e for e in events if e["event"] == "jobs_reordered"]
    # the core reads no clock: the service measures the step that solved (`handle_s`)
    assert solves and all(e["jobs"] >= 1 and e["handle_s"] > 0 for e in solves)
    started = [e for e in events if e["event"] == "task_started" and e["job"].startswith("lp-")]
    assert len(started) >= sum(1 if int(job[3:]) % 3 == 0 else 3 for job in jobs)
    for e in started:
        assert e["node"] in sets[jobs[e["job"]]], e
    weights = {e["job"]: e["weight"] for e in events if e["event"] == "job_arrived"}
    assert weights == {f"lp-{k}": 1 + k % 4 for k in range(12)}
