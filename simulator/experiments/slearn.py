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
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from common.errors import InvalidInput
from common.policies.job import JOB_POLICIES
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.sweep import Run, progress_printer, run_sweep

ROOT = Path(__file__).resolve().parent.parent.parent
PAPER_RATIO = {"3sigma": 1.28, "point-est": 1.42, "las": 1.91, "fifo": 3.29, "oracle": 0.79}
WORKLOADS = {
    "drifting": {"poisson": 1.0, "count": 1250, "families": 60, "recurring_share": 0.8,
                 "width": "choice:1,1,2,3,5,10,20,50,100,200",
                 "duration": "lognormal:20,1.5", "task_cov": 0.3, "job_cov": 0.2,
                 "drift_share": 0.5, "drift_factor": 4.0, "target_load": 1.0},
    "yh1": {"trace": ROOT / "deploy" / "workloads" / "YH1_sub.tr", "jobs": 600,
            "target_load": 1.0},
}
SOURCES = ("trace", "poisson", "alibaba")


def _workloads(args: argparse.Namespace) -> dict[str, argparse.Namespace]:
    if any(getattr(args, source) is not None for source in SOURCES):
        return {"workload": args}
    made = {}
    for name, settings in WORKLOADS.items():
        workload = argparse.Namespace(**vars(args))
        # --count sizes the synthesized workload, --jobs the trace's; --target-load both
        size = "count" if "poisson" in settings else "jobs"
        workload.count = workload.jobs = None
        for key, value in settings.items():
            if key in (size, "target_load") and getattr(args, key) is not None:
                value = getattr(args, key)  # the user's size or load wins
            setattr(workload, key, value)
        made[name] = workload
    return made


def _predictors(values: str | None) -> list[str]:
    from simulator.experiments import EXPERIMENTS

    names = (values or EXPERIMENTS["slearn"][1]).split(",")
    for name in names:
        if name not in JOB_POLICIES.names():
            raise InvalidInput("--values", f"{name!r} is not a job policy (known: "
                                           f"{', '.join(JOB_POLICIES.names())})")
    return names


def run(args: argparse.Namespace) -> int:
    from simulator.experiments import run_line, write_results

    for option in ("log", "results", "config", "job_policy"):
        if getattr(args, option) is not None:
            raise InvalidInput(f"--{option.replace('_', '-')}",
                               "the slearn experiment sets it for each run")
    if args.scheduler not in ("megha", "centralized"):
        raise InvalidInput("--scheduler", "the predictors are GM job policies: megha or "
                                          "centralized")
    predictors = _predictors(args.values)
    nodes = args.nodes or 500
    gms, lms = (1, 1) if args.scheduler == "centralized" else (args.gms or 2, args.lms or 5)
    heartbeat = 10.0 if args.heartbeat is None else args.heartbeat
    out = args.out or Path("experiments") / "slearn"
    started = time.perf_counter()
    workloads = _workloads(args)
    for workload_name, workload in workloads.items():
        workload.slots = True
        simulate.check_slot_options(workload)
        (out / workload_name).mkdir(parents=True, exist_ok=True)
    cluster = Cluster(nodes, gms, lms, heartbeat, args.nodes_per_worker, args.variability)
    points = [(workload_name, predictor) for workload_name in workloads
              for predictor in predictors]
    results = run_sweep(
        [Run(f"{workload_name}/{predictor}", _simulate_predictor,
             (workloads[workload_name], args.scheduler, cluster, predictor),
             None if args.no_log else out / workload_name / f"{predictor}.log")
         for workload_name, predictor in points],
        workers=args.workers, dask=args.dask, on_done=progress_printer(run_line))
    tables: dict[str, list[dict]] = {name: [] for name in workloads}
    for (workload_name, predictor), result in zip(points, results, strict=True):
        tables[workload_name].append(result | {"name": predictor, "workload": workload_name})
    for workload_name, reports in tables.items():
        html = None if args.html is None else args.html.with_name(
            f"{args.html.stem}-{workload_name}{args.html.suffix}")
        print(f"\n{workload_name}:")
        write_results("slearn", out / workload_name, reports, html)
    _render_headline(tables)
    print(f"results in {out}/WORKLOAD/ (results.json, table.txt, one event log per predictor);"
          f" {time.perf_counter() - started:.0f} s")
    return 0


@dataclass(frozen=True)
class Cluster:
    """The cluster every predictor runs on."""

    nodes: int
    gms: int
    lms: int
    heartbeat: float
    nodes_per_worker: int | None  # None: the experiments' default
    variability: str | None


def _simulate_predictor(workload: argparse.Namespace, scheduler: str, cluster: Cluster,
                        predictor: str, log: Path | None = None) -> dict:
    """One predictor on one workload, wherever the sweep sends it: megha inspect's figures."""
    from simulator.experiments import NODES_PER_WORKER

    federation = shaped_federation(
        cluster.nodes, cluster.gms, cluster.lms, slots=True,
        nodes_per_worker=cluster.nodes_per_worker or NODES_PER_WORKER,
        heartbeat_interval=cluster.heartbeat, policies={"job": predictor}, seed=workload.seed)
    federation = simulate.with_overrides(
        federation, argparse.Namespace(variability=cluster.variability))
    where = (f"{cluster.nodes} slots, {cluster.gms} GMs, {cluster.lms} LMs, job policy "
             f"{predictor}")
    return simulate.simulate_once(workload, scheduler, federation, where, log, predictor)


def _ratio(other: float | None, slearn: float | None) -> str:
    if not other or not slearn:
        return "-"
    return f"{other / slearn:.2f}"


def _render_headline(tables: dict[str, list[dict]]) -> None:
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
    Console(width=160).print(table)
