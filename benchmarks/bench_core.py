"""Benchmark of the scheduling core: GM placement decisions and LM validations per second.

A 10,000-node federation (4 GMs, 25 LMs, 21 constraints; nodes of 64 cores and 16 GiB with
constraints from the constraint model) is filled to a target occupancy; then one GM places a
stream of jobs on its view. A decision is a task getting a verdict in a scheduling pass
(placed, or waiting with a reason). Runs on one core; prints one `name=value` line per figure.

The mixed streams (jobs of 1 to 100 tasks of varied demands and constraints) give
`gm_decisions_per_s_occ{0,50,95}`. `gm_decisions_per_s_wide` is issue 38's case: jobs of
`--wide-width` tasks (300) of one shape (one demand, one constraint set) at 50% occupancy,
where a job's tasks could be placed as one group; today each is decided on its own.

    python benchmarks/bench_core.py [--nodes 10000] [--gms 4] [--lms 25] [--tasks 20000]
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.cluster import ClusterTopology  # noqa: E402
from common.commands import SendLaunch  # noqa: E402
from common.constraint_model import machine_constraints, task_constraints  # noqa: E402
from common.events import HeartbeatReceived, JobSubmitted, LaunchRequested  # noqa: E402
from common.gm import GlobalMaster, GMConfig  # noqa: E402
from common.lm import LocalMaster  # noqa: E402
from common.models import JobSpec, NodeSpec, TaskSpec  # noqa: E402
from common.policies.fairness import UserQueue  # noqa: E402
from common.resources import Resources  # noqa: E402

NODE = Resources(64_000, 16_384)
CPU_CHOICES = (500, 1000, 2000, 4000)
MEM_CHOICES = (256, 512, 1024, 2048)


def build(num_nodes: int, num_gms: int, num_lms: int, seed: int):
    rng = random.Random(seed)
    gms = [f"gm-{g}" for g in range(1, num_gms + 1)]
    per_lm = num_nodes // num_lms
    topologies = []
    for number in range(1, num_lms + 1):
        lm = f"lm-{number}"
        nodes = [NodeSpec(f"{lm}/n{i}", lm, f"{lm}/w{i // 40}", NODE, machine_constraints(rng))
                 for i in range(per_lm)]
        topologies.append(ClusterTopology(lm, nodes, gms))
    queues = tuple(UserQueue(f"u{g}", 1 / num_gms, gm) for g, gm in enumerate(gms, start=1))
    return topologies, gms, queues


def fill(lms: list[LocalMaster], occupancy: float, rng: random.Random) -> None:
    """Take resources on each node around the target (per-node spread keeps some room)."""
    for lm in lms:
        state = lm.state
        for i in range(len(lm.topology)):
            used = min(1.0, max(0.0, rng.gauss(occupancy, 0.08))) if occupancy else 0.0
            state.take(i, int(NODE.cpu_m * used), int(NODE.mem_mib * used))


def feasible_constraints(rng: random.Random, topologies) -> frozenset[int]:
    """A task's constraints from the model (30% unconstrained), redrawn until some node of the
    cluster has them all: the GM rightly refuses a job with an infeasible task."""
    while True:
        constraints = task_constraints(rng, unconstrained_share=0.3)
        if any(t.mask_for(constraints).any() for t in topologies):
            return constraints


def jobs(count_tasks: int, user: str, rng: random.Random, prefix: str,
         topologies) -> list[JobSpec]:
    out, made, n = [], 0, 0
    while made < count_tasks:
        width = min(rng.choice((1, 2, 5, 10, 50, 100)), count_tasks - made)
        job_id = f"{prefix}{n}"
        tasks = tuple(
            TaskSpec(f"{job_id}/{i}", job_id,
                     Resources(rng.choice(CPU_CHOICES), rng.choice(MEM_CHOICES)),
                     feasible_constraints(rng, topologies), 10.0)
            for i in range(width)
        )
        out.append(JobSpec(job_id, user, tasks, 0.0))
        made, n = made + width, n + 1
    return out


def settle_heap() -> None:
    """Collect the previous figure's garbage and freeze the set-up (topologies, workload) out
    of the collector's scans, as a long-running driver does after start-up (`gc.freeze`):
    each figure then measures the core, not the leftovers of the one before."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def wide_jobs(count_tasks: int, width: int, user: str, rng: random.Random,
              topologies) -> list[JobSpec]:
    """Jobs of `width` tasks, every task of one shape: one demand, one constraint set."""
    demand = Resources(rng.choice(CPU_CHOICES), rng.choice(MEM_CHOICES))
    constraints = feasible_constraints(rng, topologies)
    return [JobSpec(f"wide-{n}", user, tuple(
                TaskSpec(f"wide-{n}/{i}", f"wide-{n}", demand, constraints, 10.0)
                for i in range(width)), 0.0)
            for n in range(max(1, count_tasks // width))]


def gm_decisions_per_s(args, occupancy: float, wide: bool = False,
                       ) -> tuple[float, float, list[SendLaunch]]:
    topologies, gms, queues = build(args.nodes, args.gms, args.lms, args.seed)
    lms = [LocalMaster(t) for t in topologies]
    fill(lms, occupancy, random.Random(args.seed + 1))
    # No LM answers here, so the request window must not hold launches back: every pass's
    # batches are sent, as in the services when answers keep up.
    gm = GlobalMaster(GMConfig(gms[0], queues, fairness="none", lm_window=10**9),
                      topologies=topologies)
    for lm in lms:
        gm.handle(HeartbeatReceived("hb", lm.snapshot()), 0.0)
    rng = random.Random(args.seed + 2)
    workload = (wide_jobs(args.tasks, args.wide_width, "u1", rng, topologies) if wide else
                jobs(args.tasks, "u1", rng, f"occ{occupancy}-", topologies))
    settle_heap()
    launches: list[SendLaunch] = []
    verdicts = 0
    start = time.perf_counter()
    for k, job in enumerate(workload):
        for command in gm.handle(JobSubmitted(f"s{k}", job), 0.0):
            if type(command) is SendLaunch:
                launches.append(command)
        verdicts += len(job.tasks)
    elapsed = time.perf_counter() - start
    placed = sum(len(c.placements) for c in launches)
    return verdicts / elapsed, placed / max(verdicts, 1), launches


def lm_validations_per_s(args, launches: list[SendLaunch]) -> float:
    topologies, gms, _ = build(args.nodes, args.gms, args.lms, args.seed)
    lms = {t.lm: LocalMaster(t) for t in topologies}
    settle_heap()
    items = 0
    start = time.perf_counter()
    for k, command in enumerate(launches):
        lms[command.lm].handle(LaunchRequested(f"l{k}", gms[0], command.request_id,
                                               command.kind, command.placements), 0.0)
        items += len(command.placements)
    return items / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gms", type=int, default=4)
    parser.add_argument("--lms", type=int, default=25)
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks placed per figure")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--occupancy", type=float, nargs="+", default=[0.0, 0.5, 0.95],
                        help="occupancies to measure, as fractions")
    parser.add_argument("--wide-width", type=int, default=300,
                        help="tasks of each one-shape job of the wide case (default 300)")
    args = parser.parse_args()
    launches: list[SendLaunch] = []
    for occupancy in args.occupancy:
        rate, placed_share, made = gm_decisions_per_s(args, occupancy)
        tag = int(occupancy * 100)
        print(f"gm_decisions_per_s_occ{tag}={rate:.0f}")
        print(f"gm_placed_share_occ{tag}={placed_share:.3f}")
        if occupancy == 0.5:
            launches = made
    rate, placed_share, _ = gm_decisions_per_s(args, 0.5, wide=True)
    print(f"gm_decisions_per_s_wide={rate:.0f}")
    print(f"gm_placed_share_wide={placed_share:.3f}")
    if launches:
        print(f"lm_validations_per_s={lm_validations_per_s(args, launches):.0f}")


if __name__ == "__main__":
    main()
