"""`megha experiment packing`: the packing-and-placement paper's study (its section 7).

Parallel-task jobs of a trace packed onto `--machines` machines (default 10), for the least
weighted completion time (simulator/packing_workload.py says how the instances are built from
the trace and what is synthesized). `--resources 1` (the default) packs memory alone, the
paper's model; `--resources 2` packs cpu and memory. Two placement settings:

- `single`: every task has one machine (the paper's original trace, where each task has its
  machine): the preemptive algorithms, lp-single (ordering LP), psrs and tetris-p, and the
  non-preemptive wspt, fifo and jsq-mw for reference;
- `placement`: every task has `--local` machines (default 3) and runs `--remote-factor` times
  slower elsewhere (default 1.5; a list sweeps it, the paper's Figure 2c): the non-preemptive
  lp-np (the paper's algorithm: LP without migration, slow motion, machine-interval matching),
  lp-np-greedy (our greedy heuristic on the same LP), tetris-np, jsq-mw, wspt and fifo, and
  the preemptive, migrating lp-migrate (interval LP with migration), measured against the
  bound of its own class (the LP with migration).

Each setting runs offline (the first `--offline-jobs` jobs, default 25, all at time 0: the
backlog of a saturated cluster) and online (the first `--jobs` jobs, default 150, arriving as
in the trace, scaled to each offered load of `--loads`, default 1; a list sweeps it, the
paper's Figure 3c), under the three weight schemes of `--weights` (equal, random, priority).
Every run reports its weighted mean JCT (completion minus release) beside the LP lower bound
of its instance: the ordering LP in the single setting, the interval LP without migration in
the placement setting (the bound of every non-migrating schedule); each run's ratio to it,
and to the best baseline.

The paper's claim, in direction: its LP-ordered algorithms beat PSRS, Tetris and JSQ-MW,
offline and online, for all three weightings, and stay within a small factor of the bound
(docs/packing.md says where ours do not, and why).

Writes `results.json` (the experiments' schema: `runs[].name`, `jct`, `allocation`, `counts`,
plus `weighted_jct`, `lp_bound`, `ratio_to_bound`, `ratio_to_best_baseline` and a JCT CDF),
`table.txt` (the ratio table, and per swept load or remote factor a table of the ratio across
its values), and with `--html` a page with the tables and the CDFs.

A point (setting, mode, load, remote factor, weights) is one run of the sweep
(simulator/sweep.py, a pool of `--workers` processes or `--dask`'s cluster): its instance, its
LP bound and all its algorithms together, so that the bound and lp-np-greedy's order stay one
solve of the whole instance's LP (lp.py keeps it, in the process that solved it).
"""

from __future__ import annotations

import argparse
import base64
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from common.errors import InvalidInput
from loadgen.paper_workloads import YH1_SUB
from loadgen.trace import TraceJob, read_trace
from simulator.experiments.common import (
    add_seed_option,
    add_values_option,
    at_least,
    listed,
    numbers,
    parse_loads,
)
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.results import Page, Report, results_document
from simulator.models.packing import lp
from simulator.models.packing.model import Instance
from simulator.models.packing.schedulers import PACKING_POLICIES, SETTINGS, PackingOptions
from simulator.packing import PackingRun, simulate
from simulator.packing_workload import WEIGHTS, build_instance
from simulator.sweep import Run

DEFAULT_MACHINES = 10
DEFAULT_OFFLINE_JOBS = 25  # the placement LP of 40 jobs takes 20-90 s to solve here
DEFAULT_ONLINE_JOBS = 150
DEFAULT_LOADS = "1"
MAX_TASKS = 50
ALGORITHMS = {
    "single": ("lp-single", "psrs", "tetris-p", "wspt", "fifo", "jsq-mw"),
    "placement": ("lp-np", "lp-np-greedy", "lp-migrate", "tetris-np", "jsq-mw", "wspt", "fifo"),
}
OURS = {"lp-single", "lp-np", "lp-np-greedy", "lp-migrate"}
# Schedules that migrate are bounded by the LP with migration, not by the setting's bound (the
# LP without migration bounds only schedules that keep each task on one machine).
MIGRATING = {"lp-migrate"}
PAPER_BASELINES = {"psrs", "tetris-p", "tetris-np", "jsq-mw"}
MODES = ("offline", "online")
RESOURCES = {1: "one resource (memory, the paper's model)", 2: "two resources (cpu and memory)"}
SWEPT = {"load": "offered load", "remote_factor": "remote factor"}  # what a list sweeps


@dataclass(frozen=True)
class Study:
    """What every point of the study shares."""

    machines: int
    offline_jobs: int
    online_jobs: int
    seed: int
    local: int
    resources: int
    algorithms: tuple[str, ...] | None  # --values: None for each setting's own
    options: PackingOptions


@dataclass(frozen=True)
class PackingStudyOptions:
    study: Study  # what every point shares
    points: tuple[dict, ...]  # (setting, mode, load, weights) of each run
    trace: Path


class Packing:
    name = "packing"
    summary = ("the packing-and-placement paper's study: LP-ordered schedulers against PSRS, "
               "Tetris, JSQ-MaxWeight, WSPT and FIFO for weighted JCT, over the LP bound")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("packing: the algorithms, the settings, the instances")
        add_values_option(group, "packing algorithms", "each setting's own: "
                          + "; ".join(f"{setting} {','.join(names)}"
                                      for setting, names in ALGORITHMS.items()))
        group.add_argument("--settings", default=",".join(SETTINGS),
                           help="placement settings, single and/or placement (default both)")
        group.add_argument("--weights", default=",".join(WEIGHTS),
                           help=f"weight schemes (default {','.join(WEIGHTS)})")
        group.add_argument("--modes", default=",".join(MODES),
                           help="offline (all jobs at 0) and/or online (default both)")
        group.add_argument("--machines", type=int, default=DEFAULT_MACHINES,
                           help=f"machines (default {DEFAULT_MACHINES})")
        group.add_argument("--offline-jobs", type=int, default=DEFAULT_OFFLINE_JOBS,
                           help=f"jobs of an offline run (default {DEFAULT_OFFLINE_JOBS})")
        group.add_argument("--jobs", type=int, default=DEFAULT_ONLINE_JOBS,
                           help=f"jobs of an online run (default {DEFAULT_ONLINE_JOBS})")
        group.add_argument("--loads", default=DEFAULT_LOADS,
                           help=f"the online runs' offered loads (default {DEFAULT_LOADS})")
        group.add_argument("--local", type=int, default=3,
                           help="a task's local machines in the placement setting (default 3)")
        group.add_argument("--remote-factor", default="1.5",
                           help="how much slower a task runs off its local machines (default "
                                "1.5; a comma-separated list sweeps it)")
        group.add_argument("--resources", type=int, default=1,
                           help="resources packed: 1 (memory, the paper's model; default) or "
                                "2 (cpu and memory)")
        group.add_argument("--resolve-first", type=float, default=None,
                           help="online: seconds to the LP algorithms' first re-solve (default "
                                "10 x the mean inter-arrival time, the paper's)")
        group.add_argument("--resolve-growth", type=float, default=1.2,
                           help="online: each re-solve interval this much longer than the last "
                                "(default 1.2; 1: a fixed interval)")
        group.add_argument("--trace", type=Path, default=YH1_SUB,
                           help="the Sparrow/Eagle trace the jobs come from (default the "
                                "bundled YH1_sub.tr)")
        add_seed_option(group)

    def options(self, args: argparse.Namespace) -> PackingStudyOptions:
        for option, value in (("--offline-jobs", args.offline_jobs), ("--jobs", args.jobs),
                              ("--machines", args.machines)):
            at_least(option, value, 1)
        if args.resolve_growth < 1 or (args.resolve_first is not None
                                       and args.resolve_first <= 0):
            raise InvalidInput("--resolve-growth", "the re-solve intervals must be > 0 s and "
                                                   "grow by a factor >= 1")
        if args.resources not in RESOURCES:
            raise InvalidInput("--resources", f"must be 1 (memory) or 2 (cpu and memory), got "
                                              f"{args.resources}")
        points = _points(args)
        algorithms = (None if args.values is None else
                      listed(args.values, PACKING_POLICIES.names(), "--values",
                             "a packing algorithm"))
        study = Study(machines=args.machines, offline_jobs=args.offline_jobs,
                      online_jobs=args.jobs, seed=args.seed, local=args.local,
                      resources=args.resources, algorithms=algorithms,
                      options=PackingOptions(resolve_first=args.resolve_first,
                                             resolve_growth=args.resolve_growth,
                                             seed=args.seed))
        return PackingStudyOptions(study, points, args.trace)

    def describe(self, options: PackingStudyOptions) -> str:
        study = options.study
        algorithms = ", ".join(study.algorithms) if study.algorithms else "each setting's own"
        return (f"{RESOURCES[study.resources]}; {study.machines} machines of capacity 1, jobs "
                f"of {options.trace} with at most {MAX_TASKS} tasks; offline "
                f"{study.offline_jobs} jobs at 0, online {study.online_jobs} jobs; "
                f"{len(options.points)} settings; algorithms {algorithms}")

    def runs(self, options: PackingStudyOptions, logs: Path | None) -> list[Run]:
        trace = read_trace(options.trace).jobs
        return [Run(_column(point), _solve_point, (trace, options.study, point))
                for point in options.points]

    def run_line(self, solved: tuple[dict, list[dict]]) -> str:
        bound, here = solved
        line = f"{bound['tasks']} tasks, LP bound {bound['lp_bound']:.1f} s"
        if here:
            best = min(here, key=lambda record: record["ratio_to_bound"])
            line += f", best {best['algorithm']} at {best['ratio_to_bound']:.2f} x the bound"
        return line

    def figures(self, options: PackingStudyOptions,
                results: list[tuple[dict, list[dict]]]) -> list[Report]:
        bounds = [bound for bound, _ in results]
        runs = [record for _, here in results for record in here]
        study = options.study
        document = results_document("packing", runs, settings={
            "machines": study.machines, "offline_jobs": study.offline_jobs,
            "online_jobs": study.online_jobs, "local": study.local,
            "resources": study.resources, "trace": str(options.trace),
            "seed": study.seed, "bounds": bounds})
        tables = (ratio_table(runs, bounds), *sweep_tables(runs))
        return [Report(document, tables, _page(runs, bounds, tables))]


def _algorithms(chosen: tuple[str, ...] | None, setting: str) -> list[str]:
    if chosen is None:
        return list(ALGORITHMS[setting])
    return [name for name in chosen if setting in PACKING_POLICIES.get(name).settings]


def _bound(instance: Instance, setting: str) -> lp.LPSolution:
    if setting == "single":
        return lp.ordering_lp(instance)
    return lp.interval_lp(instance, migration=False)


def _run_record(instance: Instance, run: PackingRun, bound: float, point: dict) -> dict:
    jcts = np.array([run.completion[j] - instance.jobs[j].release for j in run.completion])
    waits = np.array([run.first_start[j] - instance.jobs[j].release for j in run.first_start])
    quantiles = np.linspace(0, 1, 101)
    return point | {
        "name": f"{run.algorithm} {_column(point)}",
        "algorithm": run.algorithm,
        "weighted_jct": run.weighted_jct,
        "lp_bound": bound,
        "ratio_to_bound": run.weighted_jct / bound,
        "jct": {"overall": {"count": int(len(jcts)), "mean": float(jcts.mean()),
                            "p50": float(np.median(jcts)),
                            "p99": float(np.quantile(jcts, 0.99)), "max": float(jcts.max())},
                "weighted_mean": run.weighted_jct},
        "allocation": {"overall": {"count": int(len(waits)), "mean": float(waits.mean()),
                                   "p50": float(np.median(waits)),
                                   "p99": float(np.quantile(waits, 0.99))}},
        "counts": run.counts | {"jobs_done": len(run.completion)},
        "scheduler": run.figures,
        "seconds": round(run.seconds, 3),
        "jct_cdf": {"x": np.quantile(jcts, quantiles).tolist(), "y": quantiles.tolist()},
    }


def _points(args: argparse.Namespace) -> tuple[dict, ...]:
    settings = listed(args.settings, SETTINGS, "--settings", "a placement setting")
    weights = listed(args.weights, WEIGHTS, "--weights", "a weight scheme")
    modes = listed(args.modes, MODES, "--modes", "a mode")
    loads = parse_loads(args.loads)
    factors = numbers(args.remote_factor, "--remote-factor")
    for factor in factors:
        if not (math.isfinite(factor) and factor >= 1):
            raise InvalidInput("--remote-factor", f"a remote factor must be >= 1, got "
                                                  f"{factor:g}")
    return tuple({"setting": setting, "mode": mode, "load": load, "remote_factor": factor,
                  "weights": scheme}
                 for setting in settings for mode in modes
                 for load in ([None] if mode == "offline" else loads)
                 for factor in (factors if setting == "placement" else [None])
                 for scheme in weights)


def _solve_point(trace: list[TraceJob], study: Study, point: dict) -> tuple[dict, list[dict]]:
    """One point, wherever the sweep sends it: its instance's LP bound (with the LP's
    figures) and a record for each algorithm, which it prints as it goes."""
    online = point["mode"] == "online"
    instance = build_instance(
        trace, jobs=study.online_jobs if online else study.offline_jobs, max_tasks=MAX_TASKS,
        machines=study.machines, setting=point["setting"], weights=point["weights"],
        seed=study.seed, load=point["load"], local=study.local,
        remote_factor=point["remote_factor"] or 1.0,  # None: the single setting's, unused
        resources=study.resources)
    solution = _bound(instance, point["setting"])
    bound = lp.weighted_mean_bound(instance, solution)
    print(f"  {_column(point)}: "
          f"{instance.description['tasks']} tasks; LP bound {bound:.1f} s "
          f"({solution.kind} LP, {solution.variables} variables, "
          f"{solution.seconds:.2f} s{', ' + solution.reduced if solution.reduced else ''})",
          flush=True)
    here = []
    migration_bound = None
    for algorithm in _algorithms(study.algorithms, point["setting"]):
        own, kind = bound, solution.kind
        if algorithm in MIGRATING and point["setting"] == "placement":
            if migration_bound is None:
                migration_bound = lp.weighted_mean_bound(
                    instance, lp.interval_lp(instance, migration=True))
            own, kind = migration_bound, "migration"
        result = simulate(instance, algorithm, online=online, options=study.options)
        here.append(_run_record(instance, result, own, point) | {"bound_lp": kind})
        lp_note = (f"  LP {result.figures['lp_solves']}x {result.figures['lp_seconds']:.2f} s"
                   if "lp_solves" in result.figures else "")
        print(f"    {algorithm:12} weighted JCT {result.weighted_jct:9.1f} s  "
              f"/ bound {result.weighted_jct / own:5.2f}  preemptions "
              f"{result.counts['preemptions']:5}  remote starts "
              f"{result.counts['remote_starts']:5}  {result.seconds:5.2f} s{lp_note}",
              flush=True)
    best = min((r["weighted_jct"] for r in here if r["algorithm"] in PAPER_BASELINES),
               default=None)
    for record in here:
        record["ratio_to_best_baseline"] = (record["weighted_jct"] / best if best else None)
    return point | {"lp": solution.kind, "lp_bound": bound,
                    "lp_seconds": round(solution.seconds, 3),
                    "lp_variables": solution.variables, "lp_rows": solution.rows,
                    "lp_reduced": solution.reduced, "lp_migration_bound": migration_bound,
                    "tasks": instance.description["tasks"]}, here


def _column(point: dict) -> str:
    mode = "offline" if point["mode"] == "offline" else f"load {point['load']:g}"
    factor = f" rf {point['remote_factor']:g}" if point.get("remote_factor") else ""
    return f"{point['setting']}{factor} {mode} {point['weights']}"


def ratio_table(runs: list[dict], bounds: list[dict]) -> Table:
    """Weighted mean JCT ÷ the LP bound, per algorithm and setting; the best per column in
    bold; the last row the bound itself."""
    columns = [_column(b) for b in bounds]
    by = {(r["algorithm"], _column(r)): r for r in runs}
    algorithms = [a for a in dict.fromkeys(r["algorithm"] for r in runs)]
    shown = Table(title="Weighted mean JCT / LP lower bound (lower is better; best in bold; "
                        "x: ours over the best of psrs, tetris, jsq-mw)")
    shown.add_column("algorithm")
    for column in columns:
        shown.add_column(column.replace(" ", "\n", 2))
    for algorithm in algorithms:
        row = [algorithm]
        for column in columns:
            record = by.get((algorithm, column))
            if record is None:
                row.append("-")
                continue
            best = min(r["ratio_to_bound"] for (a, c), r in by.items() if c == column)
            cell = f"{record['ratio_to_bound']:.2f}"
            if algorithm in OURS and record["ratio_to_best_baseline"]:
                cell += f" ({record['ratio_to_best_baseline']:.2f}x)"
            row.append(f"[bold]{cell}[/bold]" if record["ratio_to_bound"] == best else cell)
        shown.add_row(*row)
    shown.add_row("LP bound (s)", *[f"{b['lp_bound']:.1f}" for b in bounds])
    if any(b.get("lp_migration_bound") for b in bounds):  # lp-migrate's ratios are to this
        shown.add_row("LP bound with migration (s)",
                      *[f"{b['lp_migration_bound']:.1f}" if b.get("lp_migration_bound")
                        else "-" for b in bounds])
    return shown


def sweep_tables(runs: list[dict]) -> list[Table]:
    """Per swept quantity (offered load, remote factor) with more than one value: the ratio
    to the LP bound of each algorithm across its values, a row per setting, weights and
    algorithm (the other quantities held)."""
    tables = []
    for swept, label in SWEPT.items():
        values = sorted({r[swept] for r in runs if r[swept] is not None})
        if len(values) < 2:
            continue
        by: dict[tuple, dict] = {}
        for record in runs:
            if record[swept] is None:
                continue
            row = (_held(record, swept), record["weights"], record["algorithm"])
            by.setdefault(row, {})[record[swept]] = record
        shown = Table(title=f"Weighted mean JCT / LP lower bound across the {label} (in "
                            f"brackets: over the best of psrs, tetris, jsq-mw)")
        for column in ("setting", "weights", "algorithm"):
            shown.add_column(column)
        for value in values:
            shown.add_column(f"{value:g}")
        for row, cells in by.items():
            shown.add_row(*row, *[_ratio_cell(cells.get(value)) for value in values])
        tables.append(shown)
    return tables


def _held(record: dict, swept: str) -> str:
    """The setting of a sweep's row: what it holds while `swept` varies."""
    held = record["setting"]
    if swept != "remote_factor" and record["remote_factor"]:
        held += f" rf {record['remote_factor']:g}"
    if record["mode"] == "offline":
        return held + " offline"
    return held + (" online" if swept == "load" else f" load {record['load']:g}")


def _ratio_cell(record: dict | None) -> str:
    if record is None:
        return "-"
    versus = record.get("ratio_to_best_baseline")
    return f"{record['ratio_to_bound']:.2f}" + (f" ({versus:.2f}x)" if versus else "")


def _page(runs: list[dict], bounds: list[dict], tables: tuple[Table, ...]) -> Page:
    """The tables and a JCT CDF per column."""

    def write(path: Path, folder: Path) -> None:
        from inspection.plots import cdf_plot, png_bytes

        console = Console(record=True, width=200, file=io.StringIO())
        for shown in tables:
            console.print(shown)
        images = []
        for bound in bounds:
            column = _column(bound)
            at = [r for r in runs if _column(r) == column]
            figure = cdf_plot(at, lambda record: record["jct_cdf"], 1.0, f"JCT CDF, {column}",
                              "JCT (s, log scale)", log=True)
            if figure is not None:
                data = base64.b64encode(png_bytes(figure)).decode()
                images.append(f'<h2>{column}</h2><img src="data:image/png;base64,{data}">')
        path.write_text("<!doctype html><meta charset='utf-8'><title>megha experiment packing"
                        "</title><h1>Packing and placement: weighted completion time</h1>"
                        f"<pre>{console.export_text()}</pre>{''.join(images)}")

    return write


EXPERIMENTS.register(Packing())
