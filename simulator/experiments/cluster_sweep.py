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

They run in the paper's own setup unless told otherwise: the LMs' machine-constraint profiles
drawn per LM (`--profile random`: A, B or C from the seed, as the paper draws one per
cluster) and a task an LM refused put back at the tail of its job's waiting tasks
(`--refused tail`: the paper's "end of its task request queue"); `--profile A` and
`--refused front` are the setup of our own `megha simulate --nodes` runs.

`--seeds N` (default 1: one run per value, named after it) runs each value N times, with the
seeds `--seed`, `--seed` + 1, ... (the workload's and the cluster's), as independent runs named
`VALUE/seed-S`; results.json keeps every run, and its `figures` add `seeds`: per value, the
mean over the seeds of the runs' mean JCT and allocation p50 and p99, each with its 95%
confidence interval (Student's t), in a table of mean ± half-width; and `seeds.paired`:
each value's figures over the first value's, seed by seed, with their intervals (a seed's runs
share their workload, so a paired ratio can tell two values apart where their own intervals,
which include the workload's spread, overlap).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rich.table import Table

from common.federation import RANDOM_PROFILE
from loadgen.paper_workloads import YH1_SUB
from loadgen.sources import add_workload_arguments
from simulator import command as simulate
from simulator.cluster import shaped_federation
from simulator.experiments.common import (
    NODES_PER_WORKER,
    add_node_option,
    add_seeds_option,
    add_shape_options,
    add_values_option,
    at_least,
    mean_interval,
    plus_minus,
    seeds_of,
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
# the paper's own setup, each run's where the command line does not say otherwise
PAPER_PROFILE = RANDOM_PROFILE  # a profile per cluster (LM), A, B or C
PAPER_REFUSED = "tail"  # a refused task goes to the end of the queue
# values -> (run name, change from the base shape), bad values an InvalidInput on --values
Plan = Callable[[tuple[str, ...]], list[tuple[str, dict]]]
# the runs' reports -> the experiment's `figures` in results.json, and its tables
Figures = Callable[[list[dict]], tuple[dict, tuple[Table, ...]]]


@dataclass(frozen=True)
class SharedSettings:
    """What every run of a sweep shares beside its shape."""

    node: tuple[int, int]  # a node's capacity
    nodes_per_worker: int
    profile: str  # the LMs' machine-constraint profile, or "random": drawn per LM
    overrides: Overrides
    settings: RunSettings


@dataclass(frozen=True)
class SweepOptions:
    values: tuple[str, ...]
    base: dict  # the base shape: `BASE`'s keys
    shapes: tuple[tuple[str, dict], ...]  # (run name, its shape), in the runs' order
    shared: SharedSettings
    seeds: tuple[int, ...] = ()  # with more than one, each shape runs once per seed

    def named_runs(self) -> list[tuple[str, dict, int | None]]:
        """(run name, shape, seed: None for --seed's own, one run per value), in the runs'
        order: each value's seeds one after the other."""
        if len(self.seeds) <= 1:
            return [(name, shape, None) for name, shape in self.shapes]
        return [(f"{name}/seed-{seed}", shape, seed) for name, shape in self.shapes
                for seed in self.seeds]


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
        group.add_argument("--profile", choices=simulate.PROFILE_CHOICES, default=PAPER_PROFILE,
                           help="the LMs' machine-constraint profile (default random: A, B or C "
                                "drawn per LM from the seed, as the paper draws one per "
                                "cluster; A: every LM profile A, as `megha simulate --nodes`)")
        group.add_argument("--slots", action="store_true",
                           help="slot mode: every node one slot, every task one slot (Sparrow's "
                                "and the published Megha simulator's model; the default with "
                                "the bundled trace)")
        add_seeds_option(group)
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
        overrides = Overrides.from_args(args)
        if overrides.refused is None:  # the paper's, where the command line says nothing
            overrides = replace(overrides, refused=PAPER_REFUSED)
        shared = SharedSettings(simulate.parse_node(args.node), args.nodes_per_worker,
                                args.profile, overrides, settings)
        shared.overrides.check()
        return SweepOptions(values, base, shapes, shared, seeds_of(args))

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
        seeds = (f"; seeds {options.seeds[0]} to {options.seeds[-1]}"
                 if len(options.seeds) > 1 else "")
        return (f"{self.swept} {', '.join(options.values)}{seeds}; {shape}; workload "
                f"{_workload(settings.workload)}{', slot mode' if settings.slots else ''}; "
                f"{_profiles(options.shared.profile)}; "
                f"policies {options.shared.overrides.describe() or 'as generated'}; "
                f"{self.timing(options)}, processing {settings.processing}")

    def timing(self, options: SweepOptions) -> str:
        """Which model of time the runs take, for the first line."""
        return options.shared.settings.timing.describe()

    def runs(self, options: SweepOptions, logs: Path | None) -> list[Run]:
        return [Run(name, simulate_shape, (_seeded(options.shared, seed), shape, name),
                    None if logs is None else logs / f"{name.replace('/', '-')}.log")
                for name, shape, seed in options.named_runs()]

    def run_line(self, result: dict) -> str:
        return simulated_run_line(result)

    def figures(self, options: SweepOptions, results: list[dict]) -> list[Report]:
        named = options.named_runs()
        runs = [result | {"name": name, "shape": shape}
                | ({} if seed is None else {"seed": seed})
                for (name, shape, seed), result in zip(named, results, strict=True)]
        if len(options.seeds) <= 1:
            figures, tables = self.figures_of(runs) if self.figures_of else (None, ())
        else:
            figures, tables = self._seeded_figures(options, runs)
        document = results_document(self.name, runs, figures=figures, comparison=True)
        return [Report(document, tables, inspection_page(document))]

    def _seeded_figures(self, options: SweepOptions,
                        runs: list[dict]) -> tuple[dict, tuple[Table, ...]]:
        """Over the seeds: each value's intervals (`seeds`), and the experiment's own figures
        of each seed's runs (under their values' names), `by_seed`."""
        count = len(options.seeds)
        by_value = {name: runs[index * count:(index + 1) * count]
                    for index, (name, _shape) in enumerate(options.shapes)}
        summary, own_tables = seed_summary(by_value, options.seeds)
        figures: dict = {"seeds": summary}
        tables = list(own_tables)
        if self.figures_of:
            figures["by_seed"] = {}
            for place, seed in enumerate(options.seeds):
                own, own_tables = self.figures_of(
                    [value_runs[place] | {"name": name} for name, value_runs in by_value.items()])
                figures["by_seed"][str(seed)] = own
                for own_table in own_tables:
                    own_table.title = f"{own_table.title or ''} (seed {seed})".strip()
                    tables.append(own_table)
        return figures, tuple(tables)


# the figures summed up over each value's seeds (in seconds): key -> (the table's label, the
# path in a run, the scale of the table's unit)
SEED_FIGURES = {
    "jct_mean": ("mean JCT (s)", ("jct", "overall", "mean"), 1.0),
    "allocation_p50": ("allocation p50 (ms)", ("allocation", "overall", "p50"), 1e3),
    "allocation_p99": ("allocation p99 (ms)", ("allocation", "overall", "p99"), 1e3),
}


def seed_summary(by_value: dict[str, list[dict]],
                 seeds: tuple[int, ...]) -> tuple[dict, tuple[Table, Table]]:
    """Per value, over its seeds' runs: each of `SEED_FIGURES` (in seconds) as its mean and
    95% confidence interval (`mean_interval`: a run where it is missing, no job ended, is
    left out of it), and paired over the seeds as ratios to the first value's
    (`paired_ratios`); results.json's `figures.seeds` and its two tables."""
    summary: dict = {"seeds": list(seeds), "confidence": 0.95, "by_value": {}}
    table = Table(title=f"over {len(seeds)} seeds ({seeds[0]} to {seeds[-1]}): mean ± 95% "
                        f"confidence interval's half-width (Student's t)")
    table.add_column("value")
    for label, _path, _scale in SEED_FIGURES.values():
        table.add_column(label, justify="right")
    for name, value_runs in by_value.items():
        figures = {"runs": [run["name"] for run in value_runs]}
        for key, (_label, path, _scale) in SEED_FIGURES.items():
            values = [value for value in (_at(run, path) for run in value_runs)
                      if value is not None]
            figures[key] = mean_interval(values) | {"values": values}
        summary["by_value"][name] = figures
        table.add_row(name, *(plus_minus(figures[key], scale)
                              for key, (_label, _path, scale) in SEED_FIGURES.items()))
    paired, paired_table = paired_ratios(by_value, seeds)
    return summary | {"paired": paired}, (table, paired_table)


def paired_ratios(by_value: dict[str, list[dict]],
                  seeds: tuple[int, ...]) -> tuple[dict, Table]:
    """Per value, each of `SEED_FIGURES` over the first value's, seed by seed (the same
    seed: the same workload and cluster draw), as the mean ratio and its 95% interval. The
    values' own intervals include how much the workload moves the figure; a paired ratio
    leaves that out, so a difference between values shows where the intervals overlap."""
    names = list(by_value)
    first = by_value[names[0]]
    paired: dict = {"over": names[0], "by_value": {}}
    table = Table(title=f"paired over the {len(seeds)} seeds: each value over {names[0]}, seed "
                        f"by seed (mean ± 95% half-width)")
    table.add_column("value")
    for label, _path, _scale in SEED_FIGURES.values():
        table.add_column(label.split(" (")[0], justify="right")
    for name in names:
        ratios = {}
        for key, (_label, path, _scale) in SEED_FIGURES.items():
            values = [ours / theirs for ours, theirs in
                      ((_at(run, path), _at(base, path))
                       for run, base in zip(by_value[name], first, strict=True))
                      if ours is not None and theirs]
            ratios[key] = mean_interval(values)
        paired["by_value"][name] = ratios
        table.add_row(name, *(plus_minus(ratios[key], digits=3) for key in SEED_FIGURES))
    return paired, table


def _at(report: dict, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(report, dict) or key not in report:
            return None
        report = report[key]
    return report


def _seeded(shared: SharedSettings, seed: int | None) -> SharedSettings:
    """`shared` with `seed` the workload's and the cluster's (None: as it is)."""
    if seed is None:
        return shared
    return replace(shared, settings=shared.settings.with_workload(seed=seed))


def _scheduler_shape(shape: dict) -> dict:
    """`shape` as its scheduler runs it: centralized is one GM and one LM."""
    return shape | {"gms": 1, "lms": 1} if shape["scheduler"] == "centralized" else shape


def _profiles(profile: str) -> str:
    if profile == RANDOM_PROFILE:
        return "machine-constraint profiles A, B or C drawn per LM"
    return f"machine-constraint profile {profile} on every LM"


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
        seed=settings.seed, profile=shared.profile)
    federation = shared.overrides.apply(federation)
    drawn = Counter(lm.profile for lm in federation.lms)
    where = (f"{shape['nodes']} nodes, {shape['gms']} GMs, {shape['lms']} LMs (profiles "
             f"{', '.join(f'{name} {count}' for name, count in sorted(drawn.items()))}), "
             f"heartbeat {heartbeat:g} s")
    if "processing" in shape:  # components' SCHEDULER@SCALE: its own processing model
        settings = replace(settings, processing=shape["processing"])
        where += f", processing {shape['processing']}"
    if "delay_ms" in shape:  # --delays: the run's own constant one-way delay
        settings = replace(settings, timing=Timing(delay=repr(shape["delay_ms"] / 1e3)))
    return simulate.simulate_once(settings, shape["scheduler"], federation, where, log, name)
