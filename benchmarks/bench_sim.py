"""The simulator's speed on a whole trace: wall time, events per second and peak memory.

    .venv/bin/python benchmarks/bench_sim.py        # YH1_sub, 10k nodes, 4 GMs, 25 LMs
    .venv/bin/python benchmarks/bench_sim.py --nodes 50000 --gms 10 --lms 50

Runs `megha simulate` in slot mode as a child process (so its peak memory is its own) with
the event log written and the end-of-run invariant checks on, as a user runs it, and prints:

    sim_wall_s=...          the run and its checks, from the child's own figure
    sim_command_wall_s=...  the whole command: start-up, reading the trace, the run, the summary
    sim_events_per_s=...    engine steps (deliveries, ticks, task ends) per second of wall
    sim_log_events=...      event-log lines written
    sim_peak_rss_mb=...
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=ROOT / "deploy" / "workloads" / "YH1_sub.tr")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gms", type=int, default=4)
    parser.add_argument("--lms", type=int, default=25)
    parser.add_argument("--scheduler", default="megha")
    parser.add_argument("--no-log", action="store_true", help="measure without the event log")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = ["--no-log"] if args.no_log else ["--log", str(Path(folder) / "sim.log")]
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "megha", "simulate", "--scheduler", args.scheduler,
             "--nodes", str(args.nodes), "--gms", str(args.gms), "--lms", str(args.lms),
             "--slots", "--trace", str(args.trace), *log],
            cwd=ROOT, capture_output=True, text=True, check=True)
        command_wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    wall = float(re.search(r"wall ([\d.]+) s", done.stdout).group(1))
    steps = int(re.search(r"([\d,]+) steps", done.stdout).group(1).replace(",", ""))
    events = int(re.search(r"([\d,]+) events", done.stdout).group(1).replace(",", ""))
    print(f"sim_wall_s={wall:.2f}")
    print(f"sim_command_wall_s={command_wall:.2f}")
    print(f"sim_events_per_s={steps / max(wall, 1e-3):.0f}")
    print(f"sim_log_events={events}")
    print(f"sim_peak_rss_mb={peak_kib / 1024:.0f}")


if __name__ == "__main__":
    main()
