"""`megha twin`: one workload on one cluster shape, three ways, and how far apart they are.

    megha twin [WORKLOAD OPTIONS] [--nodes N --gms G --lms L | --config FILE] [--out DIR]
    megha twin calibrate [--calibrate-with "OPTIONS"] [CLUSTER] --out FILE

1. `services`: the real GMs, LMs and worker agents as local processes, with the project's
   RabbitMQ, fed over HTTP by the load generator (twin/services.py); their event logs.
2. `sim-default`: the simulator with `megha simulate`'s default model of time (one constant
   delay for every message, no processing time).
3. `sim-calibrated`: the simulator with a model of time fitted from the services' own logs
   (twin/fit.py, simulator/timemodel.py): a delay per hop, the processing cost per operation.

The model is fitted on a calibration workload (`--calibrate-with`, by default a constrained
synthetic Poisson mix) run on the services first, and judged on the user's workload, so a twin
never grades itself on what it was fitted to; `--calibration FILE` uses a model fitted before.
Everything goes to `--out`: each run's event log, `calibration.json`, and `results.json` in
the experiments' schema (`runs[].name`, `jct`, `allocation`, `counts`), with `divergence`:
per simulation and figure, the larger of its value and the services' over the smaller.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from common.errors import InvalidInput
from common.federation import Federation
from inspection.command import analyse
from inspection.reader import ReadCounts, read_events
from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import add_workload_arguments, build_workload, load_config
from loadgen.workload import ReplayJob, ReplayTask
from simulator.cluster import SLOT, shaped_federation, shaped_federation_text
from simulator.command import parse_node
from simulator.engine import DelayModel
from simulator.eventlog import SimLog
from simulator.experiments.results import (
    Report,
    inspection_page,
    results_document,
    write_reports,
)
from simulator.federated import FederatedSimulation, job_specs
from simulator.timemodel import TimeModel
from twin import compare
from twin.fit import fit
from twin.services import ServicesDidNotRun, ServicesRun, run_on_services

# The judged workload when none is given: YH1_sub's first 200 jobs (9,670 tasks), arrivals
# 100 times closer and tasks 1,000 times shorter: 55 s of arrivals, about 175 tasks/s, a third
# of 1,000 slots busy on average (bursts above: its jobs are wide)
DEFAULT_WORKLOAD = f"--trace {YH1_SUB} --jobs 200 --time-scale 0.01 --duration-scale 0.001"
# The calibration workload: another source and other shapes than the default judged one,
# constrained (placement constraints make refusals and repartitions), about 140 tasks/s. Its
# widths span 1 to 256 tasks so that every hop is measured over the batch sizes wide jobs
# make (a slope per item is not extrapolated past the largest batch measured)
DEFAULT_CALIBRATION = ("--poisson 2 --count 60 --width choice:1,4,16,64,256 --duration exp:1 "
                       "--constraints")
MAX_PROCESSES = 120  # more service processes than this machine can start and keep warm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("action", nargs="?", choices=("run", "calibrate"), default="run",
                        help="run (default): the three runs and their divergence; calibrate: "
                             "only fit a model of time on the services and write it to --out")
    twin = parser.add_argument_group("twin")
    twin.add_argument("--out", type=Path, default=None,
                      help="run: the folder for logs, calibration.json and results.json "
                           "(default twin-out); calibrate: the model's file (default "
                           "calibration.json)")
    twin.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                      help="run: judge this model (from `megha twin calibrate`) instead of "
                           "fitting one first")
    twin.add_argument("--calibrate-with", default=DEFAULT_CALIBRATION, metavar="OPTIONS",
                      help=f"workload options of the calibration run (default: "
                           f"\"{DEFAULT_CALIBRATION}\")")
    twin.add_argument("--html", type=Path, default=None,
                      help="also write megha inspect's report of the three runs (allocation "
                           "CDFs overlaid)")
    twin.add_argument("--grace", type=float, default=120.0,
                      help="seconds after the last arrival for the services to end every job")
    twin.add_argument("--services-logs", type=Path, default=None, metavar="DIR",
                      help="run: judge against the services' run in DIR (an earlier twin's "
                           "OUT/services) instead of running the services again; calibrate: "
                           "fit the model on the logs in DIR instead of a new run")
    twin.add_argument("--amqp-url", default=None,
                      help="a RabbitMQ to use (default: the project's own, on a virtual host "
                           "of the run's own)")
    shape = parser.add_argument_group("cluster (or --config)")
    shape.add_argument("--nodes", type=int, default=None,
                       help="a generated cluster of N nodes (default 1000 without --config)")
    shape.add_argument("--gms", type=int, default=2, help="with --nodes: GMs (default 2)")
    shape.add_argument("--lms", type=int, default=4, help="with --nodes: LMs (default 4)")
    shape.add_argument("--nodes-per-worker", type=int, default=100,
                       help="with --nodes: nodes one worker agent process hosts (default 100)")
    shape.add_argument("--node", default=None, metavar="CPU_M,MEM",
                       help="with --nodes: a node's capacity (default 64 cores, 16 GiB)")
    shape.add_argument("--slots", action="store_true",
                       help="slot mode: every node one slot, every task one slot")
    shape.add_argument("--heartbeat", type=float, default=1.0,
                       help="with --nodes: LM heartbeat interval, s (default 1, the testbed's)")
    add_workload_arguments(parser)


def _workload_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="--calibrate-with", add_help=False)
    add_workload_arguments(parser)
    return parser


def cluster(args: argparse.Namespace, folder: Path) -> tuple[Federation, Path, str]:
    """The federation both sides run, and its file (the services read one)."""
    if args.config is not None:
        if args.nodes is not None:
            raise InvalidInput("--nodes", "give either --config or --nodes, not both")
        if args.slots:
            raise InvalidInput("--slots", "slot mode needs a generated cluster: give --nodes")
        federation, path = load_config(args.config)
        where = f"{path}"
    else:
        nodes = 1000 if args.nodes is None else args.nodes
        options = {"slots": args.slots, "nodes_per_worker": args.nodes_per_worker,
                   "heartbeat_interval": args.heartbeat, "seed": args.seed}
        if args.node is not None:
            options["node"] = parse_node(args.node)
        text = shaped_federation_text(nodes, args.gms, args.lms, **options)
        federation = shaped_federation(nodes, args.gms, args.lms, **options)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "federation.toml"
        path.write_text(text)
        where = (f"{nodes} nodes{' (slots)' if args.slots else ''}, {args.gms} GMs, "
                 f"{args.lms} LMs, heartbeat {args.heartbeat:g} s")
    processes = len(federation.gms) + len(federation.lms) + len(federation.workers())
    if processes > MAX_PROCESSES:
        raise InvalidInput("--nodes-per-worker", f"{where} makes {processes} service "
                                                 f"processes, more than {MAX_PROCESSES} this "
                                                 f"machine can run: host more nodes per "
                                                 f"worker agent")
    return federation, path, f"{where}; {processes} service processes"


def _jobs(args: argparse.Namespace, federation: Federation, config: Path,
          prefix: str) -> tuple[list[ReplayJob], str]:
    workload = build_workload(args, federation, config, prefix=prefix,
                              task_cpu_m=SLOT[0] if args.slots else None)
    jobs = workload.jobs
    if args.slots:  # every task one slot, on the services as in the simulator
        jobs = [replace(job, tasks=tuple(ReplayTask(SLOT[0], SLOT[1], t.duration, t.constraints,
                                                    t.stage, t.nodes) for t in job.tasks))
                for job in jobs]
    return jobs, workload.headline()


def _calibration_jobs(args: argparse.Namespace, federation: Federation,
                      config: Path) -> tuple[list[ReplayJob], str]:
    try:
        options = _workload_parser().parse_args(shlex.split(args.calibrate_with))
    except SystemExit:
        raise InvalidInput("--calibrate-with", f"not workload options: "
                                               f"{args.calibrate_with!r}") from None
    options.config, options.seed = args.config, args.seed + 1
    options.slots = args.slots
    return _jobs(options, federation, config, prefix="cal")


def calibrate(args: argparse.Namespace, federation: Federation, config: Path, folder: Path,
              say=print) -> TimeModel:
    """The calibration workload on the services, and the model their logs give."""
    jobs, headline = _calibration_jobs(args, federation, config)
    say(f"calibration run on the services: {headline}")
    run = run_on_services(config, jobs, folder, amqp_url=args.amqp_url, grace=args.grace,
                          say=say)
    if run.unfinished or run.not_accepted:
        say(f"calibration: {run.unfinished} job(s) unfinished, {run.not_accepted} not "
            f"accepted; fitting on what ran")
    model = fit_logs(folder, federation, {"workload": headline,
                                          "calibrate_with": args.calibrate_with},
                     run.overheads())
    say(f"calibration: {model.describe()}")
    return model


def fit_logs(folder: Path, federation: Federation, source: dict,
             overheads: dict[str, tuple[float, float]] | None = None) -> TimeModel:
    """The model of time the services' logs in `folder` show, on `federation`'s paces, with
    the overheads (per message, per event) measured on their processes."""
    return fit(read_events([str(folder)], ReadCounts()),
               source | {"fitted_at": time.strftime("%Y-%m-%d %H:%M:%S"), "logs": str(folder),
                         "overheads_s": overheads or {}},
               federation.timing.model_dump(), overheads)


def simulate(federation: Federation, jobs: list[ReplayJob], name: str, log: Path,
             model: TimeModel | None, seed: int) -> dict:
    """One simulated run of the same jobs on the same federation; megha inspect's figures."""
    sim_log = SimLog(name, log)
    started = time.perf_counter()
    try:
        sim = FederatedSimulation(federation, job_specs(jobs), sim_log, seed=seed,
                                  processing="model" if model else "none", time_model=model)
        outcome = sim.run()
        sim.check_invariants()
    finally:
        sim_log.close()
    return sim_log.report() | {"wall_s": time.perf_counter() - started,
                               "virtual_s": outcome.virtual_s, "steps": outcome.steps}


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "calibrate":
            return run_calibrate(args)
        return run_twin(args)
    except ServicesDidNotRun as error:
        print(f"megha twin: {error}", file=sys.stderr)
        return 1


def run_twin(args: argparse.Namespace) -> int:
    if args.trace is None and args.alibaba is None and args.poisson is None and \
            getattr(args, "like", None) is None:
        defaults = _workload_parser().parse_args(shlex.split(DEFAULT_WORKLOAD))
        for key in ("trace", "jobs", "time_scale", "duration_scale"):
            setattr(args, key, getattr(defaults, key))
    out = args.out or Path("twin-out")
    model = TimeModel.load(args.calibration) if args.calibration else None
    federation, config, where = cluster(args, out)
    jobs, headline = _jobs(args, federation, config, prefix="")
    print(f"megha twin: {headline}; on {where}; policies job {federation.policies.job}, "
          f"fairness {federation.policies.fairness}, placement {federation.policies.placement}"
          f"; sim-default: delay {DelayModel.parse(None)}, processing none; sim-calibrated: "
          f"{args.calibration or 'fitted on --calibrate-with ' + repr(args.calibrate_with)}",
          flush=True)
    started = time.perf_counter()
    if model is None:
        model = calibrate(args, federation, config, out / "calibration-logs")
        model.save(out / "calibration.json")
    calibrated_s = time.perf_counter() - started
    if args.services_logs is not None:
        services = ServicesRun.load(args.services_logs)
        print(f"services: the run in {services.logs} (not run again)", flush=True)
    else:
        services = run_on_services(config, jobs, out / "services", amqp_url=args.amqp_url,
                                   grace=args.grace)
    if services.unfinished or services.not_accepted:
        print(f"services: {services.unfinished} accepted job(s) unfinished after "
              f"{args.grace:g} s, {services.not_accepted} not accepted: the figures are of the "
              f"jobs that ended", flush=True)
    reports = [analyse("services", [str(services.logs)])[0] | {
        "wall_s": services.wall_s, "peak_rss_mib": services.peak_rss_mib,
        "processes": services.processes, "start_s": services.start_s}]
    for name, time_model in (("sim-default", None), ("sim-calibrated", model)):
        reports.append(simulate(federation, jobs, name, out / f"{name}.log", time_model,
                                args.seed) | {"name": name})
    divergences = {run["name"]: compare.divergence(reports[0], run) for run in reports[1:]}
    hops = compare.hop_medians({"calibration": model, "services": services.logs,
                                "sim-calibrated": out / "sim-calibrated.log"})
    figures = {"divergence": divergences, "targets": compare.TARGETS, "hops": hops,
               "summary": {run["name"]: compare.summary(run) for run in reports},
               "calibration": {"file": str(args.calibration or out / "calibration.json"),
                               "model": model.describe(), "source": model.source,
                               "seconds": calibrated_s},
               "workload": headline, "cluster": where,
               # this process: the replayer, both simulations and the analysis
               "harness_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    out.mkdir(parents=True, exist_ok=True)
    document = results_document("twin", reports, figures=figures, comparison=True)
    write_reports([Report(document, page=inspection_page(document))], out, args.html)
    console = Console() if sys.stdout.isatty() else Console(width=150)
    compare.render(console, reports, divergences)
    compare.render_hops(console, hops)
    print(f"results in {out}/ (results.json; services/, sim-default.log, sim-calibrated.log"
          f"{', calibration.json' if not args.calibration else ''})")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    out = args.out or Path("calibration.json")
    folder = out.parent / f"{out.stem}-logs"
    federation, config, where = cluster(args, folder)
    if args.services_logs is not None:  # a services' run made before: fit its logs
        print(f"megha twin calibrate: the services' logs in {args.services_logs}", flush=True)
        services = ServicesRun.load(args.services_logs)
        model = fit_logs(args.services_logs, federation,
                         {"logs": str(args.services_logs), "cluster": where},
                         services.overheads())
        model.save(out)
        print(f"model of time in {out}: {model.describe()}")
        return 0
    print(f"megha twin calibrate: {where}; workload {args.calibrate_with!r}", flush=True)
    model = calibrate(args, federation, config, folder / "services")
    model.save(out)
    print(f"model of time in {out} (megha simulate --calibration {out}); logs in {folder}/")
    return 0
