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
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from common.errors import InvalidInput
from common.policies.redundancy.machines import REDUNDANCY_POLICIES
from common.speed import SpeedModel
from simulator.redundancy import RedundancySim, RunResult, Workload

DEFAULT_POLICIES = "srpt,srpt+r,fair,fair+r,laps,laps+r"
DEFAULT_RATES = "1,1.5,2,2.5"
BASELINE = "srpt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("redundancy experiment")
    group.add_argument("--machines", type=int, default=100,
                       help="redundancy: machines (default 100, the paper's)")
    group.add_argument("--rates", default=DEFAULT_RATES,
                       help=f"redundancy: arrival rates, jobs per time unit (default "
                            f"{DEFAULT_RATES})")
    group.add_argument("--horizon", type=int, default=20_000,
                       help="redundancy: time units of arrivals (default 20000)")
    group.add_argument("--seeds", type=int, default=3,
                       help="redundancy: seeds per point, for confidence intervals (default 3)")
    group.add_argument("--beta", type=float, default=0.5,
                       help="redundancy: LAPS's share of the latest jobs (default 0.5)")
    group.add_argument("--speed", choices=("two-state", "gamma", "constant"),
                       default="two-state",
                       help="redundancy: machine rates (default two-state, the paper's)")


def _parse(args: argparse.Namespace) -> tuple[list[str], list[float]]:
    policies = (args.values or DEFAULT_POLICIES).split(",")
    for name in policies:
        if name not in REDUNDANCY_POLICIES.names():
            raise InvalidInput("--values", f"{name!r} is not an allocation policy (known: "
                                           f"{', '.join(REDUNDANCY_POLICIES.names())})")
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
    policies, rates = _parse(args)
    speed = SpeedModel(kind=args.speed)
    out = args.out or Path("experiments") / "redundancy"
    out.mkdir(parents=True, exist_ok=True)
    print(f"redundancy: {args.machines} machines, {speed.describe()}; Pareto sizes of mean 40, "
          f"arrivals for {args.horizon} time units at rates {rates}, {args.seeds} seeds, "
          f"policies {', '.join(policies)}", flush=True)
    started = time.perf_counter()
    runs = []
    for rate in rates:
        for policy in policies:
            results = []
            for seed in range(args.seed, args.seed + args.seeds):
                sim = RedundancySim(policy, args.machines, Workload(rate, args.horizon), speed,
                                    seed, beta=args.beta)
                results.append(sim.run())
            summary = _summary(results)
            runs.append(summary)
            overall, counts = summary["jct"]["overall"], summary["counts"]
            unfinished = f"  {counts['unfinished']} unfinished" if counts["unfinished"] else ""
            print(f"  λ={rate:g} {policy:7} mean flowtime {overall['mean']:8.1f} "
                  f"± {overall['ci95']:.1f}  p50 {overall['p50']:6.1f}  checkpoints/job "
                  f"{counts['checkpoints_per_job']:.1f}  wasted "
                  f"{counts['wasted_work_share']:.2f} of useful work{unfinished}", flush=True)
    (out / "results.json").write_text(json.dumps(
        {"experiment": "redundancy", "machines": args.machines, "speed": speed.describe(),
         "horizon": args.horizon, "seeds": args.seeds, "beta": args.beta, "runs": runs},
        indent=1))
    table = _table(runs, policies, rates)
    console = Console(width=160)
    console.print(table)
    with (out / "table.txt").open("w") as file:
        Console(file=file, width=160).print(table)
    if args.html is not None:
        _write_html(args.html, runs, policies, rates, table, args.machines)
        print(f"report in {args.html}")
    print(f"results in {out}/ (results.json, table.txt); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def _table(runs: list[dict], policies: list[str], rates: list[float]) -> Table:
    by = {(run["policy"], run["rate"]): run["jct"]["overall"] for run in runs}
    table = Table(title="Mean flowtime (± 95% CI over seeds), and / srpt")
    table.add_column("policy")
    for rate in rates:
        table.add_column(f"λ={rate:g}")
        table.add_column("/ srpt")
    for policy in policies:
        row = [policy]
        for rate in rates:
            figure = by[(policy, rate)]
            base = by.get((BASELINE, rate))
            row += [f"{figure['mean']:.1f} ± {figure['ci95']:.1f}",
                    f"{figure['mean'] / base['mean']:.2f}" if base else "-"]
        table.add_row(*row)
    return table


def _plots(runs: list[dict], policies: list[str], rates: list[float],
           machines: int) -> dict[str, bytes]:
    """Mean flowtime against the arrival rate, one line per policy; a flowtime CDF per rate."""
    from inspection.plots import cdf_plot, new_figure, png_bytes, run_style

    by = {(run["policy"], run["rate"]): run for run in runs}
    figure = new_figure()
    axes = figure.add_subplot()
    for index, policy in enumerate(policies):
        figures = [by[(policy, rate)]["jct"]["overall"] for rate in rates]
        axes.errorbar(rates, [f["mean"] for f in figures], yerr=[f["ci95"] for f in figures],
                      marker="o", capsize=3, label=policy, **run_style(index))
    axes.set(xlabel="arrival rate λ (jobs per time unit)", ylabel="mean flowtime",
             title=f"Mean flowtime against load ({machines} machines of varying speed)")
    axes.grid(alpha=0.3)
    axes.legend()
    pictures = {"flowtime_vs_rate.png": png_bytes(figure)}
    for rate in rates:
        at_rate = [by[(policy, rate)] for policy in policies]
        figure = cdf_plot(at_rate, lambda run: run["flowtime_cdf"], 1.0,
                          f"Flowtime CDF at λ={rate:g}", "flowtime (log scale)", log=True)
        pictures[f"flowtime_cdf_{rate:g}.png"] = png_bytes(figure)
    return pictures


def _write_html(path: Path, runs: list[dict], policies: list[str], rates: list[float],
                table: Table, machines: int) -> None:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(table)
    images = "".join(
        f'<h2>{name[:-4].replace("_", " ")}</h2><img src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}">'
        for name, data in _plots(runs, policies, rates, machines).items())
    path.write_text(f"<!doctype html><meta charset='utf-8'><title>megha experiment "
                    f"redundancy</title><h1>Redundancy and machine variability</h1>"
                    f"<pre>{console.export_text()}</pre>{images}")
