"""`megha simulate`: one workload on one simulated cluster under one scheduler, with the event
log the services would write (`megha inspect` reads it) and the headline figures printed.

The cluster is a federation file (`--config`, as the testbed's) or a shape (`--nodes`,
`--gms`, `--lms`); the workload takes the options of `megha replay`. Schedulers: `megha` (the
federated core), `centralized` (the same core as one GM and one LM over the whole cluster),
`sparrow` and `random` (simulator/baselines.py).

The experiments (simulator/experiments/) run `simulate_once` too, with the typed settings of
simulator/run_settings.py instead of the command line.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.errors import InvalidInput
from common.federation import MACHINE_PROFILES, RANDOM_PROFILE, Federation
from loadgen.sources import add_workload_arguments, build_workload, load_config
from simulator.baselines import RandomSimulation, SparrowSimulation
from simulator.cluster import PAPER_NODE, SLOT, shaped_federation
from simulator.engine import DelayModel
from simulator.eventlog import SimLog
from simulator.federated import (
    DEFAULT_STORY_ENTRIES,
    FederatedSimulation,
    check_story_entries,
    job_specs,
)
from simulator.run_settings import (
    Overrides,
    RunSettings,
    Timing,
    add_check_argument,
    add_policy_arguments,
    add_probe_ratio_argument,
    add_timing_arguments,
    check_slot_options,
    workload_options,
)
from simulator.timemodel import TimeModel

SCHEDULERS = ("megha", "centralized", "sparrow", "random")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sim = parser.add_argument_group("simulation")
    sim.add_argument("--scheduler", choices=SCHEDULERS, default="megha",
                     help="megha (default), centralized (one GM, one LM), sparrow, random")
    sim.add_argument("--nodes", type=int, default=None,
                     help="a generated cluster of N nodes instead of --config's")
    sim.add_argument("--gms", type=int, default=4, help="with --nodes: GMs (default 4)")
    sim.add_argument("--lms", type=int, default=25, help="with --nodes: LMs (default 25)")
    sim.add_argument("--nodes-per-worker", type=int, default=100,
                     help="with --nodes: nodes one worker agent hosts (default 100)")
    sim.add_argument("--node", default=f"{PAPER_NODE[0]},{PAPER_NODE[1]}", metavar="CPU_M,MEM",
                     help="with --nodes: a node's capacity (default 64 cores, 16 GiB: the "
                          "paper's)")
    sim.add_argument("--profile", choices=PROFILE_CHOICES, default="A",
                     help="with --nodes: the nodes' machine-constraint profile (default A; "
                          "random: A, B or C drawn per LM from --seed, as the Megha paper "
                          "draws one per cluster)")
    sim.add_argument("--heartbeat", type=float, default=None,
                     help="LM heartbeat interval, s (default: the federation file's; 10 for "
                          "--nodes, the paper's)")
    sim.add_argument("--slots", action="store_true",
                     help="slot mode: every node one slot, every task one slot (Sparrow's "
                          "and the published Megha simulator's model)")
    add_timing_arguments(sim)
    add_policy_arguments(sim)
    add_probe_ratio_argument(sim)
    sim.add_argument("--log", type=Path, default=None,
                     help="the event log (default sim-logs/<scheduler>.log)")
    sim.add_argument("--no-log", action="store_true", help="write no event log")
    sim.add_argument("--results", type=Path, default=None,
                     help="write the run's figures (megha inspect's JSON) here")
    sim.add_argument("--story-entries", type=_story_entries, default=DEFAULT_STORY_ENTRIES,
                     metavar="N",
                     help="megha and centralized: the last N state transitions each simulated "
                          "GM, LM and worker keeps as its story, the history an impossible "
                          "transition's error shows (the services keep 100,000 per GM and LM "
                          f"for GET /v1/debug/story; default {DEFAULT_STORY_ENTRIES:,}: a few "
                          "steps of each core, and memory flat; 0 keeps none). Raise it to "
                          "rerun a failed run with more history")
    add_check_argument(sim)
    add_workload_arguments(parser)


def _story_entries(text: str) -> int:
    """--story-entries' value, checked here so a bad one fails before anything runs."""
    try:
        entries = int(text)
    except ValueError:
        entries = text
    try:
        check_story_entries(entries)
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(error.message) from None
    return entries


def cluster(args: argparse.Namespace) -> tuple[Federation, Path | str]:
    centralized = args.scheduler == "centralized"
    if args.nodes is None:
        federation, path = load_config(args.config)
        if centralized:
            raise InvalidInput("--scheduler", "centralized needs a generated cluster: give "
                                              "--nodes")
        if args.heartbeat is not None:
            raise InvalidInput("--heartbeat", "set the interval in the federation file "
                                              "([timing]) or use --nodes")
        if args.slots:
            raise InvalidInput("--slots", "slot mode needs a generated cluster: give --nodes")
        return Overrides.from_args(args).apply(federation), path
    if args.config is not None:
        raise InvalidInput("--nodes", "give either --config or --nodes, not both")
    node = parse_node(args.node)
    gms, lms = (1, 1) if centralized else (args.gms, args.lms)
    federation = shaped_federation(
        args.nodes, gms, lms, slots=args.slots, node=node, nodes_per_worker=args.nodes_per_worker,
        heartbeat_interval=10.0 if args.heartbeat is None else args.heartbeat, seed=args.seed,
        profile=args.profile)
    profiles = "" if args.profile == "A" else ", profiles " + ", ".join(
        f"{lm.id} {lm.profile}" for lm in federation.lms)
    return (Overrides.from_args(args).apply(federation),
            f"{args.nodes} nodes, {gms} GMs, {lms} LMs{profiles}")


PROFILE_CHOICES = (*sorted(MACHINE_PROFILES), RANDOM_PROFILE)


def parse_node(text: str) -> tuple[int, int]:
    """`--node CPU_M,MEM_MIB`."""
    try:
        cpu, mem = (int(part) for part in text.split(","))
    except ValueError:
        cpu = mem = 0
    if min(cpu, mem) < 1:
        raise InvalidInput("--node", f"expected CPU_M,MEM_MIB, got {text!r}")
    return cpu, mem


class _Bar:
    """Jobs ended out of all, and the virtual clock, on a terminal; silent in a log."""

    def __init__(self) -> None:
        self.bar = None
        if sys.stderr.isatty():  # rich only then: a run's memory starts with its imports
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("jobs, virtual {task.fields[clock]}"),
                                TimeElapsedColumn(), console=Console(file=sys.stderr))
            self.task = self.bar.add_task("run", total=None, clock="0 s")
            self.bar.start()

    def __call__(self, now: float, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, clock=f"{now:,.0f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off for a whole run, its report included, and the
    run's objects frozen after it instead of scanned.

    The engine pauses the collector while stepping (simulator/engine.py). Switched back on
    at the end of the stepping, its first passes would scan every object the run made, all
    still in the youngest generation: 2-3 s after a 10,000-node run (benchmarks/bench_sim.py).
    `_simulate` collects once instead, when the run's cores and jobs have become garbage, so
    that its report reuses their memory (under a second). The next run (experiments run
    several) unfreezes what is left and collects what is garbage by then.
    """
    if gc.get_freeze_count():
        gc.unfreeze()
        gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def simulate_once(settings: RunSettings, scheduler: str, federation: Federation,
                  where: str, log_path: Path | None, name: str | None = None) -> dict:
    """One run: the workload of `settings` on `federation` under `scheduler`; prints a few
    lines and returns megha inspect's figures with the run's wall time, virtual time and
    steps."""
    _fix_mmap_threshold()
    with _collector_paused():
        return _simulate(settings, scheduler, federation, where, log_path, name)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # glibc's own initial one


def _fix_mmap_threshold() -> None:
    """glibc serves a block over its mmap threshold with a mapping of its own, unmapped when
    freed. But by default freeing one raises the threshold to its size: from then on the
    tables a run grows (the analysis's columns, the dicts of 100,000 ended attempts and
    completions) are resized on the heap, and the holes each resize leaves there are never
    returned. Fixed at its initial value, YH1_sub's peak RSS at 10,000 nodes was 13 MB
    lower (benchmarks/bench_sim.py), its wall within this machine's spread. A process-wide
    setting, for every run after; nothing to do without glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _simulate(settings: RunSettings, scheduler: str, federation: Federation,
              where: str, log_path: Path | None, name: str | None) -> dict:
    # in slot mode each task takes a whole slot, whatever the workload asked for it
    workload = build_workload(settings.workload, federation, Path(str(where)), prefix="",
                              task_cpu_m=SLOT[0] if settings.slots else None)
    jobs = job_specs(workload.jobs, SLOT if settings.slots else None)
    delay, time_model, timing = settings.timing.resolve(scheduler)
    processing = settings.processing or ("model" if time_model else "none")  # the default
    log = SimLog(name or scheduler, log_path)
    tasks = sum(len(job.tasks) for job in jobs)
    print(f"simulating {scheduler} on {where}: {len(jobs)} jobs, {tasks} tasks from "
          f"{workload.name}; {timing}, processing {processing}"
          f"{', slot mode' if settings.slots else ''}{story_entries(settings, scheduler)}; "
          f"{policies_in_force(scheduler, federation)}"
          f"{queue_assignment(settings.workload, workload.jobs, federation)}", flush=True)
    del workload  # the workload tools' jobs, a record per task: the specs are all a run needs
    bar = _Bar()
    started = time.perf_counter()
    try:
        virtual, steps, rejected = _run(settings, scheduler, federation, jobs, log, bar, delay,
                                        time_model, processing)
    finally:
        bar.close()
        log.close()
    wall = time.perf_counter() - started
    # The run's cores and jobs are garbage now, mostly in cycles (a GM's task and job records
    # refer to each other) that the paused collector leaves alone, and the report needs
    # memory of its own for a moment. One collection first (under a second after a
    # 10,000-node run) keeps the peak near the run's own.
    del jobs
    gc.collect()
    report = log.report()
    allocation, jct = report["allocation"]["overall"], report["jct"]["overall"]
    print(f"  wall {wall:.2f} s, virtual {virtual:,.0f} s, {steps:,} steps, {log.events:,} "
          f"events{', ' + str(rejected) + ' jobs rejected' if rejected else ''}")
    if allocation.get("count"):
        print(f"  allocation ms over {allocation['count']} tasks: p50 "
              f"{allocation['p50'] * 1e3:.2f}  p90 {allocation['p90'] * 1e3:.2f}  p99 "
              f"{allocation['p99'] * 1e3:.2f}  max {allocation['max'] * 1e3:.2f}  mean "
              f"{allocation['mean'] * 1e3:.2f}")
    if jct.get("count"):
        weighted = report["jct"].get("weighted_mean") if report["jct"].get("weighted") else None
        print(f"  jct s over {jct['count']} jobs: mean {jct['mean']:.2f}  p50 {jct['p50']:.2f}"
              f"  p99 {jct['p99']:.2f}"
              + ("" if weighted is None else f"  weighted mean {weighted:.2f}"))
    retries = retry_summary(report.get("counts", {}))
    if retries:
        print(f"  {retries}")
    if log_path is not None:
        print(f"  event log {log_path} (megha inspect {log_path})", flush=True)
    return report | {"wall_s": wall, "virtual_s": virtual, "steps": steps,
                     "rejected_jobs": rejected}


def retry_summary(counts: dict) -> str:
    """What the run did again, per task started: launches refused (by why), preemptions
    asked and refused, requeues. Under saturation these, not the tasks, are most of a run's
    work (and its wall): a stale view's launch is placed, refused, answered and requeued.
    Empty for a run that retried nothing."""
    started = counts.get("tasks_started", 0)
    refused, asked = counts.get("launches_refused", 0), counts.get("preemption_attempts", 0)
    requeues = counts.get("requeues", 0)
    if not started or not (refused or asked or requeues):
        return ""
    why = ", ".join(f"{reason} {n / started:.2f}" for reason, n in
                    sorted(counts.get("launches_refused_by_reason", {}).items()))
    return (f"per task started: {refused / started:.2f} launches refused"
            + (f" ({why})" if why else "")
            + f", {asked / started:.2f} preemptions asked "
            f"({counts.get('preemptions_refused', 0) / started:.2f} refused), "
            f"{requeues / started:.2f} requeues")


def story_entries(settings: RunSettings, scheduler: str) -> str:
    """The cores' story length, for the run's first line, if not the default."""
    if settings.story_entries == DEFAULT_STORY_ENTRIES:
        return ""
    if scheduler not in ("megha", "centralized"):
        return ", --story-entries applies to megha and centralized"
    return f", stories of {settings.story_entries:,} entries per core"


def _run(settings: RunSettings, scheduler: str, federation: Federation, jobs: list,
         log: SimLog, progress: _Bar, delay: DelayModel, time_model: TimeModel | None,
         processing: str) -> tuple[float, int, int]:
    """The run itself, its checks included: its virtual time, steps and rejected jobs. The
    simulation is dropped on return, for `_simulate` to collect. `jobs` is emptied once the
    simulation holds them (see below)."""
    if scheduler in ("sparrow", "random"):
        kind = SparrowSimulation if scheduler == "sparrow" else RandomSimulation
        extra = {"probe_ratio": settings.probe_ratio} if scheduler == "sparrow" else {}
        sim = kind(federation, jobs, log, delay=delay, seed=settings.seed, progress=progress,
                   **extra)
        sim.run()
        return sim.engine.now, sim.engine.steps, 0
    sim = FederatedSimulation(federation, jobs, log, delay=None if time_model else delay,
                              processing=processing, seed=settings.seed, progress=progress,
                              time_model=time_model, story_entries=settings.story_entries)
    # `_simulate`'s list, which it drops after the run anyway: emptied now, it no longer keeps
    # every job's specs to the end, and the simulation frees each job's as it ends
    jobs.clear()
    outcome = sim.run()
    if settings.check:
        sim.check_invariants()
    return outcome.virtual_s, outcome.steps, len(outcome.rejected)


def policies_in_force(scheduler: str, federation: Federation) -> str:
    """The GMs' job, fairness and placement policies, for the run's first line (sparrow and
    random are models of their own: none of them applies)."""
    if scheduler not in ("megha", "centralized"):
        return f"{scheduler}'s own policies"
    policies = federation.policies
    ends = ", LMs report each end at once" if federation.timing.report_ends else ""
    refused = policies.fairness_options.resolve(policies.fairness).refused
    return (f"job policy {policies.job}, fairness {policies.fairness}, placement "
            f"{policies.placement}, refused tasks to their job's {refused}{ends}")


def queue_assignment(workload: argparse.Namespace, jobs: list, federation: Federation) -> str:
    """How the workload gave its jobs to the user queues (loadgen's `--users`: by default a
    queue drawn for each job, every queue of the federation equally; a job file names its
    own), with the jobs each queue got."""
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.user] = counts.get(job.user, 0) + 1
    got = ", ".join(f"{queue} {count}" for queue, count in sorted(counts.items()))
    def queues(count: int) -> str:
        return "1 queue" if count == 1 else f"{count} queues"

    if workload.trace is not None and workload.trace.suffix == ".jsonl":
        how = f"{queues(len(counts))} as the job file names them"
    elif workload.users:
        listed = [item for item in workload.users.split(",") if item.strip()]
        how = f"{queues(len(listed))} at random, weighted by --users {workload.users}"
    elif len(federation.queues) == 1:
        how = "the federation's one queue"
    else:
        how = f"the federation's {len(federation.queues)} queues at random, equally"
    return f"; jobs to {how} ({got})"


def run(args: argparse.Namespace) -> int:
    check_slot_options(args.slots, args)
    federation, where = cluster(args)
    path = None if args.no_log else (args.log or Path("sim-logs") / f"{args.scheduler}.log")
    # The run's million-odd objects are garbage in cycles (through the cores' records), and
    # collected before the report (`_simulate`); what is left `simulate_once` leaves frozen,
    # so it goes with the process instead of costing a collection at exit.
    settings = RunSettings(workload_options(args), Timing(args.delay, args.calibration),
                           processing=args.processing, slots=args.slots,
                           probe_ratio=args.probe_ratio, check=not args.no_check,
                           story_entries=args.story_entries)
    result = simulate_once(settings, args.scheduler, federation, str(where), path)
    if args.results is not None:
        args.results.write_text(json.dumps(result, indent=1))
    return 0
