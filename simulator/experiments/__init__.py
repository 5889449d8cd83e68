"""`megha experiment NAME`: the paper's simulation studies as commands.

    baselines     megha, centralized, sparrow and random on one cluster and workload
                  (default: YH1_sub on 10,000 nodes, 4 GMs, 25 LMs, slot mode)
    cluster-size  megha on 1,000 to 50,000 nodes (default 10 GMs, 10 LMs, as the paper;
                  the cloudera stand-in, `--like cloudera`)
    gms-lms       megha with other numbers of GMs and LMs (default on 30,000 nodes, the
                  alibaba stand-in, as the paper's Figure 9)
    heartbeat     megha with other LM heartbeat intervals
    components    where megha's allocation time goes, the paper's Figure 7: communication,
                  processing at GM, LM and worker, framework queuing, inconsistency retries
                  (default: the cloudera stand-in, as the paper, on 10,000 nodes, 4 GMs,
                  25 LMs; `components.py`)
    centralized   megha against one GM and one LM, the paper's Figure 6: allocation time
                  percentiles and CDF at 10,000 and 20,000 nodes, on the alibaba stand-in
                  as the paper (`centralized.py`)
    slearn        the SLearn paper's study: every job-size predictor (slearn, 3sigma,
                  3sigma-tl, point-est, las, fifo, oracle) on a drifting synthetic workload
                  and on YH1_sub, at load 1 (`slearn.py`)
    redundancy    the SRPT+R paper's study: SRPT, Fair and LAPS with and without redundant
                  copies, one-task jobs on 100 machines of varying speed (`redundancy.py`);
                  `--preset federated`: the copy policies (none, srpt+r, fair+r, laps+r) on the
                  federated cluster, YH1_sub's jobs on 400 slots of varying speed in 4 LMs, at
                  offered loads 0.5 to 1.2 (`redundancy_cluster.py`)
    packing       the packing-and-placement paper's study: LP-ordered schedulers against PSRS,
                  Tetris, JSQ-MaxWeight, WSPT and FIFO, offline and online, three weight
                  schemes, each run's weighted JCT over the LP lower bound (`packing.py`);
                  `--preset federated`: the GMs' job policies (fifo, wspt, psrs, lp) with each
                  placement (first_fit, tetris) on the federated simulator at loads 0.9 and
                  1.2 (`packing_cluster.py`)
    fairness      the Megha paper's fairness study (Figures 10/11): 4 user queues of shares
                  10/25/15/50% on 3 GMs contending in staggered phases, on 200, 500 and 1,500
                  nodes (`--sizes`), every variant of Algorithm 2 (`fairness.py`)

The Megha paper's figures (baselines, cluster-size, gms-lms, heartbeat, components,
centralized) run with `--processing model` by default: each service a single server taking
the calibrated cost of its work (simulator/processing.py, docs/processing.md); the other
studies with none, as `megha simulate`.

Where no workload is given, each of the paper's figures runs on the paper's workload for it
as our stand-in (`--like`, docs/workloads.md); the others on the bundled YH1_sub trace in slot
mode.

`--values` changes what is swept (schedulers; node counts; GxL pairs; seconds). Every run's
event log, the figures of all runs (JSON) and a side-by-side table go to `--out`, and
`--html` adds megha inspect's report of them all. The workload options are `megha replay`'s;
`--jobs 300` makes any experiment quick.

The runs of an experiment are independent: they go to a pool of `--workers` processes
(default one per core; 1: one after the other in this process) or, with `--dask ADDRESS`, to a
Dask cluster (simulator/sweep.py, docs/sweeps.md). The results are the same wherever they ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from common.errors import InvalidInput
from inspection.compare import compare
from inspection.terminal import render_comparison
from simulator import command as simulate
from simulator import sweep
from simulator.cluster import shaped_federation
from simulator.experiments import centralized, components, fairness, packing, redundancy

ROOT = Path(__file__).resolve().parent.parent.parent
BUNDLED_TRACE = ROOT / "deploy" / "workloads" / "YH1_sub.tr"
NODES_PER_WORKER = 100  # `megha simulate`'s default, for the experiments that keep it
EXPERIMENTS = {
    # name: (what --values lists, its default, cluster defaults)
    "baselines": ("schedulers", "megha,centralized,sparrow,random",
                  {"nodes": 10_000, "gms": 4, "lms": 25}),
    "cluster-size": ("node counts", "1000,5000,10000,20000,50000", {"gms": 10, "lms": 10}),
    "gms-lms": ("GxL pairs", "1x10,5x10,10x10,10x5,10x20", {"nodes": 30_000}),
    "heartbeat": ("intervals in seconds", "1,5,10,30", {"nodes": 10_000, "gms": 4, "lms": 25}),
    # the calibrated model, and services 10 and 33 times faster: how fast they must be for
    # communication to dominate as in the paper
    "components": ("schedulers (SCHEDULER@SCALE: its costs times SCALE)",
                   "megha,megha@0.1,megha@0.03", {"nodes": 10_000, "gms": 4, "lms": 25}),
    "centralized": ("node counts", "10000,20000", {"gms": 4, "lms": 25}),
    "slearn": ("job policies", "slearn,3sigma,3sigma-tl,point-est,las,fifo,oracle",
               {"nodes": 500, "gms": 2, "lms": 5}),
    "redundancy": ("allocation policies", "srpt,srpt+r,fair,fair+r,laps,laps+r", {}),
    "packing": ("packing algorithms", "per setting (see packing.py)", {}),
    "fairness": ("fairness variants", fairness.DEFAULT_VARIANTS, {}),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment", choices=list(EXPERIMENTS), help="which study")
    parser.add_argument("--values", default=None,
                        help="what to sweep, comma-separated (see the list above)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the logs, results.json and table (default "
                             "experiments/NAME)")
    parser.add_argument("--html", type=Path, default=None,
                        help="also write megha inspect's HTML report of every run")
    parser.add_argument("--workers", type=int, default=None,
                        help="runs at once, one process each (default: the CPU count; 1: one "
                             "after the other in this process)")
    parser.add_argument("--dask", default=None, metavar="ADDRESS",
                        help="run on the Dask cluster whose scheduler is at ADDRESS "
                             "(tcp://host:8786) instead (the 'sweep' extra; docs/sweeps.md)")
    simulate.add_arguments(parser)
    redundancy.add_arguments(parser)
    packing.add_arguments(parser)
    fairness.add_arguments(parser)
    for action in parser._actions:  # the cluster's defaults depend on the experiment
        if action.dest in ("gms", "lms", "nodes_per_worker"):
            action.default = None
        if action.dest == "processing":  # per experiment: see `PAPER_FIGURES`
            action.default = None


def _runs(name: str, values: list[str]) -> list[tuple[str, dict]]:
    """(run name, what changes from the base) for each value."""
    runs = []
    for value in values:
        try:
            if name == "baselines":
                if value not in simulate.SCHEDULERS:
                    raise ValueError
                runs.append((value, {"scheduler": value}))
            elif name == "cluster-size":
                runs.append((f"{int(value)}-nodes", {"nodes": int(value)}))
            elif name == "gms-lms":
                gms, lms = (int(part) for part in value.lower().split("x"))
                runs.append((f"{gms}gm-{lms}lm", {"gms": gms, "lms": lms}))
            else:
                runs.append((f"heartbeat-{float(value):g}s", {"heartbeat": float(value)}))
        except ValueError:
            raise InvalidInput("--values", f"{value!r} is not one of the {EXPERIMENTS[name][0]} "
                                           f"{name} sweeps") from None
    return runs


# generic experiments with runs and figures of their own: (run name, change) per value, and
# the figures they add to results.json (printed as they are made)
STUDIES = {"components": components, "centralized": centralized}
# the Megha paper's figures: their services take time (`--processing model` by default), as
# the paper's Figures 6 and 7 need a busy GM and LM to show
# the workload each of the paper's figures ran on, as our stand-ins (docs/workloads.md),
# where no source is given: Figures 6 and 9 on alibaba, 7 on cloudera; Figure 8 names none,
# and cloudera's stand-in (YH1_sub's jobs at their own rate) keeps its 1,000-node end from
# saturating, which would hide the figure's subject, the cost of a larger global state
PAPER_WORKLOADS = {"centralized": "alibaba", "gms-lms": "alibaba", "components": "cloudera",
                   "cluster-size": "cloudera"}
PAPER_FIGURES = ("baselines", "cluster-size", "gms-lms", "heartbeat", "components",
                 "centralized")


def run(args: argparse.Namespace) -> int:
    sweep.check(args.workers, args.dask)
    if args.processing is None:
        args.processing = "model" if args.experiment in PAPER_FIGURES else "none"
    if args.experiment == "slearn":
        from simulator.experiments import slearn

        return slearn.run(args)
    if args.experiment == "redundancy":
        return redundancy.run(args)
    if args.experiment == "packing":
        return packing.run(args)
    if args.experiment == "fairness":
        return fairness.run(args)
    what, default_values, cluster_defaults = EXPERIMENTS[args.experiment]
    for option in ("log", "results"):
        if getattr(args, option) is not None:
            raise InvalidInput(f"--{option}", "an experiment writes one log per run and "
                                              "results.json into --out")
    if args.config is not None:
        raise InvalidInput("--config", "experiments generate their clusters: use --nodes, "
                                       "--gms, --lms")
    if (args.trace is None and args.alibaba is None and args.poisson is None
            and getattr(args, "like", None) is None):
        if args.experiment in PAPER_WORKLOADS:  # the paper's workload for that figure
            args.like = PAPER_WORKLOADS[args.experiment]
        else:
            args.trace = BUNDLED_TRACE
            args.slots = True  # the bundled trace has no requests: Sparrow's slot model
    simulate.check_slot_options(args)
    base = {"nodes": args.nodes, "gms": args.gms, "lms": args.lms, "heartbeat": args.heartbeat,
            "scheduler": args.scheduler}
    for key, value in cluster_defaults.items():
        if base[key] is None:
            base[key] = value
    base["gms"] = base["gms"] or 4
    base["lms"] = base["lms"] or 25
    out = args.out or Path("experiments") / args.experiment
    out.mkdir(parents=True, exist_ok=True)
    values = (args.values or default_values).split(",")
    study = STUDIES.get(args.experiment)
    shapes = [(name, _scheduler_shape(base | change))
              for name, change in (study.runs(values) if study else
                                   _runs(args.experiment, values))]
    results = sweep.run_sweep(
        [sweep.Run(name, _simulate_shape, (args, shape, name),
                   None if args.no_log else out / f"{name}.log")
         for name, shape in shapes],
        workers=args.workers, dask=args.dask, on_done=sweep.progress_printer(run_line))
    reports = [result | {"name": name, "shape": shape}
               for (name, shape), result in zip(shapes, results, strict=True)]
    write_results(args.experiment, out, reports, args.html,
                  study.figures(reports) if study else None)
    print(f"results in {out}/ (results.json, table.txt"
          f"{', one event log per run' if not args.no_log else ''})")
    return 0


def _scheduler_shape(shape: dict) -> dict:
    """`shape` as its scheduler runs it: centralized is one GM and one LM."""
    return shape | {"gms": 1, "lms": 1} if shape["scheduler"] == "centralized" else shape


def _simulate_shape(args: argparse.Namespace, shape: dict, name: str,
                    log: Path | None = None) -> dict:
    """One run of a generic experiment, wherever the sweep sends it: the cluster of `shape`
    (built here, not shipped: 50,000 nodes are quicker to make than to pickle), the workload
    of `args`; megha inspect's figures of it."""
    heartbeat = 10.0 if shape["heartbeat"] is None else shape["heartbeat"]
    federation = shaped_federation(
        shape["nodes"], shape["gms"], shape["lms"], slots=args.slots,
        node=simulate.parse_node(args.node),
        nodes_per_worker=args.nodes_per_worker or NODES_PER_WORKER,
        heartbeat_interval=heartbeat, seed=args.seed)
    federation = simulate.with_overrides(federation, args)
    where = (f"{shape['nodes']} nodes, {shape['gms']} GMs, {shape['lms']} LMs, heartbeat "
             f"{heartbeat:g} s")
    if "processing" in shape:  # components' SCHEDULER@SCALE: its own processing model
        args = argparse.Namespace(**(vars(args) | {"processing": shape["processing"]}))
        where += f", processing {shape['processing']}"
    return simulate.simulate_once(args, shape["scheduler"], federation, where, log, name)


def run_line(report: dict) -> str:
    """A finished simulation in a few words, for the sweep's line about it."""
    jct = report["jct"]["overall"]
    mean = f"mean JCT {jct['mean']:.1f} s" if jct.get("count") else "no job ended"
    return f"{mean}, virtual {report['virtual_s']:,.0f} s"


def write_results(experiment: str, out: Path, reports: list[dict], html: Path | None,
                  figures: dict | None = None) -> dict:
    """results.json (the shared schema: `runs[].name`, `jct`, `allocation`, `counts`, ...,
    the comparison, and the experiment's own `figures` if it has some), table.txt, the table
    on the terminal, and the HTML report if asked; the comparison."""
    table = compare(reports)
    (out / "results.json").write_text(json.dumps({"experiment": experiment,
                                                  "runs": reports, "comparison": table}
                                                 | ({"figures": figures} if figures else {}),
                                                 indent=1))
    console = Console() if sys.stdout.isatty() else Console(width=140)
    render_comparison(console, table)
    with (out / "table.txt").open("w") as file:
        render_comparison(Console(file=file, width=140), table)
    if html is not None:
        from inspection.html import write_html
        from inspection.plots import write_plots

        result = {"runs": reports, "comparison": table}
        for report in reports:
            report.setdefault("read", {"lines": 0, "events": 0, "malformed": 0, "examples": []})
        write_html(result, write_plots(result, out / "plots"), html)
        print(f"report in {html}")
    return table
