"""Benchmark of the services as local processes: sustained tasks per second and allocation
time at a given arrival rate, on the testbed federation (2 GMs, 3 LMs, 120 nodes).

Open loop, through the load generator's own replayer (loadgen/replay.py): jobs are due at
their scheduled times (Poisson arrivals at `--rate` jobs per second, `--tasks` tasks each,
alternating over the user queues) whatever the answers; a GM whose backlog is full answers 429
and the job is sent again when it says (`answers_429` counts these). Allocation time of a task =
its start on a worker minus its job's arrival at the GM, as the GMs report them. Prints one
`name=value` line per figure.

    python benchmarks/bench_services.py [--rate 20] [--tasks 4] [--duration 0.2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from math import nan
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.replay import FINAL_STATES, LATE_AFTER, Replayer, ReplayResult  # noqa: E402
from loadgen.workload import ReplayJob, ReplayTask  # noqa: E402
from services.local import LocalFederation  # noqa: E402


def workload(fed: LocalFederation, args) -> list[ReplayJob]:
    """Poisson arrivals at `--rate` jobs/s for `--seconds`, alternating over the user queues."""
    rng = random.Random(args.seed)
    users = [q.name for q in fed.federation.queues]
    task = ReplayTask(cpu_m=args.cpu, mem_mib=256, duration=args.duration)
    jobs: list[ReplayJob] = []
    at = 0.0
    while at < args.seconds:
        jobs.append(ReplayJob(job_id=f"bench-{len(jobs)}", user=users[len(jobs) % len(users)],
                              arrival=at, tasks=(task,) * args.tasks))
        at += rng.expovariate(args.rate)
    return jobs


def replay(fed: LocalFederation, args) -> ReplayResult:
    """The load generator's own replayer: paced senders per GM, 429s retried as the GM says,
    completions read from each GM's feed of ended jobs."""
    gms = {user.name: (user.gm, fed.endpoints.url(user.gm)) for user in fed.federation.queues}
    replayer = Replayer(workload(fed, args), gms, completion_timeout=args.grace,
                        log=lambda line: print(f"# {line}", file=sys.stderr),
                        tokens=fed.user_tokens)
    return asyncio.run(replayer.run())


def figures(result: ReplayResult) -> dict[str, float]:
    """Allocation time of a task: its start on its worker minus its job's arrival at the GM
    (one machine, one clock). The completed rate counts started tasks over the arrivals' span,
    or up to the last start when the federation fell behind."""
    accepted = [o for o in result.outcomes if o.status == "accepted"]
    allocation = np.array([t for o in accepted for t in o.allocation_times()]) * 1000
    starts = [s for o in accepted for s in o.task_starts if s is not None]
    arrivals = [o.arrival for o in accepted if o.arrival is not None]
    span = max(o.job.arrival for o in result.outcomes)
    lasted = max(starts) - min(arrivals) if starts else 0.0
    return {"tasks_done": len(starts), "span_s": max(span, lasted),
            "arrived_tasks_per_s": sum(len(o.job.tasks) for o in result.outcomes) / span,
            "alloc_p50_ms": float(np.percentile(allocation, 50)) if len(allocation) else nan,
            "alloc_p99_ms": float(np.percentile(allocation, 99)) if len(allocation) else nan,
            "late": sum(o.late_by > LATE_AFTER for o in result.outcomes),
            "deferrals": sum(o.deferrals for o in result.outcomes),
            "unfinished": sum(o.state not in FINAL_STATES for o in accepted),
            "not_accepted": len(result.outcomes) - len(accepted)}


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
    parser.add_argument("--amqp-url", default=None,
                        help="a running RabbitMQ (default: the project's own, started if needed)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the services' event logs in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        logs = args.logs or Path(scratch) / "logs"
        with LocalFederation(args.config, logs, base_port=args.base_port,
                             amqp_url=args.amqp_url) as fed:
            fed.wait_warm()
            print(f"# {len(fed.roles)} processes up; replaying for {args.seconds:.0f}s",
                  file=sys.stderr)
            result = figures(replay(fed, args))
    print(f"offered_tasks_per_s={args.rate * args.tasks:.1f}")  # as asked; Poisson varies it
    print(f"arrived_tasks_per_s={result['arrived_tasks_per_s']:.1f}")
    print(f"tasks_per_s={result['tasks_done'] / result['span_s']:.1f}")
    print(f"alloc_p50_ms={result['alloc_p50_ms']:.1f}")
    print(f"alloc_p99_ms={result['alloc_p99_ms']:.1f}")
    print(f"late_submissions={result['late']}")
    print(f"answers_429={result['deferrals']}")
    print(f"jobs_not_accepted={result['not_accepted']}")
    print(f"jobs_unfinished={result['unfinished']}")

if __name__ == "__main__":
    main()
