"""Calibrate `--processing model` (simulator/processing.py) on this machine: time every core's
`handle` in 10,000-node runs of YH1_sub (megha: 4 GMs, 25 LMs; centralized: 1 GM, 1 LM; slot
mode), count each step's operations as the model does (`simulator.processing.operations`),
and fit seconds per operation by non-negative least squares, per role. Prints one line per
constant, then how well the fit reproduces the measured total:

    processing_<operation>_us=...               the fitted cost, microseconds (gm_decision...)
    processing_<role>_measured_s=...            the CPU time of every step of that role
    processing_<role>_model_s=...               what the fitted constants give for them

Compare the first lines with `ProcessingCosts`'s constants (docs/processing.md): the model is
only as good as the machine it was fitted on, and a busy machine fits slower.

    .venv/bin/python benchmarks/bench_processing.py --jobs 1000
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
from scipy.optimize import nnls

import simulator.federated as federated
from loadgen.paper_workloads import YH1_SUB
from simulator import command as simulate
from simulator.cluster import PAPER_NODE
from simulator.experiments.cluster_sweep import SharedSettings, simulate_shape
from simulator.processing import operations

TRACE = YH1_SUB
ROLES = {"GlobalMaster": "gm", "LocalMaster": "lm", "WorkerAgent": "worker"}
SHAPES = {"megha": {"gms": 4, "lms": 25}, "centralized": {"gms": 1, "lms": 1}}


def timed_steps(jobs: int, schedulers: list[str]) -> dict[str, list[tuple[dict, float]]]:
    """role -> (the step's operations, its CPU seconds), for every step of every run."""
    steps: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    handle = federated.FederatedSimulation._handle

    def timing(self, actor, event, *more, **options):  # one delivery: time the core's call
        core = actor.core
        original = core.handle

        def measured(ev, now):
            counters = getattr(core, "counters", None)
            before = counters["decisions_total"] if counters is not None else 0
            started = time.process_time()
            commands = original(ev, now)
            seconds = time.process_time() - started
            decided = (counters["decisions_total"] if counters is not None else 0) - before
            steps[ROLES[type(core).__name__]].append((operations(core, ev, commands, decided),
                                               seconds))
            return commands

        core.handle = measured
        try:
            return handle(self, actor, event, *more, **options)
        finally:
            del core.handle

    federated.FederatedSimulation._handle = timing
    try:
        for scheduler in schedulers:
            parser = argparse.ArgumentParser()
            simulate.add_arguments(parser)
            args = parser.parse_args(["--trace", str(TRACE), "--slots", "--jobs", str(jobs),
                                      "--no-log"])
            shared = SharedSettings(PAPER_NODE, 100, simulate.Overrides(),
                                    simulate.RunSettings(simulate.workload_options(args),
                                                         slots=True))
            shape = {"nodes": 10_000, "heartbeat": None, "scheduler": scheduler}
            simulate_shape(shared, shape | SHAPES[scheduler], scheduler)
    finally:
        federated.FederatedSimulation._handle = handle
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="YH1_sub's first N jobs")
    parser.add_argument("--schedulers", default="megha,centralized")
    args = parser.parse_args()
    steps = timed_steps(args.jobs, args.schedulers.split(","))
    for role, rows in sorted(steps.items()):
        names = sorted({name for counted, _ in rows for name in counted})
        counts = np.array([[counted.get(name, 0) for name in names] for counted, _ in rows],
                          dtype=float)
        seconds = np.array([spent for _, spent in rows])
        # the slowest 0.5% of a role's steps are the host's hiccups (page faults, the other
        # core's work), not the core's: they are left out of the fit, not out of the totals
        kept = seconds <= np.quantile(seconds, 0.995)
        costs, _ = nnls(counts[kept], seconds[kept])
        for name, cost in zip(names, costs, strict=True):
            print(f"processing_{name}_us={cost * 1e6:.4f}")  # names carry their role
        print(f"processing_{role}_measured_s={seconds.sum():.3f}")
        print(f"processing_{role}_model_s={(counts @ costs).sum():.3f}", flush=True)


if __name__ == "__main__":
    main()
