"""`megha experiment redundancy --preset federated`: the SRPT+R paper's study on the federated
cluster, where each LM gives its running tasks copies on its idle nodes (docs/redundancy.md).

- Workload: the first `--jobs` jobs of the bundled YH1_sub trace (default 500, 24,929 tasks:
  the 600 first planned took over the 5 minutes the default sweep may take on 2 cores;
  `--trace` and the other workload options of `megha simulate` change it), jobs whose widths,
  relative task durations and arrival pattern stay the trace's. Task durations are scaled so
  that their mean is the paper's mean job size, 40 time units, read as seconds: the machines'
  speed model counts its available and unavailable periods in the same units, so a task is to
  those periods as the paper's jobs were. Arrivals are scaled to each offered load of
  `--loads` (default 0.5, 0.8, 1.0, 1.2: light traffic to saturated).
- Cluster: slot mode (a node runs one task at a time, as the paper's machines run one job),
  `--nodes` 400 in `--lms` 4 LMs (each LM the paper's 100 machines) under `--gms` 2, 50 nodes
  per worker, heartbeat 1 s, node speeds from `--speed` (default two-state, the paper's).
- Sweep: the copy policies of `--values` (default none, srpt+r, fair+r, laps+r; `--beta` for
  laps+r, `--max-copies` 4), each at every load with the same `--seeds` seeds (default 3); a
  seed is the federation's (so the nodes' speeds) and the simulation's.

Runs go to a pool of `--workers` processes, or to `--dask`'s cluster (simulator/sweep.py).
With `--logs` each writes its event log to `OUT/<policy>-load<L>-seed<S>.log` (about 150 MB
a run with copies at the default size, 7 GB for the sweep: without it none is written, and
the figures come from the runs' analyses as they go). Per policy and load, over the seeds:
the mean JCT (the mean of the seeds' means) with its 95% confidence interval, p50 and p99
over all jobs, the JCT CDF, and the copies' figures (copies launched, the share of races a
copy won, the work the losers wasted over the useful work, checkpoints per task with copies).
Writes `results.json` (the experiments' schema), `table.txt` (mean JCT per policy and load,
and its ratio to `none`; the copies' figures) and with `--html` the page of `redundancy.py`.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from rich.table import Table

from common.errors import InvalidInput
from common.federation import Federation
from common.policies.redundancy.copies import COPY_POLICIES
from common.speed import SpeedModel
from loadgen.sources import build_workload
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.redundancy import (
    DEFAULT_HORIZON,
    DEFAULT_MACHINES,
    DEFAULT_RATES,
    Sweep,
    mean_table,
    write_study,
)
from simulator.sweep import Run, progress_printer, run_sweep

DEFAULT_POLICIES = "none,srpt+r,fair+r,laps+r"
DEFAULT_JOBS = 500
BASELINE = "none"
PAPER_MEAN_SIZE = 40.0  # the paper's mean job size, time units: here a task's mean, seconds
CLUSTER_DEFAULTS = {"nodes": 400, "gms": 2, "lms": 4, "nodes_per_worker": 50, "heartbeat": 1.0}
VARIABILITY = {"two-state": "two-state", "gamma": "gamma", "constant": "none"}  # --speed's
CDF_QUANTILES = np.linspace(0, 1, 101)
BUNDLED_TRACE = Path(__file__).resolve().parents[2] / "deploy" / "workloads" / "YH1_sub.tr"
DEFAULT_OUT = Path("experiments") / "redundancy-federated"
HELP = (f"the copy policies of --values (default {DEFAULT_POLICIES}) at each of --loads, on the "
        f"first --jobs ({DEFAULT_JOBS}) jobs of YH1_sub and --nodes ({CLUSTER_DEFAULTS['nodes']})"
        f" slots in --lms ({CLUSTER_DEFAULTS['lms']}) LMs under --gms ({CLUSTER_DEFAULTS['gms']})"
        f", {CLUSTER_DEFAULTS['nodes_per_worker']} nodes per worker, heartbeat "
        f"{CLUSTER_DEFAULTS['heartbeat']:g} s; --out {DEFAULT_OUT}")
SET_BY_THE_PRESET = {  # options the preset sets for every run, and what to use instead
    "config": "it generates its clusters: use --nodes, --gms, --lms",
    "log": "with --logs it writes one event log per run into --out",
    "results": "it writes results.json into --out",
    "variability": "node speeds come from --speed",
    "redundancy": "it sweeps the copy policies of --values",
    "target_load": "it sweeps the offered loads of --loads",
    "time_scale": "it scales arrivals to the offered loads of --loads",
    "sample": "it takes the first --jobs jobs",
}


@dataclass(frozen=True)
class Cluster:
    """The shape every run's federation has."""

    nodes: int
    gms: int
    lms: int
    nodes_per_worker: int
    heartbeat: float

    def describe(self) -> str:
        return (f"{self.nodes} slots in {self.lms} LMs under {self.gms} GMs, "
                f"{self.nodes_per_worker} nodes per worker, heartbeat {self.heartbeat:g} s")


@dataclass(frozen=True)
class Point:
    """One run: a copy policy at an offered load with a seed."""

    policy: str
    load: float
    seed: int

    @property
    def label(self) -> str:
        return f"{self.policy} load={self.load:g} seed={self.seed}"

    @property
    def log_name(self) -> str:
        return f"{self.policy}-load{self.load:g}-seed{self.seed}.log"


@dataclass(frozen=True)
class Pace:
    """How the selected jobs are scaled: their task durations, to the paper's mean size, and
    their arrivals, to an offered load."""

    jobs: int
    tasks: int
    trace: str
    mean_task_s: float  # as the trace has it
    duration_scale: float
    natural_load: float  # the slots' load the scaled tasks offer at the trace's own pace

    def time_scale(self, load: float) -> float:
        return self.natural_load / load


def run(args: argparse.Namespace) -> int:
    _refuse_preset_options(args)
    policies, loads = _policies(args.values), parse_loads(args.loads)
    _check_numbers(args)
    cluster = _cluster(args)
    workload = _workload(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    pace = _pace(workload, _federation(args, cluster, BASELINE, seeds[0]), cluster)
    out = args.out or DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    speed = SpeedModel(kind=args.speed)
    print(f"redundancy, federated: the first {pace.jobs} jobs ({pace.tasks:,} tasks) of "
          f"{pace.trace}, task durations x {pace.duration_scale:.4g} (mean "
          f"{pace.mean_task_s:.1f} s -> {PAPER_MEAN_SIZE:g} s; at the trace's pace they offer "
          f"{pace.natural_load:.2f} of the slots)\n"
          f"  {cluster.describe()}; {speed.describe()}\n"
          f"  loads {', '.join(f'{load:g}' for load in loads)}; policies {', '.join(policies)}; "
          f"{args.seeds} seeds", flush=True)
    started = time.perf_counter()
    points = [Point(policy, load, seed) for load in loads for policy in policies
              for seed in seeds]
    reports = _run_points(args, workload, cluster, pace, points, out if args.logs else None)
    runs = [_summary(policy, load, [reports[Point(policy, load, seed)] for seed in seeds])
            for load in loads for policy in policies]
    results = {"experiment": "redundancy", "preset": "federated", "trace": pace.trace,
               "jobs": pace.jobs, "tasks": pace.tasks, "mean_task_s": pace.mean_task_s,
               "duration_scale": pace.duration_scale, "natural_load": pace.natural_load,
               "cluster": asdict(cluster), "speed": speed.describe(), "seeds": seeds,
               "beta": args.beta, "max_copies": args.max_copies, "runs": runs}
    sweep = _sweep(cluster)
    write_study(out, results, [mean_table(runs, policies, loads, sweep), _copies_table(runs)],
                sweep, policies, loads, args.html)
    print(f"results in {out}/ (results.json, table.txt"
          f"{', one event log per run' if args.logs else ''}); "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def _refuse_preset_options(args: argparse.Namespace) -> None:
    for option, why in SET_BY_THE_PRESET.items():
        if getattr(args, option) is not None:
            raise InvalidInput(f"--{option.replace('_', '-')}", f"the federated preset sets "
                                                                f"it: {why}")
    if args.duration_scale != 1.0:
        raise InvalidInput("--duration-scale", f"the federated preset scales task durations "
                                               f"to a mean of {PAPER_MEAN_SIZE:g} s")
    if args.scheduler != "megha":
        raise InvalidInput("--scheduler", "the federated preset runs megha's LMs, which make "
                                          "the copies")
    for option, value, paper in (("--machines", args.machines, DEFAULT_MACHINES),
                                 ("--rates", args.rates, DEFAULT_RATES),
                                 ("--horizon", args.horizon, DEFAULT_HORIZON)):
        if value != paper:
            raise InvalidInput(option, "an option of the paper preset: the federated one "
                                       "takes --nodes, --loads and --jobs")
    simulate.check_slot_options(_with(args, slots=True))


def _with(args: argparse.Namespace, **changes) -> argparse.Namespace:
    """A copy of `args` with `changes`."""
    return argparse.Namespace(**(vars(args) | changes))


def _policies(values: str | None) -> list[str]:
    policies = (values or DEFAULT_POLICIES).split(",")
    for name in policies:
        if name not in COPY_POLICIES.names():
            raise InvalidInput("--values", f"{name!r} is not a copy policy (known: "
                                           f"{', '.join(COPY_POLICIES.names())})")
    return policies


def parse_loads(text: str) -> list[float]:
    try:
        loads = [float(value) for value in text.split(",")]
    except ValueError:
        raise InvalidInput("--loads", f"expected numbers separated by commas, got "
                                      f"{text!r}") from None
    for load in loads:
        if not (math.isfinite(load) and load > 0):
            raise InvalidInput("--loads", f"an offered load must be a positive number, got "
                                          f"{load:g}")
    return loads


def _check_numbers(args: argparse.Namespace) -> None:
    for option, value, least in (("--seeds", args.seeds, 1), ("--max-copies", args.max_copies, 0)):
        if value is not None and value < least:
            raise InvalidInput(option, f"must be at least {least}, got {value}")
    if not 0 < args.beta <= 1:
        raise InvalidInput("--beta", f"must be in (0, 1], got {args.beta}")


def _cluster(args: argparse.Namespace) -> Cluster:
    """The preset's cluster, with what the command line gives instead."""
    given = {"nodes": args.nodes, "gms": args.gms, "lms": args.lms, "heartbeat": args.heartbeat,
             "nodes_per_worker": args.nodes_per_worker}
    return Cluster(**{key: CLUSTER_DEFAULTS[key] if value is None else value
                      for key, value in given.items()})


def _workload(args: argparse.Namespace) -> argparse.Namespace:
    """The workload's options: the bundled trace's first `DEFAULT_JOBS` jobs unless given."""
    given_source = any(getattr(args, source, None) is not None
                       for source in ("trace", "alibaba", "poisson", "like"))
    return _with(args, slots=True, trace=args.trace if given_source else BUNDLED_TRACE,
                 jobs=args.jobs or DEFAULT_JOBS)


def _federation(args: argparse.Namespace, cluster: Cluster, policy: str,
                seed: int) -> Federation:
    federation = shaped_federation(
        cluster.nodes, cluster.gms, cluster.lms, slots=True,
        nodes_per_worker=cluster.nodes_per_worker, heartbeat_interval=cluster.heartbeat,
        seed=seed)
    federation = simulate.with_overrides(federation, argparse.Namespace(
        job_policy=args.job_policy, queue_depth=args.queue_depth, redundancy=policy,
        variability=VARIABILITY[args.speed]))
    policies = federation.policies
    copies = policies.redundancy.model_copy(update={"beta": args.beta,
                                                    "max_copies": args.max_copies})
    return replace(federation, policies=policies.model_copy(update={"redundancy": copies}))


def _pace(workload: argparse.Namespace, federation: Federation, cluster: Cluster) -> Pace:
    """The selected jobs' scaling. The offered load is the slots' (task-seconds over slot-
    seconds): `--target-load` measures cpu, and in slot mode a task realized with 500
    millicores still takes a whole 1000-millicore slot, so it would offer half the load."""
    built = build_workload(workload, federation, Path(cluster.describe()), prefix="")
    jobs = built.jobs
    durations = [task.duration for job in jobs for task in job.tasks]
    span = jobs[-1].arrival - jobs[0].arrival
    if span <= 0:
        raise InvalidInput("--jobs", "the preset needs jobs arriving over a span of time")
    mean = sum(durations) / len(durations)
    scale = PAPER_MEAN_SIZE / mean
    return Pace(jobs=len(jobs), tasks=len(durations), trace=built.name,
                mean_task_s=mean, duration_scale=scale,
                natural_load=sum(durations) * scale / (span * cluster.nodes))


def _run_points(args: argparse.Namespace, workload: argparse.Namespace, cluster: Cluster,
                pace: Pace, points: list[Point], logs: Path | None) -> dict[Point, dict]:
    """Every run's report, from the sweep (a pool of `--workers` processes or `--dask`'s
    cluster); a line for each as it ends."""
    runs = [Run(point.label, _simulate_point, (args, workload, cluster, pace, point),
                      None if logs is None else logs / point.log_name) for point in points]
    reports = run_sweep(runs, workers=args.workers, dask=args.dask,
                              on_done=progress_printer(_point_line))
    return dict(zip(points, reports, strict=True))


def _point_line(report: dict) -> str:
    copies = report.get("redundancy", {}).get("copies_launched", 0)
    return f"mean JCT {report['jct']['overall']['mean']:8.1f} s, {copies:7,} copies"


def _simulate_point(args: argparse.Namespace, workload: argparse.Namespace, cluster: Cluster,
                    pace: Pace, point: Point, log: Path | None = None) -> dict:
    """One run, wherever the sweep sends it (which silences it when not in this process)."""
    federation = _federation(args, cluster, point.policy, point.seed)
    run_args = _with(workload, seed=point.seed, duration_scale=pace.duration_scale,
                     time_scale=pace.time_scale(point.load))
    where = f"{cluster.describe()}, copies {point.policy}, load {point.load:g}"
    return simulate.simulate_once(run_args, "megha", federation, where, log, point.label)


def _summary(policy: str, load: float, reports: list[dict]) -> dict:
    """One policy at one load over its seeds: the experiments' run schema."""
    return {
        "name": f"{policy} load={load:g}", "policy": policy, "load": load,
        "jct": _jct(reports),
        "allocation": reports[0]["allocation"],  # the first seed's: its CDF is a run's
        "counts": _summed([report["counts"] for report in reports]),
        "seed_means": [report["jct"]["overall"]["mean"] for report in reports],
        "redundancy": _copies(reports),
        "wall_s": [report["wall_s"] for report in reports],
    }


def _jct(reports: list[dict]) -> dict:
    """The mean of the seeds' means and its 95% CI; p50, p99 and the CDF over all jobs of all
    seeds, from the reports' JCT CDFs (every job's JCT when a run has few, else evenly
    spaced quantiles: as every seed runs the same jobs, each seed's points weigh the same),
    or the seeds' mean p50 and p99 when a report has no CDF."""
    overall = [report["jct"]["overall"] for report in reports]
    means = [figures["mean"] for figures in overall]
    spread = float(np.std(means, ddof=1)) if len(means) > 1 else 0.0
    figures = {"count": sum(f["count"] for f in overall), "mean": float(np.mean(means)),
               "ci95": 1.96 * spread / math.sqrt(len(means))}
    cdfs = [report["jct"].get("cdf") for report in reports]
    if not all(cdfs):
        return {"overall": figures | {key: float(np.mean([f[key] for f in overall]))
                                      for key in ("p50", "p99")}}
    pooled = np.concatenate([cdf["x"] for cdf in cdfs])
    p50, p99 = np.quantile(pooled, [0.5, 0.99])
    return {"overall": figures | {"p50": float(p50), "p99": float(p99)},
            "cdf": {"x": np.quantile(pooled, CDF_QUANTILES).tolist(),
                    "y": CDF_QUANTILES.tolist()}}


def _summed(counts: list[dict]) -> dict:
    """The seeds' counts added up, key by key (nested tables too)."""
    total: dict = {}
    for table in counts:
        for key, value in table.items():
            if isinstance(value, dict):
                total[key] = _summed([total.get(key, {}), value])
            else:
                total[key] = total.get(key, 0) + value
    return total


def _copies(reports: list[dict]) -> dict:
    """The copies' figures over the seeds, from the reports' `redundancy` sections (none
    without copies, and a key the section lacks counts as nothing)."""
    sections = [report.get("redundancy", {}) for report in reports]

    def total(key: str) -> float:
        return sum(section.get(key) or 0 for section in sections)

    checkpoints = [section.get("checkpoints_per_task") or {} for section in sections]
    raced = sum(figures.get("count", 0) for figures in checkpoints)
    return {
        "copies_launched": total("copies_launched"),
        "copies_per_seed": total("copies_launched") / len(reports),
        "tasks_with_copies": total("tasks_with_copies"),
        "wins_by_copy": total("wins_by_copy"),
        "wins_by_copy_share": total("wins_by_copy") / total("tasks_won")
        if total("tasks_won") else None,
        "wasted_work_share": total("wasted_work") / total("useful_work")
        if total("useful_work") else None,
        "checkpoints_per_task": sum(f.get("mean", 0) * f.get("count", 0) for f in checkpoints)
        / raced if raced else None,
    }


def _copies_table(runs: list[dict]) -> Table:
    shown = Table(title="Copies (over the seeds): launched per seed, races a copy won, work "
                        "the losers wasted / useful work, checkpoints per task with copies")
    for heading in ("policy", "load", "copies / seed", "won by a copy", "wasted / useful",
                    "checkpoints / task"):
        shown.add_column(heading)
    for run in runs:
        copies = run["redundancy"]
        if not copies["copies_launched"]:
            continue
        shown.add_row(run["policy"], f"{run['load']:g}", f"{copies['copies_per_seed']:,.0f}",
                      _share(copies["wins_by_copy_share"]), _share(copies["wasted_work_share"]),
                      "-" if copies["checkpoints_per_task"] is None
                      else f"{copies['checkpoints_per_task']:.1f}")
    return shown


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _sweep(cluster: Cluster) -> Sweep:
    return Sweep(field="load", heading="load {value:g}",
                 axis="offered load (share of the slots the arriving tasks ask for)",
                 measure="JCT", cdf=lambda run: run["jct"].get("cdf"), baseline=BASELINE,
                 cluster=f"{cluster.nodes} slots of varying speed in {cluster.lms} LMs",
                 title="Redundancy in the federated cluster")
