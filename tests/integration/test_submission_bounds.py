"""What a 202 promises at a real GM, over HTTP: ids owned by their queue, per-queue parts of
the backlog, field limits, and bodies refused before they are built.

One federation of real processes on a real RabbitMQ: two queues on gm-1 (u1 and u3, equal
shares) and u2 on gm-2, a backlog bound of 40 tasks (a part of 20 for each of gm-1's queues).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from services.job_body import submission_body_cap
from services.local import LocalFederation, free_port_block

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
BACKLOG = 40
MAX_TASKS = 2000


@pytest.fixture(scope="module")
def federation(tmp_path_factory, amqp_url):
    folder = tmp_path_factory.mktemp("bounds")
    text = (ROOT / "deploy" / "federation-small.toml").read_text()
    text = text.replace('[[queues]]\nname = "u1"\nshare = 0.5\ngm = "gm-1"',
                        '[[queues]]\nname = "u1"\nshare = 0.25\ngm = "gm-1"\n\n'
                        '[[queues]]\nname = "u3"\nshare = 0.25\ngm = "gm-1"')
    assert 'name = "u3"' in text
    text = text.replace("[policies]", f"[limits]\ngm_backlog_tasks = {BACKLOG}\n"
                                      f"max_tasks_per_job = {MAX_TASKS}\n\n[policies]", 1)
    config = folder / "federation.toml"
    config.write_text(text)
    with LocalFederation(config, folder / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed:
        yield fed


def job(job_id: str | None, user: str, tasks: int = 1, duration: float = 0.2,
        cpu: int = 100) -> dict:
    body = {"user": user, "tasks": [{"cpu_m": cpu, "mem_mib": 64, "duration": duration}
                                    for _ in range(tasks)]}
    if job_id is not None:
        body["job_id"] = job_id
    return body


def wait_state(client: httpx.Client, url: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (seen := client.get(url).json().get("state")) != state:
        assert time.monotonic() < deadline, f"{url}: {seen}, not {state}"
        time.sleep(0.2)


def test_a_job_id_belongs_to_its_queue(federation) -> None:
    fed = federation
    gm1 = fed.endpoints.url("gm-1")
    u1 = httpx.Client(timeout=10, headers=fed.headers("u1"))
    u3 = httpx.Client(timeout=10, headers=fed.headers("u3"))
    with u1, u3:
        first = u1.post(gm1 + "/v1/jobs", json=job("shared-7", "u1"))
        assert first.status_code == 202, first.text
        # the same id, queue and body again: the same job
        again = u1.post(gm1 + "/v1/jobs", json=job("shared-7", "u1"))
        assert again.status_code == 202 and again.json()["job_id"] == "shared-7"
        # another queue cannot take it: a clear 409, not a 202 for a job that never runs
        taken = u3.post(gm1 + "/v1/jobs", json=job("shared-7", "u3", tasks=3))
        assert taken.status_code == 409, taken.text
        assert "taken by another queue's job" in taken.json()["detail"]
        assert "'u1'" not in taken.json()["detail"]  # the owner is not named
        # nor the same queue with another body
        changed = u1.post(gm1 + "/v1/jobs", json=job("shared-7", "u1", tasks=2))
        assert changed.status_code == 409
        assert "accepted before with a different body" in changed.json()["detail"]
        wait_state(u1, gm1 + "/v1/jobs/shared-7", "done")
        # after it ended, too: the id stays its queue's
        late = u3.post(gm1 + "/v1/jobs", json=job("shared-7", "u3"))
        assert late.status_code == 409
        assert u3.get(gm1 + "/v1/jobs/shared-7").status_code == 403
        status = u1.get(gm1 + "/v1/jobs/shared-7").json()
        assert len(status["tasks"]) == 1  # u1's job, untouched by the others
        # an id the GM chose is the queue's as well: sent again with it, the same job
        chosen = u1.post(gm1 + "/v1/jobs", json=job(None, "u1")).json()["job_id"]
        assert u1.post(gm1 + "/v1/jobs", json=job(chosen, "u1")).json()["job_id"] == chosen
        assert u3.post(gm1 + "/v1/jobs", json=job(chosen, "u3")).status_code == 409


def test_one_queues_burst_never_gets_another_queue_a_429(federation) -> None:
    fed = federation
    gm1 = fed.endpoints.url("gm-1")
    u1 = httpx.Client(timeout=10, headers=fed.headers("u1"))
    u3 = httpx.Client(timeout=10, headers=fed.headers("u3"))
    with u1, u3:
        # u1 fills the room it may borrow: long tasks that take every node, then wait
        refused = None
        for k in range(40):
            answer = u1.post(gm1 + "/v1/jobs", json=job(f"burst-{k}", "u1", tasks=5,
                                                        duration=30, cpu=2000))
            if answer.status_code == 429:
                refused = answer
                break
            assert answer.status_code == 202, answer.text
        assert refused is not None, "u1 was never refused: the bound did not hold"
        assert "at or over its part of 20" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1
        # u3 is below its part: admitted, however full u1 made the GM
        for k in range(3):
            answer = u3.post(gm1 + "/v1/jobs", json=job(f"calm-{k}", "u3", tasks=5))
            assert answer.status_code == 202, answer.text
        queues = {q["queue"]: q for q in u1.get(gm1 + "/v1/queues").json()}
        assert queues["u3"]["backlog_part"] == queues["u1"]["backlog_part"] == 20
        assert queues["u1"]["pending_tasks"] >= 20
        health = httpx.get(gm1 + "/healthz", timeout=10).json()
        assert health["backlog"] <= BACKLOG + 2 * MAX_TASKS
    time.sleep(0.5)
    events = [json.loads(line) for line in (fed.logs / "gm-1.log").read_text().splitlines()]
    full = [e for e in events if e["event"] == "backlog_full"]
    assert full and {e["queue"] for e in full} == {"u1"}


def test_fields_over_their_limits_are_refused_with_the_field(federation) -> None:
    fed = federation
    gm1 = fed.endpoints.url("gm-1")
    cases = {
        ("job_id",): job("x" * 129, "u1"),
        ("tasks", 0, "duration"): job("d", "u1", duration=1e308),
        ("weight",): {**job("w", "u1"), "weight": 1e300},
        ("tasks", 0, "constraints"): {**job("c", "u1"),
                                      "tasks": [{"cpu_m": 1, "mem_mib": 1,
                                                 "constraints": [0] * 257}]},
        ("tasks", 0, "task_id"): {**job("t", "u1"),
                                  "tasks": [{"cpu_m": 1, "mem_mib": 1, "task_id": "a b"}]},
    }
    with httpx.Client(timeout=10, headers=fed.headers("u1")) as u1:
        for field, body in cases.items():
            answer = u1.post(gm1 + "/v1/jobs", json=body)
            assert answer.status_code == 422, (field, answer.text)
            locs = [tuple(detail["loc"][1:]) for detail in answer.json()["detail"]]
            assert field in locs, (field, locs)
            assert len(answer.text) < 4096  # a long value is not echoed in full


def test_a_body_of_too_many_tasks_is_refused_before_it_is_built(federation) -> None:
    fed = federation
    gm1 = fed.endpoints.url("gm-1")
    cap = submission_body_cap(MAX_TASKS)
    tiny = '{"cpu_m":1,"mem_mib":1},'
    count = (cap - 100) // len(tiny)  # the most tasks that fit under the cap
    body = ('{"job_id":"wide","user":"u1","tasks":[' + tiny * (count - 1)
            + tiny[:-1] + "]}").encode()
    assert len(body) <= cap and count > MAX_TASKS
    with httpx.Client(timeout=30, headers=fed.headers("u1")) as u1:
        started = time.monotonic()
        answer = u1.post(gm1 + "/v1/jobs", content=body,
                         headers={"content-type": "application/json"})
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["msg"] == (
            f"more than {MAX_TASKS} tasks: a job may have at most {MAX_TASKS} "
            f"(limits.max_tasks_per_job)")
        assert time.monotonic() - started < 5  # the figure is benchmarks/bench_admission.py's
        over = u1.post(gm1 + "/v1/jobs", content=body + b" " * (cap - len(body) + 1),
                       headers={"content-type": "application/json"})
        assert over.status_code == 413
        assert "per task of limits.max_tasks_per_job" in over.json()["detail"]
        # the GM still takes a good job
        good = u1.post(gm1 + "/v1/jobs", json=job("after-wide", "u1"))
        assert good.status_code in (202, 429), good.text
