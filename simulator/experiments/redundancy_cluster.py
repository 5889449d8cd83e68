"""`megha experiment redundancy-cluster`: the SRPT+R paper's study on the federated cluster,
where each LM gives its running tasks copies on its idle nodes (docs/redundancy.md).

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
and its ratio to `none`; the copies' figures) and with `--html` the page of the paper's study
(redundancy_shared.py).
"""


from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from rich.table import Table

from common.errors import InvalidInput
from common.federation import Federation
from common.policies.copies import COPY_POLICIES
from common.speed import SpeedModel
from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import add_workload_arguments, build_workload
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.common import (
    add_shape_options,
    add_values_option,
    at_least,
    listed,
    parse_loads,
    refuse_given,
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
from simulator.run_settings import (
    Overrides,
    RunSettings,
    Timing,
    add_check_argument,
    add_policy_arguments,
    add_timing_arguments,
    workload_options,
)
from simulator.sweep import Run

DEFAULT_POLICIES = "none,srpt+r,fair+r,laps+r"
DEFAULT_LOADS = "0.5,0.8,1.0,1.2"  # light traffic to saturated
DEFAULT_JOBS = 500
DEFAULT_MAX_COPIES = 4
BASELINE = "none"
PAPER_MEAN_SIZE = 40.0  # the paper's mean job size, time units: here a task's mean, seconds
CLUSTER_DEFAULTS = {"nodes": 400, "gms": 2, "lms": 4, "nodes_per_worker": 50, "heartbeat": 1.0}
VARIABILITY = {"two-state": "two-state", "gamma": "gamma", "constant": "none"}  # --speed's
CDF_QUANTILES = np.linspace(0, 1, 101)
SET_BY_THE_STUDY = {  # workload options the study sets for every run, and what to use instead
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


@dataclass(frozen=True)
class Copies:
    """The federation's policies on every run, beside the copy policy it sweeps."""

    speed: str  # --speed: the nodes' speed model
    beta: float
    max_copies: int
    job_policy: str | None
    queue_depth: int | None
    fairness: str | None = None  # --fairness (None: the generated cluster's)

    @property
    def speed_model(self) -> SpeedModel:
        return SpeedModel(kind=self.speed)


@dataclass(frozen=True)
class RedundancyClusterOptions:
    policies: tuple[str, ...]
    loads: tuple[float, ...]
    seeds: tuple[int, ...]
    cluster: Cluster
    copies: Copies
    settings: RunSettings  # the selected jobs, in slot mode, before the pace
    pace: Pace
    logs: bool  # --logs: every run's event log

    @property
    def points(self) -> list[Point]:
        return [Point(policy, load, seed) for load in self.loads for policy in self.policies
                for seed in self.seeds]


class RedundancyCluster:
    name = "redundancy-cluster"
    summary = ("the SRPT+R paper's study on the federated cluster: the LMs' copy policies on "
               "YH1_sub's jobs, 400 slots of varying speed in 4 LMs, at offered loads 0.5 to "
               "1.2")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("redundancy-cluster: the policies, the loads, the "
                                          "cluster (slot mode)")
        add_values_option(group, "copy policies", DEFAULT_POLICIES)
        group.add_argument("--loads", default=DEFAULT_LOADS,
                           help=f"offered loads, the share of the slots the arriving tasks ask "
                                f"for (default {DEFAULT_LOADS})")
        group.add_argument("--seeds", type=int, default=3,
                           help="seeds per point, for confidence intervals (default 3)")
        add_beta_option(group)
        group.add_argument("--max-copies", type=int, default=DEFAULT_MAX_COPIES,
                           help=f"copies of one task, the original included (default "
                                f"{DEFAULT_MAX_COPIES}, the federation file's; 0: no bound)")
        add_speed_option(group)
        group.add_argument("--logs", action="store_true",
                           help="also write every run's event log into --out (about 150 MB a "
                                "run with copies at the default size)")
        add_shape_options(group, CLUSTER_DEFAULTS)
        model = parser.add_argument_group("the model")
        add_timing_arguments(model, processing="none")
        add_policy_arguments(model, ("job_policy", "fairness", "queue_depth"))
        add_check_argument(model)
        add_workload_arguments(parser, config=False,  # it generates its clusters
                               trace_default="the bundled YH1_sub.tr")
        parser.set_defaults(jobs=DEFAULT_JOBS)

    def options(self, args: argparse.Namespace) -> RedundancyClusterOptions:
        refuse_given(args, SET_BY_THE_STUDY)
        if args.duration_scale != 1.0:
            raise InvalidInput("--duration-scale", f"the study scales task durations to a mean "
                                                   f"of {PAPER_MEAN_SIZE:g} s")
        if args.logs and args.no_log:
            raise InvalidInput("--logs", "give --logs or --no-log, not both")
        policies = listed(args.values or DEFAULT_POLICIES, COPY_POLICIES.names(), "--values",
                          "a copy policy")
        loads = parse_loads(args.loads)
        for option, value, least in (("--seeds", args.seeds, 1),
                                     ("--max-copies", args.max_copies, 0)):
            at_least(option, value, least)
        if not 0 < args.beta <= 1:
            raise InvalidInput("--beta", f"must be in (0, 1], got {args.beta}")
        cluster = Cluster(**{key: vars(args)[key] for key in CLUSTER_DEFAULTS})
        copies = Copies(args.speed, args.beta, args.max_copies, args.job_policy,
                        args.queue_depth, args.fairness)
        settings = _settings(args)
        seeds = tuple(range(args.seed, args.seed + args.seeds))
        pace = _pace(settings.workload, _federation(copies, cluster, BASELINE, seeds[0]),
                     cluster)
        return RedundancyClusterOptions(policies, loads, seeds, cluster, copies, settings, pace,
                                        args.logs)

    def describe(self, options: RedundancyClusterOptions) -> str:
        pace = options.pace
        return (f"the first {pace.jobs} jobs ({pace.tasks:,} tasks) of {pace.trace}, task "
                f"durations x {pace.duration_scale:.4g} (mean {pace.mean_task_s:.1f} s -> "
                f"{PAPER_MEAN_SIZE:g} s; at the trace's pace they offer "
                f"{pace.natural_load:.2f} of the slots)\n"
                f"  {options.cluster.describe()}; {options.copies.speed_model.describe()}\n"
                f"  loads {', '.join(f'{load:g}' for load in options.loads)}; policies "
                f"{', '.join(options.policies)}; {len(options.seeds)} seeds")

    def runs(self, options: RedundancyClusterOptions, logs: Path | None) -> list[Run]:
        """Each run's log only with --logs (7 GB for the default sweep)."""
        logs = logs if options.logs else None
        return [Run(point.label, _simulate_point,
                    (options.copies, options.cluster, options.settings, options.pace, point),
                    None if logs is None else logs / point.log_name)
                for point in options.points]

    def run_line(self, report: dict) -> str:
        copies = report.get("redundancy", {}).get("copies_launched", 0)
        return f"mean JCT {report['jct']['overall']['mean']:8.1f} s, {copies:7,} copies"

    def figures(self, options: RedundancyClusterOptions, results: list[dict]) -> list[Report]:
        reports = dict(zip(options.points, results, strict=True))
        runs = [_summary(policy, load, [reports[Point(policy, load, seed)]
                                        for seed in options.seeds])
                for load in options.loads for policy in options.policies]
        pace, copies = options.pace, options.copies
        document = results_document("redundancy-cluster", runs, settings={
            "trace": pace.trace, "jobs": pace.jobs, "tasks": pace.tasks,
            "mean_task_s": pace.mean_task_s, "duration_scale": pace.duration_scale,
            "natural_load": pace.natural_load, "cluster": asdict(options.cluster),
            "speed": copies.speed_model.describe(), "seeds": options.seeds,
            "beta": copies.beta, "max_copies": copies.max_copies})
        sweep = _sweep(options.cluster)
        tables = (mean_table(runs, options.policies, options.loads, sweep), _copies_table(runs))
        return [Report(document, tables,
                       page(runs, options.policies, options.loads, tables, sweep))]


def _settings(args: argparse.Namespace) -> RunSettings:
    """The workload's options: the bundled trace's first `DEFAULT_JOBS` jobs unless given, in
    slot mode."""
    workload = workload_options(args)
    if (workload.trace is None and workload.alibaba is None and workload.poisson is None
            and workload.like is None):
        workload.trace = YH1_SUB
    settings = RunSettings(
        workload, Timing(args.delay, args.calibration), processing=args.processing,
        slots=True, check=not args.no_check)
    settings.check_slots()
    settings.timing.check()
    return settings


def _federation(copies: Copies, cluster: Cluster, policy: str, seed: int) -> Federation:
    federation = shaped_federation(
        cluster.nodes, cluster.gms, cluster.lms, slots=True,
        nodes_per_worker=cluster.nodes_per_worker, heartbeat_interval=cluster.heartbeat,
        seed=seed)
    federation = Overrides(
        job_policy=copies.job_policy, fairness=copies.fairness,
        queue_depth=copies.queue_depth, redundancy=policy,
        variability=VARIABILITY[copies.speed]).apply(federation)
    policies = federation.policies
    redundancy = policies.redundancy.model_copy(update={"beta": copies.beta,
                                                        "max_copies": copies.max_copies})
    return replace(federation, policies=policies.model_copy(update={"redundancy": redundancy}))


def _pace(workload: argparse.Namespace, federation: Federation, cluster: Cluster) -> Pace:
    """The selected jobs' scaling. The offered load is the slots' (task-seconds over slot-
    seconds): `--target-load` measures cpu, and in slot mode a task realized with 500
    millicores still takes a whole 1000-millicore slot, so it would offer half the load."""
    built = build_workload(workload, federation, Path(cluster.describe()), prefix="")
    jobs = built.jobs
    durations = [task.duration for job in jobs for task in job.tasks]
    span = jobs[-1].arrival - jobs[0].arrival
    if span <= 0:
        raise InvalidInput("--jobs", "the study needs jobs arriving over a span of time")
    mean = sum(durations) / len(durations)
    scale = PAPER_MEAN_SIZE / mean
    return Pace(jobs=len(jobs), tasks=len(durations), trace=built.name,
                mean_task_s=mean, duration_scale=scale,
                natural_load=sum(durations) * scale / (span * cluster.nodes))


def _simulate_point(copies: Copies, cluster: Cluster, settings: RunSettings,
                    pace: Pace, point: Point, log: Path | None = None) -> dict:
    """One run, wherever the sweep sends it (which silences it when not in this process)."""
    federation = _federation(copies, cluster, point.policy, point.seed)
    settings = settings.with_workload(seed=point.seed, duration_scale=pace.duration_scale,
                                      time_scale=pace.time_scale(point.load))
    where = f"{cluster.describe()}, copies {point.policy}, load {point.load:g}"
    return simulate.simulate_once(settings, "megha", federation, where, log, point.label)


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
    figures = {"count": sum(f["count"] for f in overall), "mean": float(np.mean(means)),
               "ci95": half_width(means)}
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


EXPERIMENTS.register(RedundancyCluster())
