"""The compose testbed under test (compose_project.py), torn down (and checked gone) whatever
happens, and the checks the tests make of a replay and of the services' event logs."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path

import docker
import httpx
import pytest
from compose_project import CONFIG, ROOT, SERVICES, ComposeProject

from common.federation import Federation, load_federation

__all__ = ["CONFIG", "ROOT", "SERVICES", "ComposeProject", "accepted_jobs_all_done",
           "no_node_overcommitted"]

# The ends of an attempt at its LM (common/lm.py `_end` logs `task_{reason}`): each gives the
# attempt's resources back to its node.
ATTEMPT_ENDS = frozenset({"task_finished", "task_failed", "task_lost", "task_preempted",
                          "task_cancelled"})


@pytest.fixture(scope="session")
def docker_client():
    """A Docker engine and Compose v2, prepared as the README's quick start prepares them."""
    subprocess.run(["bash", str(ROOT / "deploy" / "prepare.sh")], check=True, timeout=1800)
    client = docker.from_env(timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def testbed(docker_client):
    bed = ComposeProject(docker_client)
    try:
        bed.compose("build")
        yield bed
    finally:
        bed.down()
        left = bed.leftovers()
        assert left == {"containers": [], "networks": [], "volumes": []}, left


def accepted_jobs_all_done(bed: ComposeProject, results: Path) -> dict:
    """The replay's results, checked: every job accepted, every accepted job done."""
    outcome = json.loads(results.read_text())
    summary = outcome["summary"]
    assert summary["accepted"] == summary["jobs"], summary
    assert summary["completed"] == summary["accepted"], summary
    for gm, url in ((gm, bed.gm_url(gm)) for gm in bed.ports):
        for job in outcome["jobs"]:
            if job["gm"] == gm:
                state = httpx.get(f"{url}/v1/jobs/{job['job']}", headers=bed.headers(),
                                  timeout=10).json()["state"]
                assert state == "done", (job["job"], state)
    return outcome


def no_node_overcommitted(events: list[dict],
                          federation: Federation | None = None) -> dict[str, int]:
    """Replay each LM's own events and check that no node ever held more cpu or memory than
    it has; returns how many launches and adoptions were counted.

    `task_launched` (which carries the demand) takes resources on its node, any end of that
    attempt at the LM (ATTEMPT_ENDS) gives them back, and `attempt_adopted` (a restarted LM
    re-taking an attempt its worker still runs) takes them again, with the demand of the
    attempt's launch. A new `lm_started` is a new process that holds nothing until it adopts.
    Only an LM's own events count for its nodes: they come from one process in the order it
    wrote them, while stamps of different processes are not ordered against each other. An
    end of an attempt the LM does not hold, or a second take of one it holds, fails too:
    either would make the sums meaningless."""
    federation = federation or load_federation(CONFIG.read_text(), str(CONFIG))
    counts = {"launched": 0, "adopted": 0, "ended": 0}
    demand: dict[str, tuple[int, int]] = {}  # attempt -> (cpu_m, mem_mib), from its launch
    for lm in federation.lms:
        topology = federation.topology(lm.id)
        capacity = {node: (cpu, mem) for node, cpu, mem
                    in zip(topology.node_ids, topology.cap_cpu, topology.cap_mem, strict=True)}
        used: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        held: dict[str, tuple[str, int, int]] = {}  # attempt -> (node, cpu_m, mem_mib)
        for event in events:
            if event.get("svc") != lm.id:
                continue
            name, attempt = event["event"], event.get("attempt")
            if name == "lm_started":
                used.clear()
                held.clear()
            elif name in ("task_launched", "attempt_adopted"):
                if name == "task_launched":
                    demand[attempt] = (event["cpu_m"], event["mem_mib"])
                cpu, mem = demand[attempt]
                node = event["node"]
                assert attempt not in held, f"{lm.id} took {attempt} twice: {event}"
                held[attempt] = (node, cpu, mem)
                total = used[node]
                total[0] += cpu
                total[1] += mem
                assert total[0] <= capacity[node][0] and total[1] <= capacity[node][1], (
                    f"{node} over-committed: {total[0]} m / {total[1]} MiB held, capacity "
                    f"{capacity[node]}, at {event}")
                counts["launched" if name == "task_launched" else "adopted"] += 1
            elif name in ATTEMPT_ENDS:
                assert attempt in held, f"{lm.id} ended {attempt}, which it did not hold: {event}"
                node, cpu, mem = held.pop(attempt)
                used[node][0] -= cpu
                used[node][1] -= mem
                counts["ended"] += 1
    return counts
