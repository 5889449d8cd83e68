"""`megha experiment packing`: the packing-and-placement paper's study (its section 7).

Parallel-task jobs of a trace packed onto `--machines` machines (default 10) with two resources,
for the least weighted completion time (simulator/packing_workload.py says how the instances
are built from the trace and what is synthesized). Two placement settings:

- `single`: every task has one machine (the paper's original trace, where each task has its
  machine): the preemptive algorithms, lp-single (ordering LP), psrs and tetris-p, and the
  non-preemptive wspt, fifo and jsq-mw for reference;
- `placement`: every task has `--local` machines (default 3) and runs `--remote-factor` times
  slower elsewhere (default 1.5): the non-preemptive lp-np (interval LP without migration),
  tetris-np, jsq-mw, wspt and fifo, and the preemptive, migrating lp-migrate (interval LP
  with migration), measured against the bound of its own class (the LP with migration).

Each setting runs offline (the first `--offline-jobs` jobs, default 25, all at time 0: the
backlog of a saturated cluster) and online (the first `--jobs` jobs, default 150, arriving as
in the trace, scaled to each offered load of `--loads`, default 1), under the three weight
schemes of `--weights` (equal, random, priority). Every run reports its weighted mean JCT
(completion minus release) beside the LP lower bound of its instance: the ordering LP in the
single setting, the interval LP without migration in the placement setting (the bound of every
non-migrating schedule); each run's ratio to it, and to the best baseline.

The paper's claim, in direction: its LP-ordered algorithms beat PSRS, Tetris and JSQ-MW,
offline and online, for all three weightings, and stay within a small factor of the bound.

Writes `results.json` (the experiments' schema: `runs[].name`, `jct`, `allocation`, `counts`,
plus `weighted_jct`, `lp_bound`, `ratio_to_bound`, `ratio_to_best_baseline` and a JCT CDF),
`table.txt`, and with `--html` a page with the tables and the CDFs.

A point (setting, mode, load, weights) is one run of the sweep (simulator/sweep.py, a pool of
`--workers` processes or `--dask`'s cluster): its instance, its LP bound and all its
algorithms together, so that the bound and lp-np's order stay one solve of the whole
instance's LP (lp.py keeps it, in the process that solved it).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from common.errors import InvalidInput
from loadgen.trace import TraceJob, read_trace
from simulator.experiments.redundancy import write_tables
from simulator.experiments.redundancy_cluster import parse_loads
from simulator.models.packing import lp
from simulator.models.packing.model import Instance
from simulator.models.packing.schedulers import PACKING_POLICIES, SETTINGS, PackingOptions
from simulator.packing import PackingRun, simulate
from simulator.packing_workload import WEIGHTS, build_instance
from simulator.sweep import Run, progress_printer, run_sweep

DEFAULT_MACHINES = 10
DEFAULT_OFFLINE_JOBS = 25  # the placement LP of 40 jobs takes 20-90 s to solve here
DEFAULT_ONLINE_JOBS = 150
DEFAULT_LOADS = "1"
MAX_TASKS = 50
ALGORITHMS = {
    "single": ("lp-single", "psrs", "tetris-p", "wspt", "fifo", "jsq-mw"),
    "placement": ("lp-np", "lp-migrate", "tetris-np", "jsq-mw", "wspt", "fifo"),
}
OURS = {"lp-single", "lp-np", "lp-migrate"}
# Schedules that migrate are bounded by the LP with migration, not by the setting's bound (the
# LP without migration bounds only schedules that keep each task on one machine).
MIGRATING = {"lp-migrate"}
PAPER_BASELINES = {"psrs", "tetris-p", "tetris-np", "jsq-mw"}


@dataclass(frozen=True)
class Study:
    """What every point of the study shares."""

    machines: int
    offline_jobs: int
    online_jobs: int
    seed: int
    local: int
    remote_factor: float
    algorithms: str | None  # --values: None for each setting's own
    options: PackingOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("packing experiment")
    group.add_argument("--settings", default=",".join(SETTINGS),
                       help="packing: placement settings, single and/or placement (default both)")
    group.add_argument("--weights", default=",".join(WEIGHTS),
                       help="packing: weight schemes (default equal,random,priority)")
    group.add_argument("--modes", default="offline,online",
                       help="packing: offline (all jobs at 0) and/or online (default both)")
    group.add_argument("--offline-jobs", type=int, default=DEFAULT_OFFLINE_JOBS,
                       help=f"packing: jobs of an offline run (default {DEFAULT_OFFLINE_JOBS})")
    group.add_argument("--local", type=int, default=3,
                       help="packing: a task's local machines in the placement setting "
                            "(default 3)")
    group.add_argument("--resolve-first", type=float, default=None,
                       help="packing, online: seconds to the LP algorithms' first re-solve "
                            "(default 10 x the mean inter-arrival time, the paper's)")
    group.add_argument("--resolve-growth", type=float, default=1.2,
                       help="packing, online: each re-solve interval this much longer than the "
                            "last (default 1.2; 1: a fixed interval)")
    group.add_argument("--remote-factor", type=float, default=1.5,
                       help="packing: how much slower a task runs off its local machines "
                            "(default 1.5)")


def _listed(text: str, known: tuple[str, ...], option: str) -> list[str]:
    values = [value.strip() for value in text.split(",") if value.strip()]
    for value in values:
        if value not in known:
            raise InvalidInput(option, f"unknown value {value!r} (known: {', '.join(known)})")
    if not values:
        raise InvalidInput(option, "nothing listed")
    return values


def _algorithms(values: str | None, setting: str) -> list[str]:
    if values is None:
        return list(ALGORITHMS[setting])
    chosen = _listed(values, PACKING_POLICIES.names(), "--values")
    return [name for name in chosen if setting in PACKING_POLICIES.get(name).settings]


def _bound(instance: Instance, setting: str) -> lp.LPSolution:
    if setting == "single":
        return lp.ordering_lp(instance)
    return lp.interval_lp(instance, migration=False)


def _run_record(instance: Instance, run: PackingRun, bound: float, point: dict) -> dict:
    jcts = np.array([run.completion[j] - instance.jobs[j].release for j in run.completion])
    waits = np.array([run.first_start[j] - instance.jobs[j].release for j in run.first_start])
    quantiles = np.linspace(0, 1, 101)
    mode = point["mode"] if point["mode"] == "offline" else f"load {point['load']:g}"
    return point | {
        "name": f"{run.algorithm} {point['setting']} {mode} {point['weights']}",
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


def _points(args: argparse.Namespace) -> list[dict]:
    settings = _listed(args.settings, SETTINGS, "--settings")
    weights = _listed(args.weights, WEIGHTS, "--weights")
    modes = _listed(args.modes, ("offline", "online"), "--modes")
    loads = parse_loads(args.loads or DEFAULT_LOADS)
    points = []
    for setting in settings:
        for mode in modes:
            for load in ([None] if mode == "offline" else loads):
                for scheme in weights:
                    points.append({"setting": setting, "mode": mode, "load": load,
                                   "weights": scheme})
    return points


def run(args: argparse.Namespace) -> int:
    if args.preset == "federated":
        from simulator.experiments import packing_cluster

        return packing_cluster.run(args)
    machines = DEFAULT_MACHINES if args.machines is None else args.machines
    online_jobs = args.jobs or DEFAULT_ONLINE_JOBS
    for option, value in (("--offline-jobs", args.offline_jobs), ("--jobs", online_jobs),
                          ("--machines", machines)):
        if value < 1:
            raise InvalidInput(option, f"must be at least 1, got {value}")
    if args.resolve_growth < 1 or (args.resolve_first is not None and args.resolve_first <= 0):
        raise InvalidInput("--resolve-growth", "the re-solve intervals must be > 0 s and grow "
                                               "by a factor >= 1")
    points = _points(args)
    if args.values is not None:  # refused here, before any run starts
        _listed(args.values, PACKING_POLICIES.names(), "--values")
    from simulator.experiments import BUNDLED_TRACE  # the package imports this module

    trace_path = args.trace or BUNDLED_TRACE
    trace = read_trace(trace_path).jobs
    out = args.out or Path("experiments") / "packing"
    out.mkdir(parents=True, exist_ok=True)
    print(f"packing: {machines} machines (cpu and memory 1 each), jobs of {trace_path} with at "
          f"most {MAX_TASKS} tasks; offline {args.offline_jobs} jobs at 0, online "
          f"{online_jobs} jobs; {len(points)} settings", flush=True)
    started = time.perf_counter()
    study = Study(machines=machines, offline_jobs=args.offline_jobs, online_jobs=online_jobs,
                  seed=args.seed, local=args.local, remote_factor=args.remote_factor,
                  algorithms=args.values,
                  options=PackingOptions(resolve_first=args.resolve_first,
                                         resolve_growth=args.resolve_growth))
    solved = run_sweep([Run(_column(point), _solve_point, (trace, study, point))
                        for point in points],
                       workers=args.workers, dask=args.dask,
                       on_done=progress_printer(_point_line))
    bounds = [bound for bound, _ in solved]
    runs = [record for _, here in solved for record in here]
    results = {"experiment": "packing", "machines": machines, "offline_jobs": args.offline_jobs,
               "online_jobs": online_jobs, "local": args.local,
               "remote_factor": args.remote_factor, "trace": str(trace_path),
               "seed": args.seed, "bounds": bounds, "runs": runs}
    tables = [ratio_table(runs, bounds)]
    write_tables(out, results, tables)
    if args.html is not None:
        _write_html(args.html, runs, bounds, tables)
        print(f"report in {args.html}")
    print(f"results in {out}/ (results.json, table.txt); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def _solve_point(trace: list[TraceJob], study: Study, point: dict) -> tuple[dict, list[dict]]:
    """One point, wherever the sweep sends it: its instance's LP bound (with the LP's
    figures) and a record for each algorithm, which it prints as it goes."""
    online = point["mode"] == "online"
    instance = build_instance(
        trace, jobs=study.online_jobs if online else study.offline_jobs, max_tasks=MAX_TASKS,
        machines=study.machines, setting=point["setting"], weights=point["weights"],
        seed=study.seed, load=point["load"], local=study.local,
        remote_factor=study.remote_factor)
    solution = _bound(instance, point["setting"])
    bound = lp.weighted_mean_bound(instance, solution)
    mode = "offline" if not online else f"online at load {point['load']:g}"
    print(f"  {point['setting']} {mode}, {point['weights']} weights: "
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
        print(f"    {algorithm:10} weighted JCT {result.weighted_jct:9.1f} s  "
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


def _point_line(solved: tuple[dict, list[dict]]) -> str:
    bound, here = solved
    line = f"{bound['tasks']} tasks, LP bound {bound['lp_bound']:.1f} s"
    if here:
        best = min(here, key=lambda record: record["ratio_to_bound"])
        line += f", best {best['algorithm']} at {best['ratio_to_bound']:.2f} x the bound"
    return line


def _column(point: dict) -> str:
    mode = "offline" if point["mode"] == "offline" else f"load {point['load']:g}"
    return f"{point['setting']} {mode} {point['weights']}"


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


def _write_html(path: Path, runs: list[dict], bounds: list[dict], tables: list[Table]) -> None:
    import base64
    import io

    from rich.console import Console

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
