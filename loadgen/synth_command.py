"""`megha synth`: build a workload (read or generated, realized, fitted) and save it as a
JSON-lines job file, with what it holds, so it can be checked, shared and replayed exactly
(`megha replay --trace FILE.jsonl`, or `MEGHA_REPLAY_ARGS` in the testbed).

It takes the same workload options as `megha replay` and talks to no service.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loadgen.jobfile import write_jobs
from loadgen.progress import progress_for
from loadgen.sources import add_workload_arguments, build_workload, load_config
from loadgen.synthesis import describe, infeasible


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True,
                        help="the job file to write (*.jsonl)")
    parser.add_argument("--json", action="store_true",
                        help="print the workload's statistics as JSON")
    add_workload_arguments(parser)


def run(args: argparse.Namespace) -> int:
    federation, config_path = load_config(args.config)
    with progress_for(sys.stderr) as progress:
        workload = build_workload(args, federation, config_path, prefix="", progress=progress)
    refused = infeasible(workload.jobs, federation)
    stats = describe(workload.jobs) | {"offered_load": workload.offered_load,
                                       "infeasible_jobs": len(refused)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_jobs(args.out, workload.jobs)
    if args.json:
        print(json.dumps(stats, indent=1))
        return 0
    print(f"wrote {args.out}: {workload.headline()}")
    print(f"  per task: {stats['mean_cpu_m']:.0f} m cpu, {stats['mean_mem_mib']:.0f} MiB, "
          f"{stats['mean_duration_s']:.2f} s, {stats['constraints_per_task']:.2f} constraints "
          f"({stats['constrained_share']:.1%} constrained); mean job weight "
          f"{stats['mean_weight']:.2f}")
    print("  jobs per user queue: " + ", ".join(f"{user} {count}" for user, count
                                                 in stats["jobs_per_user"].items()))
    if stats["named_jobs"]:
        once = stats["named_jobs"] - stats["recurring_runs"]
        print(f"  job names: {stats['recurring_runs']} runs of {stats['recurring_names']} "
              f"recurring names, {once} job(s) with a name of their own")
    if refused:
        print(f"  {len(refused)} job(s) have a task no node of {config_path} can run; the GMs "
              f"would reject them (first: {refused[0]})")
    return 0
