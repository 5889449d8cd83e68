"""`megha experiment packing-cluster`: the packing paper's algorithms as the GMs run them
(docs/packing.md, In the GM and the services), on the federated simulator.

`megha experiment packing` measures the paper's algorithms in its own model, one scheduler that
knows every machine. This one asks what they are worth inside Megha: each GM orders its own jobs by
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

Each run's event log is written into `--out` (with `--no-log` into a temporary folder, gone
after the run); from it the table shows, for `lp`, how many times the GMs solved and the share
of jobs the LP left at their own lower bound (the share it could only order by their longest
tasks). Writes `results.json` (the experiments' schema:
`runs[].name`, `jct` with `weighted_mean`, `allocation`, `counts`, plus `lp`), `table.txt` and,
with `--html`, `megha inspect`'s report of every run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from rich.table import Table

from common.policies.job import JOB_POLICIES
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.common import (
    add_node_option,
    add_seed_option,
    add_shape_options,
    add_values_option,
    at_least,
    listed,
    parse_loads,
)
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.results import Report, inspection_page, results_document
from simulator.run_settings import (
    Overrides,
    RunSettings,
    Timing,
    add_check_argument,
    add_policy_arguments,
    add_timing_arguments,
    workload_defaults,
)
from simulator.sweep import Run

DEFAULT_JOB_POLICIES = "fifo,wspt,psrs,lp"
PLACEMENTS = ("first_fit", "tetris")
DEFAULT_LOADS = "0.9,1.2"
DEFAULT_JOBS = 1000
CLUSTER = {"nodes": 100, "gms": 2, "lms": 4}
WEIGHT_SCHEMES = {"equal": "const:1", "random": "uniform:1,10"}
WORKLOAD = {"poisson": 2.0, "width": "uniform:1,20", "cpu_m": "choice:500,2000,8000,16000",
            "mem_mib": "choice:512,2048,4096,8192"}


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


@dataclass(frozen=True)
class Shared:
    """What every run shares."""

    nodes: int
    gms: int
    lms: int
    node: tuple[int, int]  # a node's capacity
    jobs: int
    overrides: Overrides  # beside the job policy and placement a run sets
    settings: RunSettings


@dataclass(frozen=True)
class PackingClusterOptions:
    policies: tuple[str, ...]  # job policies, each with every placement
    loads: tuple[float, ...]
    weights: tuple[str, ...]
    shared: Shared

    @property
    def points(self) -> list[Point]:
        return [Point(policy, placement, load, scheme) for load in self.loads
                for scheme in self.weights for policy in self.policies
                for placement in PLACEMENTS]


class PackingCluster:
    name = "packing-cluster"
    summary = ("the packing paper's algorithms as the GMs' job policies (fifo, wspt, psrs, lp), "
               "each with each placement (first_fit, tetris), on the federated simulator")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("packing-cluster: the policies, the loads, the "
                                          "workload, the cluster")
        add_values_option(group, "job policies", DEFAULT_JOB_POLICIES)
        group.add_argument("--loads", default=DEFAULT_LOADS,
                           help=f"offered loads (default {DEFAULT_LOADS})")
        group.add_argument("--weights", default=",".join(WEIGHT_SCHEMES),
                           help=f"the jobs' weights: equal, or random uniform in [1, 10] "
                                f"(default {','.join(WEIGHT_SCHEMES)})")
        group.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                           help=f"Poisson jobs of 1-20 tasks (default {DEFAULT_JOBS})")
        add_seed_option(group)
        add_shape_options(group, CLUSTER)
        add_node_option(group)
        model = parser.add_argument_group("the model")
        add_timing_arguments(model, processing="none")
        add_policy_arguments(model, ("fairness", "pass_tasks", "variability", "queue_depth",
                                     "redundancy"))
        add_check_argument(model)

    def options(self, args: argparse.Namespace) -> PackingClusterOptions:
        policies = listed(args.values or DEFAULT_JOB_POLICIES, JOB_POLICIES.names(), "--values",
                          "a job policy")
        loads = parse_loads(args.loads)
        weights = listed(args.weights, WEIGHT_SCHEMES, "--weights", "a weight scheme")
        for option in ("--jobs", "--nodes", "--gms", "--lms"):
            at_least(option, vars(args)[option[2:]], 1)
        overrides = Overrides.from_args(args)
        overrides.check()
        settings = RunSettings(
            workload_defaults(), Timing(args.delay, args.calibration),
            processing=args.processing, check=not args.no_check)
        settings.timing.check()
        return PackingClusterOptions(policies, loads, weights, Shared(
            args.nodes, args.gms, args.lms, simulate.parse_node(args.node), args.jobs,
            overrides, settings.with_workload(seed=args.seed)))

    def describe(self, options: PackingClusterOptions) -> str:
        shared = options.shared
        return (f"{shared.nodes} nodes in {shared.lms} LMs under {shared.gms} GMs; "
                f"{shared.jobs} Poisson jobs at loads {', '.join(map(str, options.loads))}, "
                f"weights {', '.join(options.weights)}; job policies "
                f"{', '.join(options.policies)}, each with placements "
                f"{', '.join(PLACEMENTS)}; {len(options.points)} runs")

    def runs(self, options: PackingClusterOptions, logs: Path | None) -> list[Run]:
        return [Run(point.name, _simulate_point, (options.shared, point),
                    None if logs is None else logs / f"{point.name.replace(' ', '_')}.log")
                for point in options.points]

    def run_line(self, report: dict) -> str:
        line = (f"weighted mean JCT {report['jct'].get('weighted_mean', 0):8.1f} s, mean "
                f"{report['jct']['overall']['mean']:8.1f} s")
        if report["lp"]["solves"]:
            line += (f", {report['lp']['solves']} LP solves, "
                     f"{report['lp']['at_own_bound']:.0%} of jobs at their own bound")
        return line

    def figures(self, options: PackingClusterOptions, results: list[dict]) -> list[Report]:
        points = options.points
        runs = [report | {"name": point.name, "job_policy": point.job_policy,
                          "placement": point.placement, "load": point.load,
                          "weights": point.weights}
                for point, report in zip(points, results, strict=True)]
        document = results_document("packing-cluster", runs, comparison=True)
        return [Report(document, (weighted_table(runs, points),), inspection_page(document))]


def _simulate_point(shared: Shared, point: Point, log: Path | None = None) -> dict:
    """One run, wherever the sweep sends it: the study's workload under the point's policies,
    its event log at `log` (without one, in a temporary folder: the LP's figures are read
    from it); megha inspect's figures plus what the GMs' LP solves did."""
    if log is None:
        with tempfile.TemporaryDirectory(prefix="megha-packing-") as folder:
            return _simulate_point(shared, point, Path(folder) / "run.log")
    settings = shared.settings.with_workload(
        **WORKLOAD, count=shared.jobs, weight=WEIGHT_SCHEMES[point.weights],
        target_load=point.load)
    overrides = replace(shared.overrides, job_policy=point.job_policy,
                        placement=point.placement)
    federation = shaped_federation(shared.nodes, shared.gms, shared.lms, slots=False,
                                   node=shared.node, seed=settings.seed)
    federation = overrides.apply(federation)
    where = f"{shared.nodes} nodes, {shared.gms} GMs, {shared.lms} LMs"
    report = simulate.simulate_once(settings, "megha", federation, where, log, point.name)
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


EXPERIMENTS.register(PackingCluster())
