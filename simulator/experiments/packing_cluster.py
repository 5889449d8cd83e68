"""`megha experiment packing --preset federated`: the packing paper's algorithms as the GMs run
them (docs/packing.md, In the GM and the services), on the federated simulator.

The default preset measures the paper's algorithms in its own model, one scheduler that knows
every machine. This one asks what they are worth inside Megha: each GM orders its own jobs by
a job policy and places their tasks by a placement policy, both from the federation file, and
the same cores run in the services.

- Policies: the job policies of `--values` (default fifo, wspt, psrs, lp), each with each
  placement (first_fit, Megha's, and tetris, Tetris's alignment).
- Workload: `--jobs` (default 1,000) Poisson jobs of 1-20 tasks with Pareto durations (`megha
  simulate`'s default: shape 2.5, 40 s scale), cpu 0.5-16 cores and memory 0.5-8 GiB per task
  (four sizes each, drawn independently: mixed shapes are what a packing policy can tell
  apart), weights equal or uniform in [1, 10] (`--weights`; the trace-free stand-in for the
  paper's priority weights is the random scheme), arrivals scaled to each offered load of
  `--loads` (default 0.9 and 1.2: busy, and saturated with a backlog that drains after the
  last arrival). The workload was fixed before any run; the seed is `--seed`.
- Cluster: 100 nodes of 64 cores and 16 GiB in 4 LMs under 2 GMs (`--nodes`, `--lms`, `--gms`).
  Tasks carry no placement sets here: the Poisson generator does not draw them, and a GM's sets
  are strict, so they would change which tasks can run, not how a policy orders them.

Each run's event log is written into `--out`; from it the table shows, for `lp`, how many
times the GMs solved and the share of jobs the LP left at their own lower bound (the share it
could only order by their longest tasks). Writes `results.json` (the experiments' schema:
`runs[].name`, `jct` with `weighted_mean`, `allocation`, `counts`, plus `lp`), `table.txt` and,
with `--html`, `megha inspect`'s report of every run.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from common.errors import InvalidInput
from common.policies.job import JOB_POLICIES
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.redundancy_cluster import parse_loads
from simulator.packing_workload import WEIGHTS as PAPER_WEIGHTS
from simulator.sweep import Run, progress_printer, run_sweep

DEFAULT_JOB_POLICIES = "fifo,wspt,psrs,lp"
PLACEMENTS = ("first_fit", "tetris")
DEFAULT_LOADS = "0.9,1.2"
DEFAULT_JOBS = 1000
CLUSTER = {"nodes": 100, "gms": 2, "lms": 4}
WEIGHT_SCHEMES = {"equal": "const:1", "random": "uniform:1,10"}
WORKLOAD = {"poisson": 2.0, "width": "uniform:1,20", "cpu_m": "choice:500,2000,8000,16000",
            "mem_mib": "choice:512,2048,4096,8192"}
DEFAULT_OUT = Path("experiments") / "packing-federated"


@dataclass(frozen=True)
class Point:
    job_policy: str
    placement: str
    load: float
    weights: str

    @property
    def name(self) -> str:
        return f"{self.job_policy}+{self.placement} load {self.load:g} {self.weights}"

    @property
    def column(self) -> str:
        return f"load {self.load:g} {self.weights}"


def _job_policies(values: str | None) -> list[str]:
    names = [name.strip() for name in (values or DEFAULT_JOB_POLICIES).split(",") if name]
    for name in names:
        if name not in JOB_POLICIES.names():
            raise InvalidInput("--values", f"{name!r} is not a job policy (known: "
                                           f"{', '.join(JOB_POLICIES.names())})")
    return names


def _weight_schemes(text: str) -> list[str]:
    schemes = [scheme.strip() for scheme in text.split(",") if scheme.strip()]
    for scheme in schemes:
        if scheme not in WEIGHT_SCHEMES:
            raise InvalidInput("--weights", f"{scheme!r} is not a weight scheme of the federated "
                                            f"preset (known: {', '.join(WEIGHT_SCHEMES)})")
    return schemes


def run(args: argparse.Namespace) -> int:
    for option in ("log", "results", "config"):
        if getattr(args, option) is not None:
            raise InvalidInput(f"--{option}", "the federated packing preset generates its "
                                              "cluster and writes one log per run into --out")
    policies = _job_policies(args.values)
    loads = parse_loads(args.loads or DEFAULT_LOADS)
    # the default preset's --weights default lists priority, which needs a trace's priorities
    weights = _weight_schemes("equal,random" if args.weights == ",".join(PAPER_WEIGHTS)
                              else args.weights)
    points = [Point(policy, placement, load, scheme) for load in loads for scheme in weights
              for policy in policies for placement in PLACEMENTS]
    out = args.out or DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    jobs = args.jobs or DEFAULT_JOBS
    shape = {key: getattr(args, key) or value for key, value in CLUSTER.items()}
    print(f"packing, federated: {shape['nodes']} nodes in {shape['lms']} LMs under "
          f"{shape['gms']} GMs; {jobs} Poisson jobs at loads {', '.join(map(str, loads))}; "
          f"{len(points)} runs", flush=True)
    started = time.perf_counter()
    reports = run_sweep([Run(point.name, _simulate_point, (args, point, jobs, shape),
                             log=out / f"{point.name.replace(' ', '_')}.log")
                         for point in points],
                        workers=args.workers, dask=args.dask,
                        on_done=progress_printer(_run_line))
    runs = [report | {"name": point.name, "job_policy": point.job_policy,
                      "placement": point.placement, "load": point.load,
                      "weights": point.weights}
            for point, report in zip(points, reports, strict=True)]
    from simulator.experiments import write_results

    write_results("packing-federated", out, runs, args.html)  # the shared schema, inspect's
    table = weighted_table(runs, points)
    Console(width=160).print(table)
    with (out / "table.txt").open("a") as file:
        Console(file=file, width=160).print(table)
    print(f"results in {out}/ (results.json, table.txt, one event log per run); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def _simulate_point(args: argparse.Namespace, point: Point, jobs: int, shape: dict,
                    log: Path) -> dict:
    """One run, wherever the sweep sends it: the preset's workload under the point's policies,
    its event log at `log`; megha inspect's figures plus what the GMs' LP solves did."""
    run_args = argparse.Namespace(**vars(args))
    for key, value in WORKLOAD.items():
        setattr(run_args, key, value)
    run_args.count = jobs
    run_args.jobs = None
    run_args.weight = WEIGHT_SCHEMES[point.weights]
    run_args.target_load = point.load
    run_args.job_policy = point.job_policy
    run_args.placement = point.placement
    run_args.trace = run_args.alibaba = None
    run_args.slots = False
    federation = shaped_federation(shape["nodes"], shape["gms"], shape["lms"], slots=False,
                                   node=simulate.parse_node(args.node), seed=args.seed)
    federation = simulate.with_overrides(federation, run_args)
    where = f"{shape['nodes']} nodes, {shape['gms']} GMs, {shape['lms']} LMs"
    report = simulate.simulate_once(run_args, "megha", federation, where, log, point.name)
    return report | {"lp": lp_figures(log)}


def lp_figures(log: Path) -> dict:
    """What the GMs' LP solves did, from the event log's `jobs_reordered` lines. `handle_s` is
    the GMs' time on the steps that solved, as the run's processing model charged it (0 with
    `--processing none`; the solve's wall time with `measured`): the core reads no clock."""
    solves = timeouts = jobs = at_bound = 0
    seconds = 0.0
    with log.open() as lines:
        for line in lines:
            if '"jobs_reordered"' not in line:
                continue
            event = json.loads(line)
            solves += 1
            if event.get("timed_out"):
                timeouts += 1
                continue
            jobs += event["jobs"]
            at_bound += event["at_own_bound"]
            seconds += event.get("handle_s") or 0.0
    return {"solves": solves, "timeouts": timeouts, "handle_s": round(seconds, 3),
            "mean_jobs": round(jobs / solves, 1) if solves else 0,
            "at_own_bound": round(at_bound / jobs, 3) if jobs else None}


def _run_line(report: dict) -> str:
    line = (f"weighted mean JCT {report['jct'].get('weighted_mean', 0):8.1f} s, mean "
            f"{report['jct']['overall']['mean']:8.1f} s")
    if report["lp"]["solves"]:
        line += (f", {report['lp']['solves']} LP solves, {report['lp']['at_own_bound']:.0%} of "
                 f"jobs at their own bound")
    return line


def weighted_table(runs: list[dict], points: list[Point]) -> Table:
    """Weighted mean JCT per policy pair and column, with its ratio to the column's best."""
    columns = list(dict.fromkeys(point.column for point in points))
    by = {(run["job_policy"], run["placement"], f"load {run['load']:g} {run['weights']}"): run
          for run in runs}
    shown = Table(title="Weighted mean JCT, s (x: over the column's best; lower is better)")
    shown.add_column("job policy + placement")
    for column in columns:
        shown.add_column(column)
    shown.add_column("lp: solves, jobs at own bound")
    pairs = list(dict.fromkeys((point.job_policy, point.placement) for point in points))
    for policy, placement in pairs:
        row = [f"{policy} + {placement}"]
        lp_notes = []
        for column in columns:
            run = by.get((policy, placement, column))
            if run is None:
                row.append("-")
                continue
            best = min(r["jct"]["weighted_mean"] for key, r in by.items() if key[2] == column)
            mean = run["jct"]["weighted_mean"]
            cell = f"{mean:.1f} ({mean / best:.2f}x)"
            row.append(f"[bold]{cell}[/bold]" if mean == best else cell)
            if run["lp"]["solves"]:
                lp_notes.append(f"{run['lp']['solves']}, {run['lp']['at_own_bound']:.0%}")
        row.append("; ".join(lp_notes) or "-")
        shown.add_row(*row)
    return shown
