"""Benchmark of the simulator against the services (`megha twin`): how far a simulation is from
the real services on the same workload, with today's default model of time and with one fitted
from the services' logs. Prints one `name=value` line per figure.

One calibration run (`megha twin calibrate`: its default constrained Poisson mix) on the shape,
then two judged workloads, each on the services and in both simulations:

    yh1      YH1_sub's first 200 jobs (9,670 tasks), arrivals 100 times closer, tasks 1,000
             times shorter (`megha twin`'s default workload)
    poisson  a constrained Poisson mix of other widths and durations than the calibration's
             (another seed): lognormal durations, jobs of 1, 5 or 50 tasks

Per workload and simulation, `twin_divergence_<figure>.<workload>.<sim>`: the larger of the
services' and the simulation's value over the smaller (1.0 is identical), for allocation p50
and p99 and mean JCT; the targets for sim-calibrated are 1.2, 1.5 and 1.1. Then the wall time
and peak memory of each part: the services' processes (their peak RSS summed), the twin's own
process (replayer, both simulations and the analysis).

    python benchmarks/bench_twin.py [--nodes 1000 --gms 2 --lms 4] [--slots] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "yh1": [],  # megha twin's default
    "poisson": ["--poisson", "8", "--count", "160", "--width", "choice:1,5,50",
                "--duration", "lognormal:0.5,1", "--constraints", "--seed", "7"],
}
FIGURES = {"alloc_p50": "allocation_p50", "alloc_p99": "allocation_p99",
           "jct_mean": "jct_mean"}


def twin(args: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "megha", "twin", *args], cwd=ROOT,
                          text=True, capture_output=True)
    if done.returncode != 0:
        sys.exit(f"megha twin {' '.join(args)} failed:\n{done.stdout[-3000:]}\n"
                 f"{done.stderr[-3000:]}")
    print(done.stdout, file=sys.stderr)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gms", type=int, default=2)
    parser.add_argument("--lms", type=int, default=4)
    parser.add_argument("--nodes-per-worker", type=int, default=100)
    parser.add_argument("--no-slots", action="store_true",
                        help="nodes of 64 cores instead of one slot each (slots by default)")
    parser.add_argument("--only", choices=tuple(WORKLOADS), default=None)
    parser.add_argument("--keep", type=Path, default=None, help="keep every run's files here")
    args = parser.parse_args()
    shape = ["--nodes", str(args.nodes), "--gms", str(args.gms), "--lms", str(args.lms),
             "--nodes-per-worker", str(args.nodes_per_worker)]
    if not args.no_slots:
        shape.append("--slots")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        model = folder / "calibration.json"
        wall = twin(["calibrate", *shape, "--out", str(model)])
        print(f"twin_calibrate_wall_s={wall:.1f}")
        for name, options in WORKLOADS.items():
            if args.only and name != args.only:
                continue
            out = folder / name
            wall = twin([*shape, *options, "--calibration", str(model), "--out", str(out)])
            results = json.loads((out / "results.json").read_text())
            figures = results["figures"]
            for sim in ("sim-calibrated", "sim-default"):
                apart = figures["divergence"][sim]
                for short, figure in FIGURES.items():
                    value = apart.get(figure)
                    print(f"twin_divergence_{short}.{name}.{sim}="
                          f"{'nan' if value is None else f'{value:.3f}'}")
            for run in results["runs"]:
                alloc, jct = run["allocation"]["overall"], run["jct"]["overall"]
                print(f"twin_alloc_p50_ms.{name}.{run['name']}={alloc['p50'] * 1e3:.2f}")
                print(f"twin_alloc_p99_ms.{name}.{run['name']}={alloc['p99'] * 1e3:.2f}")
                print(f"twin_jct_mean_s.{name}.{run['name']}={jct['mean']:.3f}")
                print(f"twin_wall_s.{name}.{run['name']}={run['wall_s']:.1f}")
            services = results["runs"][0]
            print(f"twin_services_peak_rss_mb.{name}={services['peak_rss_mib']:.0f}")
            print(f"twin_services_processes.{name}={services['processes']}")
            print(f"twin_harness_peak_rss_mb.{name}={figures['harness_peak_rss_mib']:.0f}")
            print(f"twin_wall_s.{name}.all={wall:.1f}")


if __name__ == "__main__":
    main()
