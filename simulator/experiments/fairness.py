"""`megha experiment fairness`: the Megha paper's fairness study (its Figures 10 and 11), with
every variant of Algorithm 2 we carry (common/policies/fairness.py, docs/fairness.md).

The federation: 4 user queues with shares 10%, 25%, 15% and 50%; q1 on gm-1, q2 and q3 on
gm-2, q4 on gm-3 (the paper's setting); 5 LMs; clusters of 200, 500 and 1,500 nodes
(`--sizes`), in slot mode (one task, one slot, as the paper's simulator); LM heartbeats every
10 s, the paper's (`--heartbeat`).

The workload makes the queues contend, in phases of `PHASE_S` seconds: queue i (0 to 3)
submits during phases i to i+3, so the queues arrive one after the other and leave in the
same order. While it submits, a queue offers 60% of the cluster (Poisson arrivals of jobs of
equal width, exponential task durations of mean 30 s): more than its share, whatever it is.
So each queue is at some point alone or nearly (above its share, using what the others leave
idle: work conservation), and at some point a newcomer below its share that must take room
back by preemption; and in phase 3 all four submit, 240% of the cluster: the saturated
regime, where Algorithm 2 should hold each queue near its share. The backlog built there
drains over the last phases. `--jobs` sets the jobs per queue (default 400); a job's width
follows from it and the cluster size, so every cluster sees the same offered load and the
same phases (a fixed workload would saturate 200 nodes and leave 1,500 idle).

`--fixed-for NODES` runs the paper's mechanism instead: one job list, built as above for a
cluster of NODES nodes, on every size (the paper runs one trace on all three). The phases are
the same; a smaller cluster is overloaded (with `--fixed-for 500`, 200 nodes see 2.5 times
the load, and the backlog drains long after phase 3), a larger one lightly loaded. Each run
records its workload (`workload`: scaled or fixed, for how many nodes, the job width, the
tasks and phase 3's offered load as a multiple of the run's cluster).

Recorded per run (results.json, the shared schema of `megha inspect` plus our own figures):
allocation time per queue (`allocation.by_user`), each queue's share of the cluster's cpu over
time against its configured share (`share_over_time`: samples every `PHASE_S / 24` s, from the
LMs' launches and ends in the event log), its mean share under contention (`contention`: over
phase 3 after its first quarter, which the newest queue needs to preempt its way in), and the
counts of repartitions, preemption attempts and preemptions. `--html` adds the plot of every
run's shares, a panel per variant and cluster size, and megha inspect's report.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from common.errors import InvalidInput
from common.federation import FairnessOptionsTable, Federation
from common.models import JobSpec, TaskSpec
from common.policies.fairness import UserQueue
from common.resources import Resources
from simulator.cluster import SLOT, shaped_federation
from simulator.engine import DelayModel
from simulator.eventlog import SimLog
from simulator.experiments.common import (
    NODES_PER_WORKER,
    add_seed_option,
    add_shape_options,
    add_values_option,
    at_least,
    listed,
    numbers,
)
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.results import (
    Page,
    Report,
    inspection_result,
    results_document,
)
from simulator.federated import FederatedSimulation
from simulator.run_settings import (
    Timing,
    add_check_argument,
    add_timing_arguments,
)
from simulator.sweep import Run
from simulator.timemodel import TimeModel

QUEUES = (UserQueue("q1", 0.10, "gm-1"), UserQueue("q2", 0.25, "gm-2"),
          UserQueue("q3", 0.15, "gm-2"), UserQueue("q4", 0.50, "gm-3"))
SIZES = "200,500,1500"
LMS = 5
HEARTBEAT_S = 10.0  # the paper's
PHASE_S = 300.0  # a queue submits for 4 phases, starting one phase after the previous
LOAD_PER_QUEUE = 0.6  # a submitting queue's offered load, as a fraction of the cluster
TASK_S = 30.0  # mean task duration (exponential)
JOBS_PER_QUEUE = 400
SETTLING = 0.25  # of phase 3, left out of the contention mean: the newest queue preempts in

# variant name: (fairness policy, options over its defaults). The paper as written, today's
# default, the paper with each of today's refinements alone, and no preemption at all. Two
# refinements are left out of the default list because in slot mode they cannot change a
# decision (run them with --values): dominant-share usage, as a task's cpu and memory
# fractions are equal; anti-oscillation, as every share here is a whole number of slots on
# every size, so a queue below its share stays within it with one more task, and a queue
# above its share stays at or above it without one.
VARIANTS: dict[str, tuple[str, dict]] = {
    "paper": ("fair_share_paper", {}),
    "default": ("fair_share", {}),
    "paper+job-order": ("fair_share_paper", {"queue_order": "job_policy"}),
    "paper+heartbeat-usage": ("fair_share_paper", {"own_usage": "heartbeats"}),
    "paper+refused-front": ("fair_share_paper", {"refused": "front"}),
    "paper+anti-oscillation": ("fair_share_paper", {"anti_oscillation": True}),
    "paper+dominant": ("fair_share_paper", {"usage": "dominant"}),
    "none": ("none", {}),
}
DEFAULT_VARIANTS = ("paper,default,paper+job-order,paper+heartbeat-usage,paper+refused-front,"
                    "none")


@dataclass(frozen=True)
class Workload:
    """The phases of contention (this module's docstring). `fixed_for`: None, the workload
    scales with each cluster (the same offered load on every size); N, one workload, built for
    a cluster of N nodes, on every size (the paper's mechanism)."""

    jobs_per_queue: int = JOBS_PER_QUEUE
    phase_s: float = PHASE_S
    load_per_queue: float = LOAD_PER_QUEUE
    task_s: float = TASK_S
    fixed_for: int | None = None  # nodes

    def width(self, nodes: int) -> int:
        """Tasks per job on a cluster of `nodes`: a submitting queue offers `load_per_queue`
        of the cluster the workload is built for (`nodes`, or `fixed_for` if set)."""
        built_for = nodes if self.fixed_for is None else self.fixed_for
        submitting_s = 4 * self.phase_s
        return max(1, round(self.load_per_queue * built_for * submitting_s
                            / (self.jobs_per_queue * self.task_s)))

    def tasks(self, nodes: int) -> int:
        return len(QUEUES) * self.jobs_per_queue * self.width(nodes)

    def phase3_load(self, nodes: int) -> float:
        """The mean work offered while all four queues submit, in slots, over `nodes`."""
        per_queue = self.jobs_per_queue * self.width(nodes) * self.task_s / (4 * self.phase_s)
        return len(QUEUES) * per_queue / nodes

    def record(self, nodes: int) -> dict:
        """What results.json says of the workload of a run on `nodes`."""
        return {"kind": "scaled" if self.fixed_for is None else "fixed",
                "fixed_for": self.fixed_for, "width": self.width(nodes),
                "tasks": self.tasks(nodes), "phase3_load": round(self.phase3_load(nodes), 4)}

    def contention(self) -> tuple[float, float]:
        """Phase 3, all four queues submitting, after its settling part."""
        return 3 * self.phase_s + SETTLING * self.phase_s, 4 * self.phase_s

    def jobs(self, nodes: int, seed: int) -> list[JobSpec]:
        width, slot = self.width(nodes), Resources(*SLOT)
        jobs = []
        for i, queue in enumerate(QUEUES):
            rng = random.Random(f"{seed}/fairness/{queue.name}")
            start = i * self.phase_s
            # a Poisson process over the queue's 4 phases, given its number of jobs
            arrivals = sorted(rng.uniform(start, start + 4 * self.phase_s)
                              for _ in range(self.jobs_per_queue))
            for k, arrival in enumerate(arrivals):
                job_id = f"{queue.name}-{k:04d}"
                tasks = tuple(TaskSpec(f"{job_id}/{t}", job_id, slot, frozenset(),
                                       round(max(0.1, rng.expovariate(1 / self.task_s)), 3))
                              for t in range(width))
                jobs.append(JobSpec(job_id, queue.name, tasks, round(arrival, 3)))
        return jobs


@dataclass(frozen=True)
class Cluster:
    nodes: int
    lms: int
    heartbeat: float
    nodes_per_worker: int


def federation_for(cluster: Cluster, variant: str, seed: int) -> Federation:
    """The cluster in slot mode with the paper's four queues and the variant's policy."""
    policy, options = VARIANTS[variant]
    shaped = shaped_federation(cluster.nodes, 3, cluster.lms, slots=True,
                               nodes_per_worker=cluster.nodes_per_worker,
                               heartbeat_interval=cluster.heartbeat,
                               policies={"fairness": policy}, seed=seed)
    policies = shaped.policies.model_copy(
        update={"fairness_options": FairnessOptionsTable(**options)})
    return dataclasses.replace(shaped, queues=QUEUES, policies=policies)


@dataclass(frozen=True)
class Model:
    """How a run takes time: the network's delay or a time model, and processing."""

    delay: DelayModel
    time_model: TimeModel | None
    processing: str
    check: bool  # the end-of-run invariant checks


def simulate_variant(cluster: Cluster, variant: str, workload: Workload, seed: int,
                     model: Model, log: Path | None = None) -> dict:
    """One variant on one cluster, wherever the sweep sends it: megha inspect's figures and
    the shares over time and under contention."""
    federation = federation_for(cluster, variant, seed)
    jobs = workload.jobs(cluster.nodes, seed)
    sim_log = SimLog(f"{cluster.nodes}/{variant}", log)
    started = time.perf_counter()
    try:
        sim = FederatedSimulation(federation, jobs, sim_log,
                                  delay=None if model.time_model else model.delay,
                                  seed=seed, time_model=model.time_model,
                                  processing=model.processing)
        outcome = sim.run()
        if model.check:
            sim.check_invariants()
    finally:
        sim_log.close()
    report = sim_log.report()
    shares = share_over_time(sim_log, outcome.virtual_s, workload)
    return report | {"wall_s": time.perf_counter() - started, "virtual_s": outcome.virtual_s,
                     "steps": outcome.steps, "rejected_jobs": len(outcome.rejected),
                     "variant": variant, "nodes": cluster.nodes,
                     "fairness_policy": VARIANTS[variant][0],
                     "fairness_options": dataclasses.asdict(
                         federation.gm_config("gm-1").fairness_options),
                     "workload": workload.record(cluster.nodes), "share_over_time": shares,
                     "contention": contention_shares(sim_log, workload)}


def _held(sim_log: SimLog) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], int]:
    """Per queue, the times its cpu held changes (LM launches and ends) and the cpu held from
    each on; and the cluster's cpu."""
    changes: dict[str, list[tuple[float, int]]] = {queue.name: [] for queue in QUEUES}
    for attempt in sim_log.analysis.attempts.values():
        if attempt.lm_start is None or not attempt.cpu_m:
            continue
        changes.setdefault(attempt.user, []).append((attempt.lm_start, attempt.cpu_m))
        if attempt.lm_end is not None:
            changes[attempt.user].append((attempt.lm_end, -attempt.cpu_m))
    held = {}
    for user, points in changes.items():
        points.sort()
        held[user] = (np.array([t for t, _ in points] or [0.0]),
                      np.cumsum([d for _, d in points] or [0]))
    return held, sum(sim_log.analysis.capacity.values())


def _sample(times: np.ndarray, cumulative: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The step function (cpu held from each time on) at the grid's times."""
    index = np.searchsorted(times, grid, side="right") - 1
    return np.where(index >= 0, cumulative[np.maximum(index, 0)], 0)


def share_over_time(sim_log: SimLog, end: float, workload: Workload) -> dict:
    held, capacity = _held(sim_log)
    grid = np.arange(0.0, end + 1e-9, workload.phase_s / 24)
    return {"t": grid.round(3).tolist(),
            "queues": {user: (_sample(*held[user], grid) / capacity).round(4).tolist()
                       for user in sorted(held)},
            "configured": {queue.name: queue.share for queue in QUEUES},
            "contention_window": list(workload.contention())}


def contention_shares(sim_log: SimLog, workload: Workload) -> dict:
    """Each queue's mean share of the cluster's cpu over the contention window (sampled every
    0.1 s: exact to a tenth of a second of a task's start or end)."""
    held, capacity = _held(sim_log)
    start, end = workload.contention()
    grid = np.arange(start, end, 0.1)
    return {"window_s": [start, end],
            "mean_share": {user: float(_sample(*held[user], grid).mean() / capacity)
                           for user in sorted(held)},
            "configured": {queue.name: queue.share for queue in QUEUES}}


@dataclass(frozen=True)
class FairnessOptions:
    variants: tuple[str, ...]
    sizes: tuple[int, ...]  # nodes
    workload: Workload
    lms: int
    heartbeat: float
    nodes_per_worker: int
    seed: int
    model: Model
    timing: str  # which model of time is in force, in words


class Fairness:
    name = "fairness"
    summary = ("the Megha paper's fairness study (Figures 10, 11): 4 user queues of shares "
               "10/25/15/50% on 3 GMs contending in phases, every variant of Algorithm 2")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("fairness: the variants, the clusters, the workload")
        add_values_option(group, "fairness variants", DEFAULT_VARIANTS)
        group.add_argument("--sizes", default=SIZES,
                           help=f"cluster sizes in nodes, comma-separated (default {SIZES})")
        group.add_argument("--nodes", type=int, default=None,
                           help="one cluster of this many nodes instead of --sizes")
        add_shape_options(group, {"lms": LMS, "heartbeat": HEARTBEAT_S,
                                  "nodes_per_worker": NODES_PER_WORKER})
        group.add_argument("--jobs", type=int, default=JOBS_PER_QUEUE,
                           help=f"jobs per queue (default {JOBS_PER_QUEUE}; a job's width "
                                f"follows from it and the cluster's size)")
        group.add_argument("--fixed-for", type=int, default=None, metavar="NODES",
                           help="one workload, built for a cluster of NODES nodes, on every "
                                "size (the paper's mechanism: smaller clusters overloaded); "
                                "default: the workload scales with each size")
        add_seed_option(group)
        model = parser.add_argument_group("the model")
        add_timing_arguments(model, said="none, model with --calibration")
        add_check_argument(model)

    def options(self, args: argparse.Namespace) -> FairnessOptions:
        variants = listed(args.values or DEFAULT_VARIANTS, VARIANTS, "--values",
                          "a fairness variant")
        sizes = (args.nodes,) if args.nodes is not None else _sizes(args.sizes)
        at_least("--jobs", args.jobs, 1)
        at_least("--fixed-for", args.fixed_for, 1)
        at_least("--lms", args.lms, 1)
        at_least("--nodes-per-worker", args.nodes_per_worker, 1)
        delay, time_model, timing = Timing(args.delay, args.calibration).resolve()
        model = Model(delay, time_model, args.processing or ("model" if time_model else "none"),
                      check=not args.no_check)
        workload = Workload(jobs_per_queue=args.jobs, fixed_for=args.fixed_for)
        return FairnessOptions(variants, sizes, workload, args.lms, args.heartbeat,
                               args.nodes_per_worker, args.seed, model, timing)

    def describe(self, options: FairnessOptions) -> str:
        workload = options.workload
        kind = ("workload scaled per size (the same offered load on every size)"
                if workload.fixed_for is None else
                f"workload fixed for {workload.fixed_for:,} nodes (the same jobs on every "
                f"size)")
        sizes = "".join(f"\n  {nodes} nodes: jobs of {workload.width(nodes)} tasks, "
                        f"{workload.tasks(nodes):,} tasks, phase 3 offers "
                        f"{workload.phase3_load(nodes):.2f}x the cluster"
                        for nodes in options.sizes)
        queues = ", ".join(f"{queue.name} {queue.share:.0%} on {queue.gm}" for queue in QUEUES)
        return (f"variants {', '.join(options.variants)}; queues {queues}; {options.lms} LMs, "
                f"heartbeat {options.heartbeat:g} s, slot mode; {workload.jobs_per_queue} "
                f"jobs per queue; {kind}{sizes}\n  time: {options.timing}; processing "
                f"{options.model.processing}")

    def runs(self, options: FairnessOptions, logs: Path | None) -> list[Run]:
        return [Run(f"{nodes}/{variant}", simulate_variant,
                    (Cluster(nodes, options.lms, options.heartbeat, options.nodes_per_worker),
                     variant, options.workload, options.seed, options.model),
                    None if logs is None else logs / f"{nodes}-{variant}.log")
                for nodes in options.sizes for variant in options.variants]

    def run_line(self, result: dict) -> str:
        shares = result["contention"]["mean_share"]
        counts = result["counts"]
        return (f"contention shares {' '.join(f'{q} {s:.0%}' for q, s in shares.items())}, "
                f"{counts['preemptions']} preemptions, virtual {result['virtual_s']:,.0f} s")

    def figures(self, options: FairnessOptions, results: list[dict]) -> list[Report]:
        points = [(nodes, variant) for nodes in options.sizes for variant in options.variants]
        runs = [result | {"name": f"{nodes}/{variant}"}
                for (nodes, variant), result in zip(points, results, strict=True)]
        document = results_document("fairness", runs, comparison=True)
        return [Report(document, (fairness_table(runs),), _page(document))]


def _sizes(text: str) -> tuple[int, ...]:
    sizes = numbers(text, "--sizes", int, f"node counts like {SIZES}")
    if min(sizes) < LMS:
        raise InvalidInput("--sizes", f"each cluster needs at least {LMS} nodes, got {text!r}")
    return sizes


def fairness_table(reports: list[dict]) -> Table:
    """Per run: each queue's mean share under contention against its own, allocation p50 and
    p99 per queue, and the counts."""
    table = Table(title="shares under contention (configured: q1 10%, q2 25%, q3 15%, q4 50%), "
                        "allocation per queue, counts")
    for column in ("run", "q1", "q2", "q3", "q4", "alloc p50/p99 s: q1", "q2", "q3", "q4",
                   "repart.", "preempt. attempts", "preempted", "tasks"):
        table.add_column(column)
    for report in reports:
        shares = report["contention"]["mean_share"]
        by_user = report["allocation"]["by_user"]
        allocation = [f"{by_user[q.name]['p50']:.1f}/{by_user[q.name]['p99']:.1f}"
                      if by_user.get(q.name, {}).get("count") else "-" for q in QUEUES]
        counts = report["counts"]
        table.add_row(report["name"], *(f"{shares.get(q.name, 0.0):.1%}" for q in QUEUES),
                      *allocation, str(counts["repartitions"]),
                      str(counts["preemption_attempts"]), str(counts["preemptions"]),
                      str(counts["tasks_started"]))
    return table


def share_plot(reports: list[dict]):
    """A panel per run (rows: variants, columns: cluster sizes): each queue's share of the
    cpu over time, its configured share dashed, the contention window shaded."""
    from inspection.plots import new_figure

    sizes = sorted({report["nodes"] for report in reports})
    variants = list(dict.fromkeys(report["variant"] for report in reports))
    figure = new_figure((4.0 * len(sizes) + 1.0, 2.4 * len(variants) + 1.0))
    axes = figure.subplots(len(variants), len(sizes), sharex=True, sharey=True, squeeze=False)
    colour = {queue.name: f"C{i}" for i, queue in enumerate(QUEUES)}
    for report in reports:
        panel = axes[variants.index(report["variant"])][sizes.index(report["nodes"])]
        series = report["share_over_time"]
        for user, shares in series["queues"].items():
            panel.plot(series["t"], shares, color=colour.get(user, "grey"), linewidth=1,
                       label=user)
        for user, share in series["configured"].items():
            panel.axhline(share, color=colour[user], linestyle="--", linewidth=0.8)
        panel.axvspan(*series["contention_window"], color="grey", alpha=0.15)
        panel.set_title(f"{report['variant']}, {report['nodes']} nodes", fontsize="small")
        panel.grid(True, alpha=0.3)
    from matplotlib.ticker import PercentFormatter

    for row in axes:
        row[0].set_ylabel("share of cpu")
        row[0].yaxis.set_major_formatter(PercentFormatter(1.0))
    for panel in axes[-1]:
        panel.set_xlabel("time (s)")
    axes[0][0].set_ylim(0, 1.0)
    axes[0][-1].legend(title="queue", loc="upper right", fontsize="x-small")
    return figure


def _page(document: dict) -> Page:
    """megha inspect's report of every run, its share plot replaced by ours (one panel per
    run in a grid, instead of one tall column)."""

    def write(html: Path, folder: Path) -> None:
        from inspection.html import write_html
        from inspection.plots import png_bytes, write_plots

        result = inspection_result(document)
        plots = write_plots(result, folder / "plots")
        plots.pop("share_over_time", None)
        ours = png_bytes(share_plot(result["runs"]))
        (folder / "plots" / "fairness_shares.png").write_bytes(ours)
        write_html(result, {"fairness_shares": ours, **plots}, html)

    return write


EXPERIMENTS.register(Fairness())
