"""`megha experiment redundancy`: the SRPT+R paper's numerical study (its section 6).

One-task jobs on `--machines` machines (default 100) whose service rates vary (`--speed`,
default the paper's two-state available/unavailable model, mean rate 1; common/speed.py),
Poisson arrivals at each rate of `--rates` (default 1, 1.5, 2, 2.5 jobs per time unit: with
Pareto sizes of mean 40 on 100 machines the load is 0.4 lambda, and 2.5 is the heavy-traffic
limit), arrivals for `--horizon` time units (default the paper's 100,000), `--seeds` seeds per
point (default 3) for a 95% confidence interval. Every allocation policy of `--values` runs on
the same arrivals, sizes and machine rates (simulator/redundancy.py): srpt, srpt+r, fair,
fair+r, laps and laps+r with `--beta` (default 0.5). `--assignment` says which machines a
checkpoint hands out: `kept` (the paper's model, the default: a job keeps its machines unless
its allocation changes) or `reshuffled` (every machine handed out anew at random, which lets
jobs without copies escape slow machines too).

`--betas B,...` adds the paper's Figures 8 and 9: every laps policy of `--values` at each beta,
at every rate, in the folder `betas` (its own results.json, table.txt and page: mean flowtime
against lambda per beta, the flowtime CDF per lambda over the betas).

The paper's claims, in direction: redundancy cuts the mean flowtime (SRPT+R below SRPT, at
lambda 1 by much); SRPT+R and Fair+R are close at low lambda and SRPT+R pulls ahead as lambda
grows, Fair+R and LAPS+R reaching about twice SRPT+R's mean at the heavy-traffic limit while
SRPT+R changes little; LAPS+R beats LAPS; Fair+R beats LAPS+R below lambda 2 and LAPS+R wins
above it; a small beta helps small jobs in heavy traffic and hurts the mean at low load.

Writes `results.json` (the experiments' schema: `runs[].name`, `jct` for the flowtimes,
`counts`, plus `rate`, `policy` (with its beta in the beta sweep: "laps+r β=0.25"), `beta`,
per-seed means and a flowtime CDF), `table.txt` (mean flowtime per policy and rate, and its
ratio to SRPT; the share of jobs done within 200 time units), and with `--html` a page with
the flowtime-versus-lambda plot and the flowtime CDFs of every policy at each rate (the
paper's Figure 5 at lambda 1).

Every (policy, beta, rate, seed) is an independent run: the sweep (simulator/sweep.py) runs
them in a pool of `--workers` processes or on `--dask`'s cluster, a line for each as it ends,
then the line of each policy and rate in the order of the table.

`megha experiment redundancy-cluster` runs the study on the federated cluster instead,
multi-task jobs of a trace (redundancy_cluster.py); the two share the table and the page
(redundancy_shared.py).
"""


from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from common.errors import InvalidInput
from common.policies.copies import check_beta
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
from simulator.redundancy import ASSIGNMENTS, RedundancySim, RunResult, Workload
from simulator.sweep import Run

DEFAULT_POLICIES = "srpt,srpt+r,fair,fair+r,laps,laps+r"
DEFAULT_RATES = "1,1.5,2,2.5"
DEFAULT_MACHINES = 100
DEFAULT_HORIZON = 100_000  # the paper's
BASELINE = "srpt"
BETA_POLICIES = ("laps", "laps+r")  # the policies that read beta
SOON = 200  # the paper's Figures 8 and 9 count the jobs done within 200 time units


@dataclass(frozen=True)
class RedundancyOptions:
    policies: tuple[str, ...]
    rates: tuple[float, ...]
    machines: int
    horizon: int  # time units of arrivals
    seeds: tuple[int, ...]  # per point
    beta: float
    speed: SpeedModel
    assignment: str = "kept"  # simulator/redundancy.py's ASSIGNMENTS
    betas: tuple[float, ...] = ()  # the beta sweep's, of the laps policies (none: no sweep)

    @property
    def swept(self) -> tuple[str, ...]:
        """The policies the beta sweep runs."""
        return tuple(policy for policy in self.policies if policy in BETA_POLICIES) \
            if self.betas else ()

    @property
    def points(self) -> list[tuple[float, str, float, int]]:
        """(rate, policy, beta, seed) of every run, in the runs' order: the policies at
        --beta, then the beta sweep's that are not among them."""
        main = [(rate, policy, self.beta, seed) for rate in self.rates
                for policy in self.policies for seed in self.seeds]
        sweep = [(rate, policy, beta, seed) for rate in self.rates for policy in self.swept
                 for beta in self.betas for seed in self.seeds]
        return list(dict.fromkeys(main + sweep))


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
                           help=f"time units of arrivals (default {DEFAULT_HORIZON:,}, the "
                                f"paper's; 20000 runs five times faster)")
        group.add_argument("--seeds", type=int, default=3,
                           help="seeds per point, for confidence intervals (default 3)")
        group.add_argument("--assignment", choices=ASSIGNMENTS, default="kept",
                           help="which machines a checkpoint hands out: kept (the paper's: a "
                                "job keeps its machines unless its allocation changes, new "
                                "copies take freed ones) or reshuffled (all anew, at random)")
        group.add_argument("--betas", default=None,
                           help="also run laps and laps+r at each of these betas (the "
                                "paper's Figures 8 and 9: 0.1,0.25,0.5,0.75,1), in betas/")
        add_beta_option(group)
        add_speed_option(group)
        add_seed_option(group)

    def options(self, args: argparse.Namespace) -> RedundancyOptions:
        policies = listed(args.values or DEFAULT_POLICIES, MACHINE_ALLOCATIONS.names(),
                          "--values", "an allocation policy")
        rates = numbers(args.rates, "--rates")
        for rate in rates:
            if not (math.isfinite(rate) and rate > 0):
                raise InvalidInput("--rates", f"an arrival rate must be > 0, got {rate:g}")
        for option, value, least in (("--seeds", args.seeds, 1), ("--horizon", args.horizon, 10),
                                     ("--machines", args.machines, 1)):
            at_least(option, value, least)
        if args.assignment not in ASSIGNMENTS:  # argparse checks the command line's
            raise InvalidInput("--assignment", f"must be one of {', '.join(ASSIGNMENTS)}, "
                                               f"got {args.assignment!r}")
        betas = tuple(dict.fromkeys(numbers(args.betas, "--betas"))) if args.betas else ()
        for option, values in (("--beta", (args.beta,)), ("--betas", betas)):
            for beta in values:
                try:
                    check_beta(beta)
                except InvalidInput as refused:
                    raise InvalidInput(option, refused.message) from None
        if betas and not any(policy in BETA_POLICIES for policy in policies):
            raise InvalidInput("--betas", f"sweeps {' and '.join(BETA_POLICIES)}, and --values "
                                          f"has neither")
        return RedundancyOptions(policies, rates, args.machines, args.horizon,
                                 tuple(range(args.seed, args.seed + args.seeds)), args.beta,
                                 SpeedModel(kind=args.speed), args.assignment, betas)

    def describe(self, options: RedundancyOptions) -> str:
        betas = (f"; {', '.join(options.swept)} at betas {list(options.betas)}"
                 if options.betas else "")
        return (f"{options.machines} machines, {options.speed.describe()}, machines "
                f"{options.assignment} at checkpoints; Pareto sizes of mean 40, arrivals for "
                f"{options.horizon} time units at rates {list(options.rates)}, "
                f"{len(options.seeds)} seeds, policies {', '.join(options.policies)}{betas}")

    def runs(self, options: RedundancyOptions, logs: Path | None) -> list[Run]:
        return [Run(f"{_label(policy, beta, options)} λ={rate:g} seed={seed}",
                    _simulate_machines,
                    (policy, options.machines, rate, options.horizon, options.speed, seed,
                     beta, options.assignment))
                for rate, policy, beta, seed in options.points]

    def run_line(self, result: RunResult) -> str:
        return f"mean flowtime {float(result.flowtimes.mean()):.1f}"

    def figures(self, options: RedundancyOptions, results: list[RunResult]) -> list[Report]:
        by_point = dict(zip(options.points, results, strict=True))

        def summary(policy: str, beta: float, rate: float, label: str) -> dict:
            return _summary([by_point[(rate, policy, beta, seed)] for seed in options.seeds],
                            label, beta if policy in BETA_POLICIES else None)

        runs = [summary(policy, options.beta, rate, policy)
                for rate in options.rates for policy in options.policies]
        settings = {"machines": options.machines, "speed": options.speed.describe(),
                    "horizon": options.horizon, "seeds": len(options.seeds),
                    "beta": options.beta, "assignment": options.assignment}
        reports = [self._report(runs, options.policies, options, settings, BASELINE, "")]
        if options.betas:
            labels = tuple(f"{policy} β={beta:g}" for policy in options.swept
                           for beta in options.betas)
            swept = [summary(policy, beta, rate, f"{policy} β={beta:g}")
                     for rate in options.rates for policy in options.swept
                     for beta in options.betas]
            reports.append(self._report(swept, labels, options,
                                        {**settings, "betas": list(options.betas)},
                                        labels[0], "betas"))
        return reports

    def _report(self, runs: list[dict], rows: tuple[str, ...], options: RedundancyOptions,
                settings: dict, baseline: str, folder: str) -> Report:
        """One folder's results: the table of `rows` (the runs' `policy`) over the rates,
        results.json, the page."""
        sweep = Sweep(field="rate", heading="λ={value:g}",
                      axis="arrival rate λ (jobs per time unit)", measure="flowtime",
                      cdf=lambda run: run["flowtime_cdf"], baseline=baseline,
                      cluster=f"{options.machines} machines of varying speed, "
                              f"{options.assignment}",
                      title="Redundancy and machine variability"
                            + (" over LAPS's beta" if folder else ""))
        tables = (mean_table(runs, rows, options.rates, sweep),
                  _within_table(runs, rows, options.rates))
        document = results_document("redundancy", runs, settings=settings)
        return Report(document, tables, page(runs, rows, options.rates, tables, sweep),
                      folder=folder, notes=tuple(_summary_line(run) for run in runs))


def _within_table(runs: list[dict], rows: tuple[str, ...], rates: tuple[float, ...]) -> Table:
    """The share of jobs done within SOON time units: what the paper's Figures 8 and 9 read
    off the CDFs (a small beta serves small jobs sooner)."""
    by = {(run["policy"], run["rate"]): run["counts"][f"done_within_{SOON}"] for run in runs}
    shown = Table(title=f"Share of jobs done within {SOON} time units")
    shown.add_column("policy")
    for rate in rates:
        shown.add_column(f"λ={rate:g}")
    for row in rows:
        shown.add_row(row, *(f"{by[(row, rate)]:.3f}" for rate in rates))
    return shown


def _label(policy: str, beta: float, options: RedundancyOptions) -> str:
    """A policy as the runs name it: with its beta where the beta sweep varies it."""
    return f"{policy} β={beta:g}" if policy in options.swept else policy


def _summary(results: list[RunResult], label: str, beta: float | None) -> dict:
    """One policy at one rate over its seeds: the experiments' run schema."""
    flows = np.concatenate([r.flowtimes for r in results])
    means = [float(r.flowtimes.mean()) for r in results]
    first = results[0]
    quantiles = np.linspace(0, 1, 101)
    return {
        "name": f"{label} λ={first.rate:g}",
        "policy": label, "beta": beta, "rate": first.rate,
        "jct": {"overall": {
            "count": int(len(flows)), "mean": float(np.mean(means)),
            "p50": float(np.median(flows)), "p99": float(np.quantile(flows, 0.99)),
            "max": float(flows.max()),
            "ci95": half_width(means)}},
        "allocation": {},
        "counts": {
            "jobs_done": int(len(flows)), "unfinished": sum(r.unfinished for r in results),
            f"done_within_{SOON}": float((flows <= SOON).mean()),
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
                       speed: SpeedModel, seed: int, beta: float,
                       assignment: str = "kept") -> RunResult:
    """One run of the paper's model, wherever the sweep sends it."""
    return RedundancySim(policy, machines, Workload(rate, horizon), speed, seed,
                         beta=beta, assignment=assignment).run()


def _summary_line(summary: dict) -> str:
    """One policy at one rate, over its seeds."""
    overall, counts = summary["jct"]["overall"], summary["counts"]
    unfinished = f"  {counts['unfinished']} unfinished" if counts["unfinished"] else ""
    return (f"  λ={summary['rate']:g} {summary['policy']:7} mean flowtime "
            f"{overall['mean']:8.1f} ± {overall['ci95']:.1f}  p50 {overall['p50']:6.1f}  "
            f"within {SOON} {counts[f'done_within_{SOON}']:.2f}  checkpoints/job "
            f"{counts['checkpoints_per_job']:.1f}  wasted "
            f"{counts['wasted_work_share']:.2f} of useful work{unfinished}")


EXPERIMENTS.register(Redundancy())
