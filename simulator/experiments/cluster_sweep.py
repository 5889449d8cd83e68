"""A sweep of a simulated cluster: the experiment behind the Megha paper's figures
(baselines, cluster-size, gms-lms, heartbeat in megha_figures.py; components.py;
centralized.py), each one a `ClusterSweep` with its own values and defaults.

A run is one workload on one generated cluster under one scheduler: the base shape
(`--nodes`, `--gms`, `--lms`, `--heartbeat`, `--scheduler`: the experiment's defaults where not
given) with what one value of `--values` changes, so the options the values set are not
offered. Each run's `shape` is in its results; the centralized scheduler is one GM and one
LM whatever the shape says.

Their services take time (`--processing model` by default: each service a single server
taking the calibrated cost of its work, simulator/processing.py), as the paper's Figures 6 and
7 need a busy GM and LM to show. Where no workload is given, each figure runs on the paper's
workload for it as our stand-in (`workload`, `--like`, docs/workloads.md), the others on the
bundled YH1_sub trace in slot mode (the trace has no requests: Sparrow's slot model).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.table import Table

from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import add_workload_arguments
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.common import (
    NODES_PER_WORKER,
    add_node_option,
    add_shape_options,
    add_values_option,
    at_least,
    simulated_run_line,
)
from simulator.experiments.results import Report, inspection_page, results_document
from simulator.run_settings import (
    Overrides,
    RunSettings,
    Timing,
    add_check_argument,
    add_policy_arguments,
    add_probe_ratio_argument,
    add_timing_arguments,
    workload_options,
)
from simulator.sweep import Run

# the base shape's keys, each run's `shape` in results.json (components' SCHEDULER@SCALE adds
# "processing"), and their values where the experiment neither offers nor sets them
BASE = {"nodes": None, "gms": 4, "lms": 25, "heartbeat": None, "scheduler": "megha"}
# values -> (run name, change from the base shape), bad values an InvalidInput on --values
Plan = Callable[[tuple[str, ...]], list[tuple[str, dict]]]
# the runs' reports -> the experiment's `figures` in results.json, and its tables
Figures = Callable[[list[dict]], tuple[dict, tuple[Table, ...]]]


@dataclass(frozen=True)
class SharedSettings:
    """What every run of a sweep shares beside its shape."""

    node: tuple[int, int]  # a node's capacity
    nodes_per_worker: int
    overrides: Overrides
    settings: RunSettings


@dataclass(frozen=True)
class SweepOptions:
    values: tuple[str, ...]
    base: dict  # the base shape: `BASE`'s keys
    shapes: tuple[tuple[str, dict], ...]  # (run name, its shape), in the runs' order
    shared: SharedSettings


@dataclass(frozen=True)
class ClusterSweep:
    """One of the Megha paper's figures as an experiment (this module's docstring)."""

    name: str
    summary: str
    swept: str  # what --values lists: "schedulers"
    default_values: str
    plan: Plan
    defaults: dict  # the base shape's defaults (of `BASE`'s keys) where the paper's differ
    sets: frozenset[str] = frozenset()  # the keys of the base shape the values set
    workload: str | None = None  # the paper's workload (--like) when none is given
    figures_of: Figures | None = None  # the experiment's own figures, if it has some

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group(f"{self.name}: the sweep and the cluster")
        add_values_option(group, self.swept, self.default_values)
        if "scheduler" not in self.sets:
            group.add_argument("--scheduler", choices=simulate.SCHEDULERS, default="megha",
                               help="megha (default), centralized (one GM, one LM), sparrow, "
                                    "random")
        base = BASE | self.defaults
        add_shape_options(group, {key: base[key] for key in ("nodes", "gms", "lms", "heartbeat")
                                  if key not in self.sets}
                          | {"nodes_per_worker": NODES_PER_WORKER},
                          said={"heartbeat": "10, the paper's"})
        add_node_option(group)
        group.add_argument("--slots", action="store_true",
                           help="slot mode: every node one slot, every task one slot (Sparrow's "
                                "and the published Megha simulator's model; the default with "
                                "the bundled trace)")
        model = parser.add_argument_group("the model")
        add_timing_arguments(model, processing="model")
        add_policy_arguments(model)
        add_probe_ratio_argument(model)
        add_check_argument(model)
        # the experiment generates its clusters: no --config
        add_workload_arguments(parser, config=False,
                               trace_default="the paper's workload for the figure, else the "
                                             "bundled YH1_sub.tr")

    def options(self, args: argparse.Namespace) -> SweepOptions:
        settings = self._settings(args)
        given = vars(args)
        base = BASE | self.defaults | {key: given[key] for key in BASE if key in given}
        for key in ("nodes", "gms", "lms"):
            at_least(f"--{key}", base[key], 1)
        at_least("--nodes-per-worker", args.nodes_per_worker, 1)
        values = tuple((args.values or self.default_values).split(","))
        shapes = tuple((name, _scheduler_shape(base | change))
                       for name, change in self.plan(values))
        shared = SharedSettings(simulate.parse_node(args.node), args.nodes_per_worker,
                                Overrides.from_args(args), settings)
        shared.overrides.check()
        return SweepOptions(values, base, shapes, shared)

    def _settings(self, args: argparse.Namespace) -> RunSettings:
        """The runs' settings: the workload of the options, or the experiment's own."""
        workload = workload_options(args)
        slots = args.slots
        if (workload.trace is None and workload.alibaba is None and workload.poisson is None
                and workload.like is None):
            if self.workload is not None:  # the paper's workload for that figure
                workload.like = self.workload
            else:  # the bundled trace has no requests: Sparrow's slot model
                workload.trace, slots = YH1_SUB, True
        settings = RunSettings(
            workload, Timing(args.delay, args.calibration), processing=args.processing,
            slots=slots, probe_ratio=args.probe_ratio, check=not args.no_check)
        settings.check_slots()
        settings.timing.check()
        return settings

    def describe(self, options: SweepOptions) -> str:
        labels = {"scheduler": "scheduler {}", "nodes": "{} nodes", "gms": "{} GMs",
                  "lms": "{} LMs", "heartbeat": "heartbeat {:g} s"}
        base = options.base | {"heartbeat": options.base["heartbeat"] or 10.0}
        shape = ", ".join(label.format(base[key]) for key, label in labels.items()
                          if key not in self.sets)
        settings = options.shared.settings
        return (f"{self.swept} {', '.join(options.values)}; {shape}; workload "
                f"{_workload(settings.workload)}{', slot mode' if settings.slots else ''}; "
                f"policies {options.shared.overrides.describe() or 'as generated'}; "
                f"{settings.timing.describe()}, processing {settings.processing}")

    def runs(self, options: SweepOptions, logs: Path | None) -> list[Run]:
        return [Run(name, simulate_shape, (options.shared, shape, name),
                    None if logs is None else logs / f"{name}.log")
                for name, shape in options.shapes]

    def run_line(self, result: dict) -> str:
        return simulated_run_line(result)

    def figures(self, options: SweepOptions, results: list[dict]) -> list[Report]:
        runs = [result | {"name": name, "shape": shape}
                for (name, shape), result in zip(options.shapes, results, strict=True)]
        figures, tables = self.figures_of(runs) if self.figures_of else (None, ())
        document = results_document(self.name, runs, figures=figures, comparison=True)
        return [Report(document, tables, inspection_page(document))]


def _scheduler_shape(shape: dict) -> dict:
    """`shape` as its scheduler runs it: centralized is one GM and one LM."""
    return shape | {"gms": 1, "lms": 1} if shape["scheduler"] == "centralized" else shape


def _workload(workload: argparse.Namespace) -> str:
    if workload.like is not None:
        return f"the {workload.like} stand-in"
    if workload.trace is not None:
        return workload.trace.name
    return "Alibaba's sample" if workload.alibaba is not None else f"Poisson({workload.poisson})"


def simulate_shape(shared: SharedSettings, shape: dict, name: str,
                   log: Path | None = None) -> dict:
    """One run of a sweep, wherever the sweep sends it: the cluster of `shape` (built here, not
    shipped: 50,000 nodes are quicker to make than to pickle), the workload of `shared`;
    megha inspect's figures of it."""
    settings = shared.settings
    heartbeat = 10.0 if shape["heartbeat"] is None else shape["heartbeat"]
    federation = shaped_federation(
        shape["nodes"], shape["gms"], shape["lms"], slots=settings.slots, node=shared.node,
        nodes_per_worker=shared.nodes_per_worker, heartbeat_interval=heartbeat,
        seed=settings.seed)
    federation = shared.overrides.apply(federation)
    where = (f"{shape['nodes']} nodes, {shape['gms']} GMs, {shape['lms']} LMs, heartbeat "
             f"{heartbeat:g} s")
    if "processing" in shape:  # components' SCHEDULER@SCALE: its own processing model
        settings = replace(settings, processing=shape["processing"])
        where += f", processing {shape['processing']}"
    return simulate.simulate_once(settings, shape["scheduler"], federation, where, log, name)
