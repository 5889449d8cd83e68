"""The workload options `megha replay` and `megha synth` share, and the workload they build.

    --trace FILE | --alibaba [CSV] | --poisson RATE      where the jobs come from
    --like google_19|alibaba|cloudera                     the Megha paper's workloads, as
                                                          stand-ins (loadgen/paper_workloads.py)
    --families N, --recurring-share, --drift-share, ...  --poisson: recurring job families
    --cpu-m, --mem-mib, --users, --weight, --constraints  what synthesis adds (loadgen/synthesis.py)
    --sample, --jobs, --max-width, --max-tasks, ...       how it is fitted (loadgen/workload.py)

A job file (`--trace FILE.jsonl`) is replayed as written: synthesis options are refused for
it rather than silently ignored, and so are resource options for Alibaba, whose tasks carry
their own requests.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from common.errors import InvalidInput
from common.federation import Federation, load_federation
from loadgen.distributions import parse_distribution
from loadgen.paper_workloads import PAPER_WORKLOADS, apply_like, help_text, label
from loadgen.progress import Progress, quiet
from loadgen.synthesis import (
    DEFAULT_DURATION,
    DEFAULT_WIDTH,
    Families,
    Realization,
    describe,
    poisson_jobs,
    realize,
)
from loadgen.trace import read_trace
from loadgen.workload import JobShape, ReplayJob, Scaling, fit, from_trace, offered_load, select

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT / "deploy" / "workloads" / "YH_small.tr"
DEFAULT_CONFIG = ROOT / "deploy" / "federation.toml"
DEFAULT_COUNT = 1000  # --poisson jobs
SYNTHESIS_OPTIONS = ("cpu_m", "mem_mib", "users", "weight", "constraints",
                     "unconstrained_share")
FAMILY_OPTIONS = ("recurring_share", "task_cov", "job_cov", "drift_share", "drift_factor")
SOURCE_OPTIONS = {"poisson": ("count", "width", "duration", "families", *FAMILY_OPTIONS),
                  "alibaba": ("alibaba_cpu_divisor", "alibaba_mem_divisor")}


def add_workload_arguments(parser: argparse.ArgumentParser, *, config: bool = True,
                           trace_default: str = "the bundled YH_small.tr") -> None:
    """The workload options. `config`: offer `--config` (a command that generates its
    clusters does not: its `config` stays None); `trace_default`: what `--trace` says it
    defaults to."""
    source = parser.add_argument_group("workload source (one of)")
    choice = source.add_mutually_exclusive_group()
    choice.add_argument("--trace", type=Path, default=None,
                        help="a Sparrow/Eagle trace (*.tr) or a JSON-lines job file (*.jsonl, "
                             f"replayed as written) (default: {trace_default})")
    choice.add_argument("--alibaba", nargs="?", const="", default=None, metavar="CSV",
                        help="Alibaba 2018 batch tasks: the sample the PyPI package spar ships, "
                             "or a CSV in its format")
    choice.add_argument("--poisson", type=float, default=None, metavar="RATE",
                        help="synthetic jobs arriving as a Poisson process of RATE jobs/s")
    source.add_argument("--count", type=int, default=None,
                        help="--poisson: how many jobs (default 1000)")
    source.add_argument("--width", default=None, metavar="DIST",
                        help=f"--poisson: tasks per job (default {DEFAULT_WIDTH})")
    source.add_argument("--duration", default=None, metavar="DIST",
                        help=f"--poisson: task duration, s (default {DEFAULT_DURATION}: the "
                             f"SRPT+R experiment's Pareto sizes of mean 40)")
    source.add_argument("--skip-bad-lines", action="store_true",
                        help="skip malformed lines (counted) instead of stopping")
    source.add_argument("--alibaba-cpu-divisor", type=float, default=None,
                        help="--alibaba: cores = plan_cpu / this (default 400, the paper's)")
    source.add_argument("--alibaba-mem-divisor", type=float, default=None,
                        help="--alibaba: share of a node's memory = plan_mem / this "
                             "(default 50, the paper's)")

    paper = parser.add_argument_group("the Megha paper's workloads, as stand-ins")
    paper.add_argument("--like", choices=tuple(PAPER_WORKLOADS), default=None, metavar="NAME",
                       help=help_text())

    defaults = Families()
    recurring = parser.add_argument_group(
        "recurring job families (with --poisson; for history-based runtime predictors)")
    recurring.add_argument("--families", type=int, default=None, metavar="N",
                           help="N job templates fam-0000.., each with a width (--width), a "
                                "mean task duration (--duration) and a user queue drawn once "
                                "(default 0: every job drawn on its own, unnamed)")
    recurring.add_argument("--recurring-share", type=float, default=None, metavar="P",
                           help="share of jobs that are runs of a family chosen uniformly, "
                                "the rest first-time jobs once-KEY "
                                f"(default {defaults.recurring_share:g})")
    recurring.add_argument("--task-cov", type=float, default=None, metavar="C",
                           help="CoV of a task's duration around its job's mean, log-normal "
                                f"(default {defaults.task_cov:g})")
    recurring.add_argument("--job-cov", type=float, default=None, metavar="C",
                           help="CoV of a run's mean around its family's current mean, "
                                f"log-normal (default {defaults.job_cov:g})")
    recurring.add_argument("--drift-share", type=float, default=None, metavar="S",
                           help="share of families whose mean changes once, at a moment uniform "
                                f"over the arrivals (default {defaults.drift_share:g})")
    recurring.add_argument("--drift-factor", type=float, default=None, metavar="F",
                           help="such a change multiplies the mean by a factor log-uniform in "
                                f"[1/F, F] (default {defaults.drift_factor:g})")

    synth = parser.add_argument_group(
        "synthesis (DIST: 500, uniform:250,1000, choice:250,500, exp:10, pareto:2.5,40, "
        "lognormal:8,1.2)")
    synth.add_argument("--cpu-m", default=None, metavar="DIST",
                       help="cpu request of a task, millicores (default 500)")
    synth.add_argument("--mem-mib", default=None, metavar="DIST",
                       help="memory request of a task, MiB (default 512)")
    synth.add_argument("--users", default=None, metavar="Q[=W],...",
                       help="user queues to draw jobs from, with optional draw weights "
                            "(default: every queue of the federation file, equally)")
    synth.add_argument("--weight", default=None, metavar="DIST",
                       help="a job's weight in weighted completion time (default 1)")
    # None when not given, so that --like can tell an explicit --no-constraints from silence
    synth.add_argument("--constraints", action=argparse.BooleanOptionalAction, default=None,
                       help="give tasks placement constraints from the Megha model "
                            "(1.86 per task, 14%% unconstrained); --no-constraints: none, "
                            "also with --like")
    synth.add_argument("--unconstrained-share", type=float, default=None, metavar="U",
                       help="with constraints: this share of tasks carries none (the paper "
                            "quotes about 0.5 for Google); implies --constraints")
    synth.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")

    scaling = parser.add_argument_group("scaling (applied in this order)")
    scaling.add_argument("--sample", type=float, default=None,
                         help="keep each job with this probability")
    scaling.add_argument("--jobs", type=int, default=None, help="keep the first N jobs")
    scaling.add_argument("--max-width", type=int, default=None, help="cap tasks per job at N")
    scaling.add_argument("--max-tasks", type=int, default=None, metavar="N",
                         help="keep jobs in order until their tasks add up to N; the job that "
                              "crosses N is cut to the tasks that make exactly N (its first "
                              "ones)")
    scaling.add_argument("--duration-scale", type=float, default=1.0,
                         help="multiply task durations (default 1)")
    scaling.add_argument("--time-scale", type=float, default=None,
                         help="multiply inter-arrival times")
    scaling.add_argument("--target-load", type=float, default=None,
                         help="instead of --time-scale: offered cpu load as a fraction of the "
                              "cluster's capacity (1.0 = all of it)")
    if not config:
        parser.set_defaults(config=None)
        return
    parser.add_argument("--config", type=Path, default=None,
                        help="federation file: user queues, their GMs, the cluster's size "
                             "(default: $MEGHA_CONFIG, else deploy/federation.toml)")


def load_config(path: Path | None) -> tuple[Federation, Path]:
    path = path or Path(os.environ.get("MEGHA_CONFIG") or DEFAULT_CONFIG)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput("--config", f"cannot read {path}: {error.strerror}") from None
    return load_federation(text, str(path)), path


@dataclass(slots=True)
class Workload:
    jobs: list[ReplayJob]
    name: str  # what it was read from, for the user
    cluster_cpu_m: int

    @property
    def offered_load(self) -> float | None:
        return offered_load(self.jobs, self.cluster_cpu_m)

    def headline(self) -> str:
        load = self.offered_load
        stats = describe(self.jobs)
        constrained = (f"; {stats['constrained_share']:.0%} of tasks constrained"
                       if stats["constraints_per_task"] else "")
        return (f"{stats['jobs']} jobs, {stats['tasks']} tasks from {self.name} over "
                f"{stats['span_s']:.1f} s; offered load "
                f"{'n/a' if load is None else f'{load:.2f}'} of "
                f"{self.cluster_cpu_m / 1000:.0f} cores{constrained}")


def _users(text: str | None, federation: Federation, config: Path) -> tuple[tuple[str, float], ...]:
    queues = [queue.name for queue in federation.queues]
    if not text:
        return tuple((queue, 1.0) for queue in queues)
    users = []
    for item in text.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if name not in queues:
            raise InvalidInput("--users", f"{name!r} is not a queue of {config} "
                                          f"(queues: {', '.join(queues)})")
        try:
            users.append((name, float(weight) if sep else 1.0))
        except ValueError:
            raise InvalidInput("--users", f"the weight of {name} is not a number: "
                                          f"{weight!r}") from None
    return tuple(users)


def _realization(args: argparse.Namespace, federation: Federation, config: Path) -> Realization:
    wants_constraints = args.constraints or args.unconstrained_share is not None
    if wants_constraints and federation.num_constraints < 21:
        raise InvalidInput("--constraints", f"the model uses 21 constraint ids but {config} "
                                            f"has num_constraints = {federation.num_constraints}")
    distributions = {option: parse_distribution(getattr(args, option),
                                                "--" + option.replace("_", "-"))
                     for option in ("cpu_m", "mem_mib", "weight")
                     if getattr(args, option) is not None}
    return Realization(users=_users(args.users, federation, config), seed=args.seed,
                       constraints=wants_constraints,
                       unconstrained_share=args.unconstrained_share, **distributions)


def _report_skipped(skipped: int, errors: list[str], source: str) -> None:
    if skipped:
        print(f"skipped {skipped} malformed line(s) of {source}; first: {errors[0]}",
              file=sys.stderr)


def _shapes(args: argparse.Namespace, federation: Federation) -> tuple[list[JobShape], str]:
    if args.poisson is not None:
        width = parse_distribution(args.width, "--width") if args.width else DEFAULT_WIDTH
        duration = (parse_distribution(args.duration, "--duration") if args.duration
                    else DEFAULT_DURATION)
        count = DEFAULT_COUNT if args.count is None else args.count
        families = _families(args)
        shapes = poisson_jobs(count, args.poisson, width=width, duration=duration,
                              seed=args.seed, families=families)
        name = f"Poisson({args.poisson:g}/s), width {width}, duration {duration}"
        if families.count:
            name += (f", {families.count} families ({families.recurring_share:g} of jobs "
                     f"recurring, {families.drift_share:g} of families drifting)")
        return shapes, name
    if args.alibaba is not None:
        from loadgen.alibaba import AlibabaUnits, read_alibaba  # only for Alibaba traces

        if args.cpu_m is not None or args.mem_mib is not None:
            raise InvalidInput("--cpu-m", "Alibaba tasks carry their own requests; scale them "
                                          "with --alibaba-cpu-divisor / --alibaba-mem-divisor")
        units = AlibabaUnits(node_mem_mib=min(node.capacity.mem_mib for lm in federation.lms
                                              for node in lm.nodes))
        if args.alibaba_cpu_divisor is not None:
            units = replace(units, cpu_divisor=args.alibaba_cpu_divisor)
        if args.alibaba_mem_divisor is not None:
            units = replace(units, mem_divisor=args.alibaba_mem_divisor)
        read = read_alibaba(args.alibaba or None, units, skip_bad=args.skip_bad_lines)
        _report_skipped(read.skipped, read.errors, read.source)
        if read.empty_tasks:
            print(f"{read.source}: {read.empty_tasks} task row(s) with no instance and "
                  f"{read.empty_jobs} job(s) left empty are not replayed", file=sys.stderr)
        return read.jobs, Path(read.source).name
    trace = args.trace or DEFAULT_TRACE
    read = read_trace(trace, skip_bad=args.skip_bad_lines)
    _report_skipped(read.skipped, read.errors, str(trace))
    return from_trace(read.jobs), trace.name


def _report_short(jobs: list[JobShape] | list[ReplayJob], plan: Scaling, name: str) -> None:
    """Say so when --max-tasks asked for more tasks than the source had: all are used."""
    tasks = sum(job.width for job in jobs)
    if plan.max_tasks is not None and tasks < plan.max_tasks:
        print(f"{name} holds {tasks:,} tasks after selection, fewer than --max-tasks "
              f"{plan.max_tasks:,}: all of them are used", file=sys.stderr)


def _families(args: argparse.Namespace) -> Families:
    """The family options as a `Families`; its options are refused without --families N."""
    if not args.families:
        for option in FAMILY_OPTIONS:
            if getattr(args, option) is not None:
                raise InvalidInput("--" + option.replace("_", "-"),
                                   "applies only with --families N (N >= 1)")
    given = {option: getattr(args, option) for option in FAMILY_OPTIONS
             if getattr(args, option) is not None}
    return Families(count=args.families or 0, **given)


def _check_source_options(args: argparse.Namespace) -> None:
    """An option of another source would be silently ignored: refuse it instead."""
    for source, options in SOURCE_OPTIONS.items():
        if getattr(args, source) is None:
            for option in options:
                if getattr(args, option) is not None:
                    raise InvalidInput("--" + option.replace("_", "-"),
                                       f"applies only with --{source}")


def build_workload(args: argparse.Namespace, federation: Federation, config: Path,
                   prefix: str, progress: Progress = quiet,
                   task_cpu_m: int | None = None) -> Workload:
    """The jobs the options describe: read or generated, realized, fitted. Job ids are
    `{prefix}-{key}`, or the bare key when `prefix` is empty. `task_cpu_m`: what every task
    will take whatever it asks (slot mode), for `--target-load` to measure the load the
    cluster sees. `--like` fills in its preset first, so every check sees what it set."""
    args = apply_like(args)
    _check_source_options(args)
    plan = Scaling(max_jobs=args.jobs, sample=args.sample, max_width=args.max_width,
                   max_tasks=args.max_tasks, duration_scale=args.duration_scale,
                   time_scale=args.time_scale, target_load=args.target_load)
    cluster_cpu = sum(node.capacity.cpu_m for lm in federation.lms for node in lm.nodes)
    queues = {queue.name for queue in federation.queues}
    if args.trace is not None and args.trace.suffix == ".jsonl":
        given = [o for o in SYNTHESIS_OPTIONS if getattr(args, o) not in (None, False)]
        if given:
            raise InvalidInput("--" + given[0].replace("_", "-"),
                               f"{args.trace} is a job file, replayed as written; synthesis "
                               f"options do not apply to it")
        # imported here: the job file's models pull in common.wire's (pydantic), some MB of
        # a simulation's peak memory that a .tr trace never uses
        from loadgen.jobfile import read_jobs

        jobs, skipped, errors = read_jobs(args.trace, skip_bad=args.skip_bad_lines)
        _report_skipped(skipped, errors, str(args.trace))
        if not jobs:
            raise InvalidInput(str(args.trace), "has no jobs")
        unknown = sorted({job.user for job in jobs} - queues)
        if unknown:
            raise InvalidInput(str(args.trace),
                               f"user queue(s) {', '.join(unknown)} are not in {config} "
                               f"(queues: {', '.join(sorted(queues))})")
        if prefix:
            jobs = [replace(job, job_id=f"{prefix}-{job.job_id}") for job in jobs]
        jobs = select(jobs, plan, seed=args.seed)
        _report_short(jobs, plan, args.trace.name)
        jobs = fit(jobs, plan, cluster_cpu_m=cluster_cpu, task_cpu_m=task_cpu_m)
        return Workload(jobs, args.trace.name, cluster_cpu)
    realization = _realization(args, federation, config)
    shapes, name = _shapes(args, federation)
    name = label(args, name)
    if not shapes:
        raise InvalidInput(name, "has no jobs")
    shapes = select(shapes, plan, seed=args.seed)
    _report_short(shapes, plan, name)
    jobs = realize(shapes, realization, prefix, progress)
    return Workload(fit(jobs, plan, cluster_cpu_m=cluster_cpu, task_cpu_m=task_cpu_m), name,
                    cluster_cpu)
