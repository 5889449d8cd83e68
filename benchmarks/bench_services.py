"""Benchmark of the services as local processes: sustained tasks per second and allocation
time at a given arrival rate, on the testbed federation (2 GMs, 3 LMs, 120 nodes).

Open loop: jobs are submitted at their scheduled times (Poisson arrivals at `--rate` jobs
per second, `--tasks` tasks each, alternating over the user queues) whatever the answers.
Allocation time of a task = its start on a worker minus its job's arrival at the GM, both
read from the services' own event logs. Prints one `name=value` line per figure.

    python benchmarks/bench_services.py [--rate 20] [--tasks 4] [--duration 0.2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.local import LocalFederation  # noqa: E402


def wait_warm(fed: LocalFederation, timeout: float = 60.0) -> None:
    """Until every GM's view holds every LM with every node up: the figures are of a running
    federation, not of GMs waiting for their first heartbeats."""
    nodes = sum(len(t) for t in fed.federation.topologies())
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        for gm in fed.federation.gms:
            while client.get(fed.endpoints.url(gm) + "/healthz").json().get(
                    "nodes_up_in_view", 0) < nodes:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{gm} never saw all {nodes} nodes up")
                time.sleep(0.1)


async def replay(fed: LocalFederation, args) -> tuple[list[str], int, int]:
    rng = random.Random(args.seed)
    users = [q.name for q in fed.federation.queues]
    jobs: list[str] = []
    late = 0
    async with httpx.AsyncClient(timeout=10) as client:
        start = time.monotonic()
        at = 0.0
        pending = []
        k = 0
        while at < args.seconds:
            user = users[k % len(users)]
            job_id = f"bench-{k}"
            body = {"job_id": job_id, "user": user, "tasks": [
                {"cpu_m": args.cpu, "mem_mib": 256, "duration": args.duration}
                for _ in range(args.tasks)]}
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -0.05:
                late += 1
            url = fed.endpoints.url(fed.federation.queue_gm(user)) + "/v1/jobs"
            pending.append(asyncio.create_task(client.post(url, json=body)))
            jobs.append(job_id)
            k += 1
            at += rng.expovariate(args.rate)
        responses = await asyncio.gather(*pending, return_exceptions=True)
        refused = [r for r in responses if isinstance(r, Exception) or r.status_code != 202]
        if refused:
            raise RuntimeError(f"{len(refused)} submissions refused, e.g. {refused[0]!r}")
        # past this grace the federation is overloaded: report what it did, and how much not
        deadline = time.monotonic() + args.seconds + args.grace
        unfinished = 0
        for job_id, user in zip(jobs, [users[i % len(users)] for i in range(len(jobs))],
                                strict=True):
            url = fed.endpoints.url(fed.federation.queue_gm(user)) + f"/v1/jobs/{job_id}"
            while (await client.get(url)).json().get("state") != "done":
                if time.monotonic() > deadline:
                    unfinished += 1
                    break
                await asyncio.sleep(0.2)
    return jobs, late, unfinished


def figures(logs: Path) -> dict[str, float]:
    arrival: dict[str, float] = {}
    started: dict[str, float] = {}
    done: list[tuple[str, str]] = []
    for path in logs.glob("*.log"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            name = event["event"]
            if name == "job_accepted":
                arrival[event["job"]] = event["arrival"]
            elif name == "task_started" and "/w" in event["svc"]:
                started[event["attempt"]] = event["ts"]
            elif name == "task_done" and event["svc"].startswith("gm-"):
                done.append((event["job"], event["attempt"]))
    allocation = np.array([started[a] - arrival[j] for j, a in done]) * 1000
    first = min(arrival.values())
    last = max(started[a] for _, a in done)
    return {"tasks_done": len(done), "alloc_p50_ms": float(np.percentile(allocation, 50)),
            "alloc_p99_ms": float(np.percentile(allocation, 99)),
            "start_span_s": last - first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "deploy" / "federation.toml")
    parser.add_argument("--rate", type=float, default=30.0, help="job arrivals per second")
    parser.add_argument("--tasks", type=int, default=4, help="tasks per job")
    parser.add_argument("--duration", type=float, default=0.2, help="task duration, seconds")
    parser.add_argument("--cpu", type=int, default=500, help="task cpu, millicores")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the arrivals")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--grace", type=float, default=30.0,
                        help="seconds after the last arrival for every job to finish")
    parser.add_argument("--base-port", type=int, default=19100)
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the services' event logs in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        logs = args.logs or Path(scratch) / "logs"
        with LocalFederation(args.config, logs, base_port=args.base_port) as fed:
            wait_warm(fed)
            print(f"# {len(fed.roles)} processes up; replaying for {args.seconds:.0f}s",
                  file=sys.stderr)
            jobs, late, unfinished = asyncio.run(replay(fed, args))
        result = figures(logs)
    offered = args.rate * args.tasks
    print(f"offered_tasks_per_s={offered:.1f}")
    print(f"tasks_per_s={result['tasks_done'] / result['start_span_s']:.1f}")
    print(f"alloc_p50_ms={result['alloc_p50_ms']:.1f}")
    print(f"alloc_p99_ms={result['alloc_p99_ms']:.1f}")
    print(f"late_submissions={late}")
    print(f"jobs_unfinished={unfinished}")


if __name__ == "__main__":
    main()
