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

That is `--preset paper`, the default. `--preset federated` runs the study on the federated
cluster instead, multi-task jobs of a trace (`redundancy_cluster.py`); the two share the
table and the page (`Sweep`, `write_study`).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from common.errors import InvalidInput
from common.speed import SpeedModel
from simulator.models.machines import MACHINE_ALLOCATIONS
from simulator.redundancy import RedundancySim, RunResult, Workload
from simulator.sweep import Run, progress_printer, run_sweep

DEFAULT_POLICIES = "srpt,srpt+r,fair,fair+r,laps,laps+r"
DEFAULT_RATES = "1,1.5,2,2.5"
DEFAULT_MACHINES = 100
DEFAULT_HORIZON = 20_000
BASELINE = "srpt"
DEFAULT_LOADS = "0.5,0.8,1.0,1.2"  # light traffic to saturated
DEFAULT_MAX_COPIES = 4
PRESETS = ("paper", "federated")


@dataclass(frozen=True)
class Sweep:
    """How a redundancy study's table, plots and page name what it sweeps and measures: the
    paper's arrival rates and flowtimes, or the federated cluster's offered loads and JCTs."""

    field: str  # the runs' key of the swept value: "rate" or "load"
    heading: str  # a value's column heading, {value} standing for it: "λ={value:g}"
    axis: str  # the plot's x axis
    measure: str  # what the runs measure: "flowtime" or "JCT"
    cdf: Callable[[dict], dict | None]  # a run's CDF of that measure
    baseline: str  # the policy the others are compared to
    cluster: str  # what the runs ran on, for the plot's title
    title: str  # the page's heading

    def column(self, value: float) -> str:
        return self.heading.format(value=value)


def _paper_sweep(machines: int) -> Sweep:
    return Sweep(field="rate", heading="λ={value:g}", axis="arrival rate λ (jobs per time unit)",
                 measure="flowtime", cdf=lambda run: run["flowtime_cdf"], baseline=BASELINE,
                 cluster=f"{machines} machines of varying speed",
                 title="Redundancy and machine variability")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from simulator.experiments import redundancy_cluster

    group = parser.add_argument_group("redundancy experiment")
    group.add_argument("--preset", choices=PRESETS, default="paper",
                       help=f"redundancy: paper (default), the paper's model: one-task jobs on "
                            f"--machines machines of varying speed; federated, the federated "
                            f"cluster's copies: {redundancy_cluster.HELP}; packing: "
                            f"federated runs the GMs' job and placement policies on the "
                            f"federated simulator (simulator/experiments/packing_cluster.py)")
    group.add_argument("--machines", type=int, default=None,
                       help="redundancy: machines (default 100, the paper's); packing: machines "
                            "(default 10)")
    group.add_argument("--rates", default=DEFAULT_RATES,
                       help=f"redundancy: arrival rates, jobs per time unit (default "
                            f"{DEFAULT_RATES})")
    group.add_argument("--horizon", type=int, default=DEFAULT_HORIZON,
                       help="redundancy: time units of arrivals (default 20000)")
    group.add_argument("--seeds", type=int, default=3,
                       help="redundancy: seeds per point, for confidence intervals (default 3)")
    group.add_argument("--beta", type=float, default=0.5,
                       help="redundancy: LAPS's share of the latest jobs, laps+r's of the running "
                            "tasks (default 0.5)")
    group.add_argument("--speed", choices=("two-state", "gamma", "constant"),
                       default="two-state",
                       help="redundancy: machine rates (default two-state, the paper's)")
    group.add_argument("--loads", default=None,
                       help=f"redundancy, federated: offered loads, the share of the slots the "
                            f"arriving tasks ask for (default {DEFAULT_LOADS}); packing: the "
                            f"online runs' offered loads (default 1)")
    group.add_argument("--max-copies", type=int, default=DEFAULT_MAX_COPIES,
                       help=f"redundancy, federated: copies of one task, the original included "
                            f"(default {DEFAULT_MAX_COPIES}, the federation file's; 0: no bound)")
    group.add_argument("--logs", action="store_true",
                       help="redundancy, federated: also write every run's event log into --out "
                            "(about 150 MB a run with copies at the default size)")


def _parse(args: argparse.Namespace) -> tuple[list[str], list[float]]:
    policies = (args.values or DEFAULT_POLICIES).split(",")
    for name in policies:
        if name not in MACHINE_ALLOCATIONS.names():
            raise InvalidInput("--values", f"{name!r} is not an allocation policy (known: "
                                           f"{', '.join(MACHINE_ALLOCATIONS.names())})")
    try:
        rates = [float(value) for value in args.rates.split(",")]
    except ValueError:
        raise InvalidInput("--rates", f"expected numbers separated by commas, got "
                                      f"{args.rates!r}") from None
    for name, value, least in (("--seeds", args.seeds, 1), ("--horizon", args.horizon, 10),
                               ("--machines", args.machines, 1)):
        if value < least:
            raise InvalidInput(name, f"must be at least {least}, got {value}")
    return policies, rates


def _summary(results: list[RunResult]) -> dict:
    """One policy at one rate over its seeds: the experiments' run schema."""
    flows = np.concatenate([r.flowtimes for r in results])
    means = [float(r.flowtimes.mean()) for r in results]
    spread = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
    first = results[0]
    quantiles = np.linspace(0, 1, 101)
    return {
        "name": f"{first.policy} λ={first.rate:g}",
        "policy": first.policy, "rate": first.rate,
        "jct": {"overall": {
            "count": int(len(flows)), "mean": float(np.mean(means)),
            "p50": float(np.median(flows)), "p99": float(np.quantile(flows, 0.99)),
            "max": float(flows.max()),
            "ci95": 1.96 * spread / math.sqrt(len(means))}},
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


def run(args: argparse.Namespace) -> int:
    args.machines = DEFAULT_MACHINES if args.machines is None else args.machines
    args.loads = args.loads or DEFAULT_LOADS
    if args.preset == "federated":
        from simulator.experiments import redundancy_cluster

        return redundancy_cluster.run(args)
    policies, rates = _parse(args)
    speed = SpeedModel(kind=args.speed)
    out = args.out or Path("experiments") / "redundancy"
    out.mkdir(parents=True, exist_ok=True)
    print(f"redundancy: {args.machines} machines, {speed.describe()}; Pareto sizes of mean 40, "
          f"arrivals for {args.horizon} time units at rates {rates}, {args.seeds} seeds, "
          f"policies {', '.join(policies)}", flush=True)
    started = time.perf_counter()
    seeds = list(range(args.seed, args.seed + args.seeds))
    points = [(rate, policy, seed) for rate in rates for policy in policies for seed in seeds]
    results = run_sweep(
        [Run(f"{policy} λ={rate:g} seed={seed}", _simulate_machines,
                   (policy, args.machines, rate, args.horizon, speed, seed, args.beta))
         for rate, policy, seed in points],
        workers=args.workers, dask=args.dask, on_done=progress_printer(_flowtime_line))
    by_point = dict(zip(points, results, strict=True))
    runs = []
    for rate in rates:
        for policy in policies:
            summary = _summary([by_point[(rate, policy, seed)] for seed in seeds])
            runs.append(summary)
            _print_summary(summary)
    results = {"experiment": "redundancy", "machines": args.machines,
               "speed": speed.describe(), "horizon": args.horizon, "seeds": args.seeds,
               "beta": args.beta, "runs": runs}
    sweep = _paper_sweep(args.machines)
    write_study(out, results, [mean_table(runs, policies, rates, sweep)], sweep, policies, rates,
                args.html)
    print(f"results in {out}/ (results.json, table.txt); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def _simulate_machines(policy: str, machines: int, rate: float, horizon: int,
                       speed: SpeedModel, seed: int, beta: float) -> RunResult:
    """One run of the paper's model, wherever the sweep sends it."""
    return RedundancySim(policy, machines, Workload(rate, horizon), speed, seed,
                         beta=beta).run()


def _flowtime_line(result: RunResult) -> str:
    return f"mean flowtime {float(result.flowtimes.mean()):.1f}"


def _print_summary(summary: dict) -> None:
    """One policy at one rate, over its seeds."""
    overall, counts = summary["jct"]["overall"], summary["counts"]
    unfinished = f"  {counts['unfinished']} unfinished" if counts["unfinished"] else ""
    print(f"  λ={summary['rate']:g} {summary['policy']:7} mean flowtime {overall['mean']:8.1f} "
          f"± {overall['ci95']:.1f}  p50 {overall['p50']:6.1f}  checkpoints/job "
          f"{counts['checkpoints_per_job']:.1f}  wasted "
          f"{counts['wasted_work_share']:.2f} of useful work{unfinished}", flush=True)


def write_study(out: Path, results: dict, tables: list[Table], sweep: Sweep,
                policies: list[str], values: list[float], html: Path | None) -> None:
    """results.json, the tables on the terminal and in table.txt, and with `html` the page of
    tables and plots."""
    write_tables(out, results, tables)
    if html is not None:
        _write_html(html, results["runs"], policies, values, tables, sweep)
        print(f"report in {html}")


def write_tables(out: Path, results: dict, tables: list[Table]) -> None:
    """results.json, and the tables on the terminal and in table.txt."""
    (out / "results.json").write_text(json.dumps(results, indent=1))
    console = Console(width=160)
    with (out / "table.txt").open("w") as file:
        for shown in tables:
            console.print(shown)
            Console(file=file, width=160).print(shown)


def mean_table(runs: list[dict], policies: list[str], values: list[float], sweep: Sweep) -> Table:
    """The mean of each policy at each swept value, ± its 95% CI, and over the baseline's."""
    by = {(run["policy"], run[sweep.field]): run["jct"]["overall"] for run in runs}
    shown = Table(title=f"Mean {sweep.measure} (± 95% CI over seeds), and / {sweep.baseline}")
    shown.add_column("policy")
    for value in values:
        shown.add_column(sweep.column(value))
        shown.add_column(f"/ {sweep.baseline}")
    for policy in policies:
        row = [policy]
        for value in values:
            figure = by[(policy, value)]
            base = by.get((sweep.baseline, value))
            row += [f"{figure['mean']:.1f} ± {figure['ci95']:.1f}",
                    f"{figure['mean'] / base['mean']:.2f}" if base else "-"]
        shown.add_row(*row)
    return shown


def _plots(runs: list[dict], policies: list[str], values: list[float],
           sweep: Sweep) -> dict[str, bytes]:
    """The mean against the swept value, one line per policy; a CDF per value."""
    from inspection.plots import cdf_plot, new_figure, png_bytes, run_style

    by = {(run["policy"], run[sweep.field]): run for run in runs}
    slug = sweep.measure.lower()
    figure = new_figure()
    axes = figure.add_subplot()
    for index, policy in enumerate(policies):
        figures = [by[(policy, value)]["jct"]["overall"] for value in values]
        axes.errorbar(values, [f["mean"] for f in figures], yerr=[f["ci95"] for f in figures],
                      marker="o", capsize=3, label=policy, **run_style(index))
    axes.set(xlabel=sweep.axis, ylabel=f"mean {sweep.measure}",
             title=f"Mean {sweep.measure} against load ({sweep.cluster})")
    axes.grid(alpha=0.3)
    axes.legend()
    pictures = {f"{slug}_vs_{sweep.field}.png": png_bytes(figure)}
    for value in values:
        at_value = [by[(policy, value)] for policy in policies]
        figure = cdf_plot(at_value, sweep.cdf, 1.0,
                          f"{sweep.measure[:1].upper()}{sweep.measure[1:]} CDF at "
                          f"{sweep.column(value)}", f"{sweep.measure} (log scale)", log=True)
        if figure is not None:
            pictures[f"{slug}_cdf_{value:g}.png"] = png_bytes(figure)
    return pictures


def _write_html(path: Path, runs: list[dict], policies: list[str], values: list[float],
                tables: list[Table], sweep: Sweep) -> None:
    console = Console(record=True, width=160, file=io.StringIO())
    for shown in tables:
        console.print(shown)
    images = "".join(
        f'<h2>{name[:-4].replace("_", " ")}</h2><img src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}">'
        for name, data in _plots(runs, policies, values, sweep).items())
    path.write_text(f"<!doctype html><meta charset='utf-8'><title>megha experiment "
                    f"redundancy</title><h1>{sweep.title}</h1>"
                    f"<pre>{console.export_text()}</pre>{images}")
