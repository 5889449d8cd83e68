"""`megha experiment slearn`: the SLearn paper's comparison of job-size predictors.

Every predictor runs as the GMs' job policy on the same cluster and workload; they share the
priority-queue ladder (common/policies/jobs/), so they differ only in how they estimate a
job's size. The paper's headline, on its production traces: SLearn's mean JCT is 1.28x
better than 3Sigma's, 1.42x than Point-Est's, 1.91x than LAS's and 3.29x than FIFO's, and the
Oracle's is 0.79 of SLearn's.

The two default workloads, both at load 1 (the paper's traces average a load close to 1,
with bursts above it), in slot mode (one task, one slot) on 500 nodes, 2 GMs and 5 LMs:

- `drifting`: 1,250 Poisson jobs (the paper extracts 1,250 jobs per trace) of recurring
  families whose runtimes drift (`megha synth --families`): 60 families, 80% of jobs runs of
  a family and 20% first-time jobs, widths from 1 to 200 tasks, median task duration 20 s
  with a heavy tail (log-normal, sigma 1.5), task-wise CoV 0.3, job-wise 0.2, half the
  families changing their mean by up to 4x once. This is the regime the paper describes for
  history-based predictors: recurring jobs whose behaviour changes, and new jobs.
- `yh1`: the first 600 jobs of the project's YH1_sub trace (Yahoo, 29,570 tasks): no job
  names, so the history predictors fall back on user queue and width.

`--count` changes the size of `drifting`, `--jobs` that of `yh1`, `--target-load` both. A
workload option (`--trace`, `--poisson`, `--alibaba`) replaces both with that one.
`--values` lists the predictors; the results of each workload go to `--out/WORKLOAD/`
(an event log per predictor, results.json in the shared schema, table.txt) and the
side-by-side table gives each predictor's mean and p50 JCT as a ratio to SLearn's.

The runs of both workloads are one sweep (simulator/sweep.py): a pool of `--workers`
processes or `--dask`'s cluster runs them, a line for each as it ends; the tables follow.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from common.policies.job import JOB_POLICIES
from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import add_workload_arguments
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.common import (
    NODES_PER_WORKER,
    add_shape_options,
    add_values_option,
    listed,
    simulated_run_line,
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
    workload_options,
)
from simulator.sweep import Run

PREDICTORS = "slearn,3sigma,3sigma-tl,point-est,las,fifo,oracle"
PAPER_RATIO = {"3sigma": 1.28, "point-est": 1.42, "las": 1.91, "fifo": 3.29, "oracle": 0.79}
WORKLOADS = {
    "drifting": {"poisson": 1.0, "count": 1250, "families": 60, "recurring_share": 0.8,
                 "width": "choice:1,1,2,3,5,10,20,50,100,200",
                 "duration": "lognormal:20,1.5", "task_cov": 0.3, "job_cov": 0.2,
                 "drift_share": 0.5, "drift_factor": 4.0, "target_load": 1.0},
    "yh1": {"trace": YH1_SUB, "jobs": 600, "target_load": 1.0},
}


@dataclass(frozen=True)
class Cluster:
    """The cluster every predictor runs on."""

    nodes: int
    gms: int
    lms: int
    heartbeat: float
    nodes_per_worker: int
    variability: str | None
    fairness: str | None = None  # --fairness (None: the generated cluster's)


@dataclass(frozen=True)
class SlearnOptions:
    predictors: tuple[str, ...]
    scheduler: str  # megha or centralized
    cluster: Cluster
    workloads: dict[str, RunSettings]  # by name: each its own results folder


class Slearn:
    name = "slearn"
    summary = ("the SLearn paper's study: every job-size predictor as the GMs' job policy, on "
               "a drifting synthetic workload and on YH1_sub, at load 1")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("slearn: the predictors and the cluster (slot mode)")
        add_values_option(group, "job policies", PREDICTORS)
        group.add_argument("--scheduler", choices=("megha", "centralized"), default="megha",
                           help="megha (default) or centralized (one GM, one LM)")
        add_shape_options(group, {"nodes": 500, "gms": 2, "lms": 5, "heartbeat": 10.0,
                                  "nodes_per_worker": NODES_PER_WORKER})
        model = parser.add_argument_group("the model")
        add_timing_arguments(model, processing="none")
        add_policy_arguments(model, ("fairness", "variability"))
        add_check_argument(model)
        add_workload_arguments(parser, config=False)  # it generates its cluster

    def options(self, args: argparse.Namespace) -> SlearnOptions:
        centralized = args.scheduler == "centralized"
        cluster = Cluster(args.nodes, 1 if centralized else args.gms,
                          1 if centralized else args.lms, args.heartbeat, args.nodes_per_worker,
                          args.variability, args.fairness)
        settings = RunSettings(
            workload_options(args), Timing(args.delay, args.calibration),
            processing=args.processing, slots=True, check=not args.no_check)
        settings.timing.check()
        workloads = _workloads(settings)
        for workload in workloads.values():
            workload.check_slots()
        return SlearnOptions(listed(args.values or PREDICTORS, JOB_POLICIES.names(),
                                    "--values", "a job policy"),
                             args.scheduler, cluster, workloads)

    def describe(self, options: SlearnOptions) -> str:
        cluster = options.cluster
        settings = next(iter(options.workloads.values()))
        variability = f", variability {cluster.variability}" if cluster.variability else ""
        return (f"job policies {', '.join(options.predictors)}; {options.scheduler} on "
                f"{cluster.nodes} slots, {cluster.gms} GMs, {cluster.lms} LMs, heartbeat "
                f"{cluster.heartbeat:g} s{variability}; workloads "
                f"{', '.join(options.workloads)}; {settings.timing.describe()}, processing "
                f"{settings.processing}")

    def runs(self, options: SlearnOptions, logs: Path | None) -> list[Run]:
        runs = []
        for workload, settings in options.workloads.items():
            if logs is not None:
                (logs / workload).mkdir(parents=True, exist_ok=True)
            runs += [Run(f"{workload}/{predictor}", simulate_predictor,
                         (settings, options.scheduler, options.cluster, predictor),
                         None if logs is None else logs / workload / f"{predictor}.log")
                     for predictor in options.predictors]
        return runs

    def run_line(self, result: dict) -> str:
        return simulated_run_line(result)

    def figures(self, options: SlearnOptions, results: list[dict]) -> list[Report]:
        """A folder per workload, and the headline table."""
        per_workload = len(options.predictors)
        tables = {}
        for index, workload in enumerate(options.workloads):
            here = results[index * per_workload:(index + 1) * per_workload]
            tables[workload] = [result | {"name": predictor, "workload": workload}
                                for predictor, result in zip(options.predictors, here,
                                                             strict=True)]
        reports = []
        for workload, runs in tables.items():
            document = results_document("slearn", runs, comparison=True)
            reports.append(Report(document, page=inspection_page(document), folder=workload,
                                  notes=(f"\n{workload}:",)))
        return [*reports, Report(None, (headline(tables),))]


def _workloads(settings: RunSettings) -> dict[str, RunSettings]:
    """The workload of the options if they name a source, else both of the study's."""
    given = settings.workload
    if given.trace is not None or given.poisson is not None or given.alibaba is not None:
        return {"workload": settings}
    made = {}
    for name, study in WORKLOADS.items():
        # --count sizes the synthesized workload, --jobs the trace's; --target-load both
        size = "count" if "poisson" in study else "jobs"
        changes = {"count": None, "jobs": None}
        for key, value in study.items():
            user = vars(given)[key] if key in (size, "target_load") else None
            changes[key] = value if user is None else user  # the user's size or load wins
        made[name] = settings.with_workload(**changes)
    return made


def simulate_predictor(settings: RunSettings, scheduler: str, cluster: Cluster,
                       predictor: str, log: Path | None = None) -> dict:
    """One predictor on one workload, wherever the sweep sends it: megha inspect's figures."""
    federation = shaped_federation(
        cluster.nodes, cluster.gms, cluster.lms, slots=True,
        nodes_per_worker=cluster.nodes_per_worker, heartbeat_interval=cluster.heartbeat,
        policies={"job": predictor}, seed=settings.seed)
    federation = Overrides(variability=cluster.variability,
                           fairness=cluster.fairness).apply(federation)
    where = (f"{cluster.nodes} slots, {cluster.gms} GMs, {cluster.lms} LMs, job policy "
             f"{predictor}")
    return simulate.simulate_once(settings, scheduler, federation, where, log, predictor)


def _ratio(other: float | None, slearn: float | None) -> str:
    if not other or not slearn:
        return "-"
    return f"{other / slearn:.2f}"


def headline(tables: dict[str, list[dict]]) -> Table:
    """Each predictor's mean and p50 JCT over SLearn's, per workload, beside the paper's."""
    table = Table(title="JCT of each predictor / SLearn's (above 1: SLearn is better)")
    table.add_column("predictor")
    table.add_column("paper (mean)")
    for name in tables:
        table.add_column(f"{name} mean")
        table.add_column(f"{name} p50")
        table.add_column(f"{name} est/work p50")
    predictors = [report["name"] for report in next(iter(tables.values()))]
    for predictor in predictors:
        row = [predictor, f"{PAPER_RATIO[predictor]:.2f}" if predictor in PAPER_RATIO else ""]
        for reports in tables.values():
            by_name = {report["name"]: report for report in reports}
            jct = by_name[predictor]["jct"]["overall"]
            base = by_name.get("slearn", {}).get("jct", {}).get("overall", {})
            error = by_name[predictor].get("estimation", {}).get("error", {}).get("p50")
            row += [_ratio(jct.get("mean"), base.get("mean")),
                    _ratio(jct.get("p50"), base.get("p50")),
                    "-" if error is None else f"{error:.2f}"]
        table.add_row(*row)
    return table


EXPERIMENTS.register(Slearn())
