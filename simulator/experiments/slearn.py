"""`megha experiment slearn`: the SLearn paper's comparison of job-size predictors.

Every predictor runs as the GMs' job policy on the same cluster and workload; they share the
priority-queue ladder (common/policies/jobs/), so they differ only in how they estimate a
job's size. The paper's headline, on its production traces: SLearn's mean JCT is 1.28x
better than 3Sigma's, 1.42x than Point-Est's, 1.91x than LAS's and 3.29x than FIFO's, and the
Oracle's is 0.79 of SLearn's.

As in the paper (its §4.3), each workload is split in time: the experiment builds twice the
jobs its options give (2 x `--count`, `--jobs`, `--max-tasks`; a source without a size is
split whole) and every policy runs the second half, at `--target-load`. With `--history
trained` (the default) the history predictors (3sigma, 3sigma-tl, 3sigma-mean, point-est)
start knowing the first half, each job's mean task runtime by its name, user and width, as
if they had seen it finish (`[policies.history] training`); with `--history online` they
start knowing nothing, as the services' GMs do.

The two default workloads, both at load 1 (the paper's traces average a load close to 1,
with bursts above it), in slot mode (one task, one slot) on 500 nodes, 2 GMs and 5 LMs:

- `drifting`: 1,250 Poisson jobs measured (the paper extracts 1,250 jobs per trace) of
  recurring families whose runtimes drift (`megha synth --families`): 60 families, 80% of
  jobs runs of a family and 20% first-time jobs, widths from 1 to 200 tasks, median task
  duration 20 s with a heavy tail (log-normal, sigma 1.5), task-wise CoV 0.3, job-wise 0.2,
  half the families changing their mean by up to 4x once over the whole 2,500 jobs. This is
  the regime the paper describes for history-based predictors: recurring jobs whose
  behaviour changes, and new jobs.
- `yh1`: jobs 601 to 1,200 of the project's YH1_sub trace (Yahoo) measured, the first 600
  the history: no job names, so the history predictors fall back on user queue and width.

`--count` changes the size of `drifting`, `--jobs` that of `yh1`, `--target-load` both. A
workload option (`--trace`, `--poisson`, `--alibaba`) replaces both with that one.
`--values` lists the job policies. `--sampling-ratios` and `--thin-limits` add slearn runs
at each sampling ratio and thin limit (the paper's Tables 6 and 9). The results of each
workload go to `--out/WORKLOAD/` (an event log per run, results.json in the shared schema,
table.txt), each sweep's to `--out/WORKLOAD/sampling-ratio/` and `.../thin-limit/`; the
tables give each policy's mean and p50 JCT as a ratio to SLearn's, each predictor's
prediction error as the paper measures it (Figure 3: |estimate - work| / work over wide
jobs, of 3 tasks or more), and each sweep value's speedup over 3sigma.

The runs are one sweep (simulator/sweep.py): a pool of `--workers` processes or `--dask`'s
cluster runs them, a line for each as it ends; the tables follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

import numpy as np
import orjson
from rich.table import Table

from common.errors import InvalidInput
from common.federation import Federation, SLearnOptions
from common.policies.job import JOB_POLICIES
from common.policies.jobs.history import FinishedJob
from common.policies.jobs.ladder import THIN_LIMIT
from common.policies.jobs.predictors import HistoryPolicy
from loadgen.jobfile import write_jobs
from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import DEFAULT_COUNT, add_workload_arguments, build_workload
from loadgen.workload import ReplayJob
from simulator import command as simulate
from simulator.cluster import SLOT, shaped_federation
from simulator.experiments.common import (
    NODES_PER_WORKER,
    add_shape_options,
    add_values_option,
    listed,
    numbers,
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
    workload_defaults,
    workload_options,
)
from simulator.sweep import Run

PREDICTORS = "slearn,3sigma,3sigma-tl,point-est,las,fifo,oracle"
PAPER_RATIO = {"3sigma": 1.28, "point-est": 1.42, "las": 1.91, "fifo": 3.29, "oracle": 0.79}
# Figure 3 (§4.3), P50 and P90 of |estimate - work| / work over wide jobs, per trace:
# 2STrace, GTrace11, GTrace19 (SLearn at a fixed 3%)
PAPER_ERROR = {"slearn": ((0.1830, 0.5866), (0.0915, 0.4995), (0.2139, 0.9225)),
               "3sigma": ((0.3657, 4.7578), (0.2139, 2.9452), (0.7156, 19.2751))}
# Table 6: SLearn's mean JCT speedup over 3Sigma per sampling ratio, 2STrace/GTrace11/GTrace19
PAPER_RATIOS = {0.01: (1.24, 1.52, 1.31), 0.02: (1.23, 1.55, 1.31), 0.03: (1.27, 1.54, 1.31),
                0.04: (1.26, 1.56, 1.32), 0.05: (1.27, 1.58, 1.28), 0.1: (1.28, 1.51, 1.24),
                "adaptive": (1.28, 1.56, 1.32)}
# Table 9: the same per thinLimit
PAPER_THIN = {2: (1.23, 1.54, 1.33), 3: (1.28, 1.56, 1.32), 4: (1.14, 1.55, 1.32),
              5: (0.97, 1.54, 1.30), 6: (0.84, 1.53, 1.29)}
HISTORY_MODES = ("trained", "online")
WORKLOADS = {
    "drifting": {"poisson": 1.0, "count": 1250, "families": 60, "recurring_share": 0.8,
                 "width": "choice:1,1,2,3,5,10,20,50,100,200",
                 "duration": "lognormal:20,1.5", "task_cov": 0.3, "job_cov": 0.2,
                 "drift_share": 0.5, "drift_factor": 4.0, "target_load": 1.0},
    "yh1": {"trace": YH1_SUB, "jobs": 600, "target_load": 1.0},
}
SWEEPS = {"sampling-ratio": "sampling_ratio", "thin-limit": "thin_limit"}  # folder: field


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
class Variant:
    """One run's job policy: a registered one, or slearn at another sampling ratio or thin
    limit than its defaults (a sweep's value)."""

    name: str  # the run's name in the results
    policy: str
    sampling_ratio: float | str | None = None
    thin_limit: int | None = None

    def slearn_changes(self) -> dict:
        """What it changes in [policies.slearn]."""
        changes: dict = {}
        if self.sampling_ratio is not None:
            changes["sampling_ratio"] = self.sampling_ratio
        if self.thin_limit is not None:
            changes["thin_threshold"] = self.thin_limit
        return changes


@dataclass(frozen=True)
class HeldOut:
    """A workload split in time (the paper's §4.3): what the history predictors are trained
    on, from its first half (empty: they learn online), and its second half, which every
    policy runs."""

    name: str
    training: tuple[FinishedJob, ...]
    jobs: tuple[ReplayJob, ...]


@dataclass(frozen=True)
class SlearnOptions:
    predictors: tuple[str, ...]
    scheduler: str  # megha or centralized
    cluster: Cluster
    workloads: dict[str, RunSettings]  # by name: each its own results folder
    history: str = "trained"  # or online
    sampling_ratios: tuple[float | str, ...] = ()  # slearn's, swept
    thin_limits: tuple[int, ...] = ()  # slearn's, swept

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every run of a workload: the predictors, then each sweep's slearn runs."""
        return (*(Variant(name, name) for name in self.predictors),
                *(Variant(f"slearn-ratio-{ratio}", "slearn", sampling_ratio=ratio)
                  for ratio in self.sampling_ratios),
                *(Variant(f"slearn-thin-{limit}", "slearn", thin_limit=limit)
                  for limit in self.thin_limits))


class Slearn:
    name = "slearn"
    summary = ("the SLearn paper's study: every job-size predictor as the GMs' job policy, on "
               "a drifting synthetic workload and on YH1_sub, at load 1, 3Sigma trained on "
               "each workload's first half")

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("slearn: the predictors and the cluster (slot mode)")
        add_values_option(group, "job policies", PREDICTORS)
        group.add_argument("--history", choices=HISTORY_MODES, default="trained",
                           help="trained (default): the history predictors start knowing the "
                                "workload's first half, as the paper's 3Sigma; online: "
                                "knowing nothing. Every policy runs the second half either way")
        group.add_argument("--sampling-ratios", default=None, metavar="R,...",
                           help="also run slearn at each of these sampling ratios (fractions "
                                "in (0, 1], or adaptive), as the paper's Table 6: "
                                "0.01,0.02,0.03,0.04,0.05,0.1,adaptive")
        group.add_argument("--thin-limits", default=None, metavar="N,...",
                           help="also run slearn at each of these thin limits (jobs of fewer "
                                "tasks skip sampling), as the paper's Table 9: 2,3,4,5,6")
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
                             args.scheduler, cluster, workloads, args.history,
                             sampling_ratios(args.sampling_ratios),
                             thin_limits(args.thin_limits))

    def describe(self, options: SlearnOptions) -> str:
        cluster = options.cluster
        settings = next(iter(options.workloads.values()))
        variability = f", variability {cluster.variability}" if cluster.variability else ""
        sweeps = "".join(f"; slearn also at {what} {', '.join(map(str, values))}"
                         for what, values in (("sampling ratios", options.sampling_ratios),
                                              ("thin limits", options.thin_limits)) if values)
        return (f"job policies {', '.join(options.predictors)}{sweeps}; {options.scheduler} on "
                f"{cluster.nodes} slots, {cluster.gms} GMs, {cluster.lms} LMs, heartbeat "
                f"{cluster.heartbeat:g} s{variability}; workloads "
                f"{', '.join(options.workloads)}, each its second half run, history "
                f"{options.history}; {settings.timing.describe()}, processing "
                f"{settings.processing}")

    def runs(self, options: SlearnOptions, logs: Path | None) -> list[Run]:
        runs = []
        for workload, settings in options.workloads.items():
            held = held_out(workload, settings, options.cluster,
                            trained=options.history == "trained")
            if logs is not None:
                (logs / workload).mkdir(parents=True, exist_ok=True)
            runs += [Run(f"{workload}/{variant.name}", simulate_variant,
                         (settings, options.scheduler, options.cluster, variant, held),
                         None if logs is None else logs / workload / f"{variant.name}.log")
                     for variant in options.variants]
        return runs

    def run_line(self, result: dict) -> str:
        error = result.get("prediction_error", {}).get("p50")
        return simulated_run_line(result) + (
            "" if error is None else f", prediction error p50 {error:.0%}")

    def figures(self, options: SlearnOptions, results: list[dict]) -> list[Report]:
        """A folder per workload (and one per sweep under it), and the tables."""
        variants = options.variants
        tables: dict[str, dict[str, dict]] = {}  # workload -> run name -> its result
        for index, workload in enumerate(options.workloads):
            here = results[index * len(variants):(index + 1) * len(variants)]
            tables[workload] = {
                variant.name: result | {"name": variant.name, "workload": workload,
                                        "policy": variant.policy}
                for variant, result in zip(variants, here, strict=True)}
        reports = []
        for workload, runs in tables.items():
            first = next(iter(runs.values()))
            settings = {"workload": workload, "history": options.history,
                        "training_jobs": first["training_jobs"],
                        "measured_jobs": first["jct"]["overall"].get("count", 0)}
            listed_runs = [runs[name] for name in options.predictors]
            document = results_document("slearn", listed_runs, settings=settings, figures={
                "jct_mean_over_slearn": _over_slearn(runs, options.predictors),
                "prediction_error": {name: runs[name]["prediction_error"]
                                     for name in options.predictors}}, comparison=True)
            reports.append(Report(document, page=inspection_page(document), folder=workload,
                                  notes=(f"\n{workload}:",)))
            for folder, field in SWEEPS.items():
                swept = [v for v in variants if getattr(v, field) is not None]
                if not swept:
                    continue
                base = [runs[name] for name in ("3sigma", "slearn") if name in runs]
                document = results_document(
                    "slearn", base + [runs[v.name] for v in swept],
                    settings=settings | {"sweep": field},
                    figures={"sweep": sweep_rows(runs, swept, field)}, comparison=True)
                reports.append(Report(document, page=inspection_page(document),
                                      folder=f"{workload}/{folder}",
                                      notes=(f"\n{workload}, slearn's {folder} "
                                             f"(the first run is the baseline):",)))
        tables_out = [headline(tables, options.predictors), error_table(tables, options)]
        for field in SWEEPS.values():
            if any(getattr(v, field) is not None for v in variants):
                tables_out.append(sweep_table(tables, variants, field))
        return [*reports, Report(None, tuple(tables_out))]


def sampling_ratios(text: str | None) -> tuple[float | str, ...]:
    if text is None:
        return ()
    ratios: list[float | str] = []
    for value in (part.strip() for part in text.split(",")):
        ratio = value if value == "adaptive" else numbers(value, "--sampling-ratios")[0]
        if ratio != "adaptive" and not 0 < ratio <= 1:
            raise InvalidInput("--sampling-ratios", f"each must be in (0, 1] or adaptive, "
                                                    f"got {value}")
        ratios.append(ratio)
    return tuple(ratios)


def thin_limits(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    limits = numbers(text, "--thin-limits", int, "integers")
    if any(limit < 1 for limit in limits):
        raise InvalidInput("--thin-limits", f"each must be at least 1, got {text}")
    return limits


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


def held_out(name: str, settings: RunSettings, cluster: Cluster, *,
             trained: bool) -> HeldOut:
    """Twice the workload `settings` describe, built as they say but for the load (the
    second half is fitted to it when it runs), split in two halves by arrival."""
    given = settings.workload
    build = {"target_load": None}
    for size in ("count", "jobs", "max_tasks"):
        if getattr(given, size) is not None:
            build[size] = 2 * getattr(given, size)
    if given.poisson is not None and given.count is None:
        build["count"] = 2 * DEFAULT_COUNT
    workload = build_workload(argparse.Namespace(**(vars(given) | build)),
                              _federation(cluster, Variant("fifo", "fifo"), (), given.seed),
                              Path(name), prefix="", task_cpu_m=SLOT[0])
    jobs = sorted(workload.jobs, key=lambda job: job.arrival)
    half = len(jobs) // 2
    if half == 0:
        raise InvalidInput(name, f"has {len(jobs)} job: a held-out half needs two at least")
    training = tuple(FinishedJob(job.name, job.user, job.width,
                                 fmean(task.duration for task in job.tasks))
                     for job in jobs[:half]) if trained else ()
    return HeldOut(name, training, tuple(jobs[half:]))


def _federation(cluster: Cluster, variant: Variant, training: tuple[FinishedJob, ...],
                seed: int) -> Federation:
    federation = shaped_federation(
        cluster.nodes, cluster.gms, cluster.lms, slots=True,
        nodes_per_worker=cluster.nodes_per_worker, heartbeat_interval=cluster.heartbeat,
        policies={"job": variant.policy}, seed=seed)
    federation = Overrides(variability=cluster.variability,
                           fairness=cluster.fairness).apply(federation)
    policies = federation.policies
    changes = {}
    if variant.slearn_changes():
        changes["slearn"] = SLearnOptions(**(policies.slearn.model_dump()
                                             | variant.slearn_changes()))
    if training:  # [policies.history] training, checked as the file's would be
        changes["history"] = type(policies.history).model_validate(
            policies.history.model_dump() | {"training": tuple(
                dataclasses.asdict(job) for job in training)})
    if not changes:
        return federation
    return dataclasses.replace(federation, policies=policies.model_copy(update=changes))


def simulate_variant(settings: RunSettings, scheduler: str, cluster: Cluster, variant: Variant,
                     held: HeldOut, log: Path | None = None) -> dict:
    """One policy on the second half of one workload, wherever the sweep sends it: megha
    inspect's figures, with the paper's prediction error read back from the run's log."""
    reads_history = issubclass(JOB_POLICIES.get(variant.policy), HistoryPolicy)
    training = held.training if reads_history else ()
    federation = _federation(cluster, variant, training, settings.seed)
    where = (f"{cluster.nodes} slots, {cluster.gms} GMs, {cluster.lms} LMs, job policy "
             f"{variant.name}" + (f", trained on {len(training)} jobs" if training else ""))
    with tempfile.TemporaryDirectory(prefix="slearn-") as folder:
        # the second half as a job file, replayed as written but fitted to the load
        jobs = Path(folder) / f"{held.name}-second-half.jsonl"
        write_jobs(jobs, held.jobs)
        replay = dataclasses.replace(settings, workload=argparse.Namespace(**(
            vars(workload_defaults()) | {"trace": jobs, "seed": settings.seed,
                                         "target_load": settings.workload.target_load})))
        path = log or Path(folder) / "events.log"  # with --no-log, read and dropped
        result = simulate.simulate_once(replay, scheduler, federation, where, path,
                                        variant.name)
        error = prediction_error(path)
    return result | {"prediction_error": error, "training_jobs": len(held.training)}


def prediction_error(log: Path) -> dict:
    """The paper's Figure 3 over the run's wide jobs (THIN_LIMIT tasks or more, whatever the
    policy's own limit): |estimate - work| / work of each with an estimate, as a fraction."""
    errors, wide = [], 0
    with log.open("rb") as lines:
        for line in lines:
            if b'"job_done"' not in line:
                continue
            event = orjson.loads(line)
            if event["event"] != "job_done" or event.get("tasks", 0) < THIN_LIMIT:
                continue
            wide += 1
            estimate, work = event.get("estimate"), event.get("work")
            if estimate is not None and work:
                errors.append(abs(estimate - work) / work)
    if not errors:
        return {"wide_jobs": wide, "estimated": 0}
    p50, p90 = np.percentile(errors, [50, 90])
    return {"wide_jobs": wide, "estimated": len(errors), "p50": float(p50), "p90": float(p90),
            "mean": float(np.mean(errors))}


def _jct(run: dict, figure: str) -> float | None:
    return run["jct"]["overall"].get(figure)


def _over(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def _over_slearn(runs: dict[str, dict], names: tuple[str, ...]) -> dict[str, float | None]:
    base = _jct(runs["slearn"], "mean") if "slearn" in runs else None
    return {name: _over(_jct(runs[name], "mean"), base) for name in names}


def sweep_rows(runs: dict[str, dict], swept: list[Variant], field: str) -> list[dict]:
    """Each sweep value's figures, and its speedups over 3sigma (3sigma's JCT over its own,
    as the paper's tables)."""
    base = runs.get("3sigma")
    rows = []
    for variant in swept:
        run = runs[variant.name]
        rows.append({field: getattr(variant, field), "name": variant.name,
                     "jct_mean": _jct(run, "mean"), "jct_p50": _jct(run, "p50"),
                     "prediction_error_p50": run["prediction_error"].get("p50"),
                     "speedup_mean_over_3sigma": None if base is None else _over(
                         _jct(base, "mean"), _jct(run, "mean")),
                     "speedup_p50_over_3sigma": None if base is None else _over(
                         _jct(base, "p50"), _jct(run, "p50"))})
    return rows


def _fixed(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def headline(tables: dict[str, dict[str, dict]], predictors: tuple[str, ...]) -> Table:
    """Each predictor's mean and p50 JCT over SLearn's, per workload, beside the paper's."""
    table = Table(title="JCT of each predictor / SLearn's (above 1: SLearn is better)")
    table.add_column("predictor")
    table.add_column("paper (mean)")
    for name in tables:
        table.add_column(f"{name} mean")
        table.add_column(f"{name} p50")
    for predictor in predictors:
        row = [predictor, _fixed(PAPER_RATIO.get(predictor))]
        for runs in tables.values():
            base = runs.get("slearn")
            for figure in ("mean", "p50"):
                row.append(_fixed(None if base is None else _over(
                    _jct(runs[predictor], figure), _jct(base, figure))))
        table.add_row(*row)
    return table


def error_table(tables: dict[str, dict[str, dict]], options: SlearnOptions) -> Table:
    """The paper's Figure 3: the prediction error of each predictor over wide jobs."""
    table = Table(title="Prediction error |estimate - work| / work over wide jobs (3+ tasks); "
                        "paper: 2STrace, GTrace11, GTrace19")
    table.add_column("predictor")
    table.add_column("paper p50")
    table.add_column("paper p90")
    for name in tables:
        table.add_column(f"{name} p50")
        table.add_column(f"{name} p90")
        table.add_column(f"{name} estimated")
    for predictor in options.predictors:
        paper = PAPER_ERROR.get(predictor)
        row = [predictor,
               "" if paper is None else ", ".join(_percent(p50) for p50, _ in paper),
               "" if paper is None else ", ".join(_percent(p90) for _, p90 in paper)]
        for runs in tables.values():
            error = runs[predictor]["prediction_error"]
            wide = error["wide_jobs"]
            row += [_percent(error.get("p50")), _percent(error.get("p90")),
                    f"{error['estimated']}/{wide}" if wide else "-"]
        table.add_row(*row)
    return table


def sweep_table(tables: dict[str, dict[str, dict]], variants: tuple[Variant, ...],
                field: str) -> Table:
    """A sweep's values: slearn's speedup over 3sigma and its prediction error, per workload,
    beside the paper's speedups (Table 6 or 9)."""
    paper = PAPER_RATIOS if field == "sampling_ratio" else PAPER_THIN
    what = "sampling ratio" if field == "sampling_ratio" else "thin limit"
    table = Table(title=f"SLearn per {what}: mean (p50) JCT speedup over 3sigma, prediction "
                        f"error p50; paper: 2STrace, GTrace11, GTrace19")
    table.add_column(what)
    table.add_column("paper speedup")
    for name in tables:
        table.add_column(f"{name} speedup")
        table.add_column(f"{name} error p50")
    swept = [v for v in variants if getattr(v, field) is not None]
    rows = {name: {row["name"]: row for row in sweep_rows(runs, swept, field)}
            for name, runs in tables.items()}
    for variant in swept:
        value = getattr(variant, field)
        cells = [str(value), ", ".join(f"{x:.2f}" for x in paper.get(value, ())) or "-"]
        for name in tables:
            row = rows[name][variant.name]
            cells += [f"{_fixed(row['speedup_mean_over_3sigma'])} "
                      f"({_fixed(row['speedup_p50_over_3sigma'])})",
                      _percent(row["prediction_error_p50"])]
        table.add_row(*cells)
    return table


EXPERIMENTS.register(Slearn())
