"""`megha experiment redundancy`: the SRPT+R paper's numerical study (its section 6).

One-task jobs on `--machines` machines (default 100) whose service rates vary (`--speed`,
default the paper's two-state available/unavailable model, mean rate 1; common/speed.py),
Poisson arrivals at each rate of `--rates` (default 1, 1.5, 2, 2.5 jobs per time unit: with
Pareto sizes of mean 40, 2.5 is the heavy-traffic limit), arrivals for `--horizon` time units
(default 20,000; the paper's 100,000 takes five times as long), `--seeds` seeds per point
(default 3) for a 95% confidence interval. Every allocation policy of `--values` runs on the
same arrivals, sizes and machine rates (simulator/redundancy.py): srpt, srpt+r, fair, fair+r,
laps and laps+r with `--beta` (default 0.5).

The paper's claims, in direction: redundancy cuts the mean flowtime (SRPT+R below SRPT, at
lambda 1 by much); SRPT+R and Fair+R are close at low lambda and SRPT+R pulls ahead as lambda
grows, Fair+R and LAPS+R reaching about twice SRPT+R's mean at the heavy-traffic limit while
SRPT+R changes little; LAPS+R beats LAPS; Fair+R beats LAPS+R below lambda 2 and LAPS+R wins
above it.

Writes `results.json` (the experiments' schema: `runs[].name`, `jct` for the flowtimes,
`counts`, plus `rate`, `policy`, per-seed means and a flowtime CDF), `table.txt` (mean
flowtime per policy and rate, and its ratio to SRPT), and with `--html` a page with the
flowtime-versus-lambda plot and the flowtime CDFs.

Every (policy, rate, seed) is an independent run: the sweep (simulator/sweep.py) runs them in
a pool of `--workers` processes or on `--dask`'s cluster, a line for each as it ends, then the
line of each policy and rate in the order of the table.

`megha experiment redundancy-cluster` runs the study on the federated cluster instead,
multi-task jobs of a trace (redundancy_cluster.py); the two share the table and the page
(redundancy_shared.py).
"""


from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.speed import SpeedModel
from simulator.experiments.common import (
    add_seed_option,
    add_values_option,
    at_least,
    listed,
    numbers,
)
from simulator.experiments.redundancy_shared import (
    Sweep,
    add_beta_option,
    add_speed_option,
    half_width,
    mean_table,
    page,
)
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.results import Report, results_document
from simulator.models.machines import MACHINE_ALLOCATIONS
from simulator.redundancy import RedundancySim, RunResult, Workload
from simulator.sweep import Run

DEFAULT_POLICIES = "srpt,srpt+r,fair,fair+r,laps,laps+r"
DEFAULT_RATES = "1,1.5,2,2.5"
DEFAULT_MACHINES = 100
DEFAULT_HORIZON = 20_000
BASELINE = "srpt"


@dataclass(frozen=True)
class RedundancyOptions:
    policies: tuple[str, ...]
    rates: tuple[float, ...]
    machines: int
    horizon: int  # time units of arrivals
    seeds: tuple[int, ...]  # per point
    beta: float
    speed: SpeedModel

    @property
    def points(self) -> list[tuple[float, str, int]]:
        """(rate, policy, seed) of every run, in the runs' order."""
        return [(rate, policy, seed) for rate in self.rates for policy in self.policies
                for seed in self.seeds]


class Redundancy:
    name = "redundancy"
    summary = ("the SRPT+R paper's study: SRPT, Fair and LAPS with and without redundant "
               "copies, one-task jobs on machines of varying speed")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("redundancy: the policies, the machines, the arrivals")
        add_values_option(group, "allocation policies", DEFAULT_POLICIES)
        group.add_argument("--machines", type=int, default=DEFAULT_MACHINES,
                           help=f"machines (default {DEFAULT_MACHINES}, the paper's)")
        group.add_argument("--rates", default=DEFAULT_RATES,
                           help=f"arrival rates, jobs per time unit (default {DEFAULT_RATES})")
        group.add_argument("--horizon", type=int, default=DEFAULT_HORIZON,
                           help=f"time units of arrivals (default {DEFAULT_HORIZON})")
        group.add_argument("--seeds", type=int, default=3,
                           help="seeds per point, for confidence intervals (default 3)")
        add_beta_option(group)
        add_speed_option(group)
        add_seed_option(group)

    def options(self, args: argparse.Namespace) -> RedundancyOptions:
        policies = listed(args.values or DEFAULT_POLICIES, MACHINE_ALLOCATIONS.names(),
                          "--values", "an allocation policy")
        rates = numbers(args.rates, "--rates")
        for option, value, least in (("--seeds", args.seeds, 1), ("--horizon", args.horizon, 10),
                                     ("--machines", args.machines, 1)):
            at_least(option, value, least)
        return RedundancyOptions(policies, rates, args.machines, args.horizon,
                                 tuple(range(args.seed, args.seed + args.seeds)), args.beta,
                                 SpeedModel(kind=args.speed))

    def describe(self, options: RedundancyOptions) -> str:
        return (f"{options.machines} machines, {options.speed.describe()}; Pareto sizes of mean "
                f"40, arrivals for {options.horizon} time units at rates {list(options.rates)}, "
                f"{len(options.seeds)} seeds, policies {', '.join(options.policies)}")

    def runs(self, options: RedundancyOptions, logs: Path | None) -> list[Run]:
        return [Run(f"{policy} λ={rate:g} seed={seed}", _simulate_machines,
                    (policy, options.machines, rate, options.horizon, options.speed, seed,
                     options.beta))
                for rate, policy, seed in options.points]

    def run_line(self, result: RunResult) -> str:
        return f"mean flowtime {float(result.flowtimes.mean()):.1f}"

    def figures(self, options: RedundancyOptions, results: list[RunResult]) -> list[Report]:
        by_point = dict(zip(options.points, results, strict=True))
        runs = [_summary([by_point[(rate, policy, seed)] for seed in options.seeds])
                for rate in options.rates for policy in options.policies]
        sweep = Sweep(field="rate", heading="λ={value:g}",
                      axis="arrival rate λ (jobs per time unit)", measure="flowtime",
                      cdf=lambda run: run["flowtime_cdf"], baseline=BASELINE,
                      cluster=f"{options.machines} machines of varying speed",
                      title="Redundancy and machine variability")
        tables = (mean_table(runs, options.policies, options.rates, sweep),)
        document = results_document("redundancy", runs, settings={
            "machines": options.machines, "speed": options.speed.describe(),
            "horizon": options.horizon, "seeds": len(options.seeds), "beta": options.beta})
        return [Report(document, tables, page(runs, options.policies, options.rates, tables,
                                              sweep),
                       notes=tuple(_summary_line(run) for run in runs))]


def _summary(results: list[RunResult]) -> dict:
    """One policy at one rate over its seeds: the experiments' run schema."""
    flows = np.concatenate([r.flowtimes for r in results])
    means = [float(r.flowtimes.mean()) for r in results]
    first = results[0]
    quantiles = np.linspace(0, 1, 101)
    return {
        "name": f"{first.policy} λ={first.rate:g}",
        "policy": first.policy, "rate": first.rate,
        "jct": {"overall": {
            "count": int(len(flows)), "mean": float(np.mean(means)),
            "p50": float(np.median(flows)), "p99": float(np.quantile(flows, 0.99)),
            "max": float(flows.max()),
            "ci95": half_width(means)}},
        "allocation": {},
        "counts": {
            "jobs_done": int(len(flows)), "unfinished": sum(r.unfinished for r in results),
            "checkpoints_per_job": float(np.concatenate([r.checkpoints for r in results])
                                         .mean()),
            "wasted_work_share": sum(r.wasted_work for r in results)
            / max(sum(r.useful_work for r in results), 1e-9),
            "most_copies": max(r.copies_max for r in results)},
        "seed_means": means,
        "flowtime_cdf": {"x": np.quantile(flows, quantiles).tolist(),
                         "y": quantiles.tolist()},
    }


def _simulate_machines(policy: str, machines: int, rate: float, horizon: int,
                       speed: SpeedModel, seed: int, beta: float) -> RunResult:
    """One run of the paper's model, wherever the sweep sends it."""
    return RedundancySim(policy, machines, Workload(rate, horizon), speed, seed,
                         beta=beta).run()


def _summary_line(summary: dict) -> str:
    """One policy at one rate, over its seeds."""
    overall, counts = summary["jct"]["overall"], summary["counts"]
    unfinished = f"  {counts['unfinished']} unfinished" if counts["unfinished"] else ""
    return (f"  λ={summary['rate']:g} {summary['policy']:7} mean flowtime "
            f"{overall['mean']:8.1f} ± {overall['ci95']:.1f}  p50 {overall['p50']:6.1f}  "
            f"checkpoints/job {counts['checkpoints_per_job']:.1f}  wasted "
            f"{counts['wasted_work_share']:.2f} of useful work{unfinished}")


EXPERIMENTS.register(Redundancy())
