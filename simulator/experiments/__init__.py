"""`megha experiment NAME`: the papers' simulation studies, one sub-command each.

`megha experiment --help` lists them with a line each, `megha experiment NAME --help` gives
one's options: its own, then the common ones (`--out`, `--html`, `--workers`, `--dask`,
`--no-log`). Each is an `Experiment` (registry.py) in a module of this package that registers
it; this command imports every module of the package, so a new experiment is one new module
(docs/architecture.md, "Adding an experiment"). The Megha paper's figures (baselines,
cluster-size, gms-lms, heartbeat, components, centralized) are one sweep of a simulated
cluster each (cluster_sweep.py); the other studies are slearn.py, redundancy.py,
redundancy_cluster.py, packing.py, packing_cluster.py and fairness.py.

Every experiment runs the same way: its options are read and checked before anything runs,
its first line says what runs under which policies and settings, its runs are independent
and go to a pool of `--workers` processes (default one per core; 1: one after the other in
this process) or, with `--dask ADDRESS`, to a Dask cluster (simulator/sweep.py,
docs/sweeps.md), with the same results wherever they ran. Its results go to `--out` (default
experiments/NAME) through one writer (results.py): results.json in the shared schema,
table.txt, and with `--html` a report.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import time

from simulator.experiments.common import CommonOptions, add_common_options
from simulator.experiments.registry import EXPERIMENTS
from simulator.experiments.results import write_reports
from simulator.sweep import progress_printer, run_sweep


def _import_every_module() -> None:
    """Each experiment registers itself when its module is imported."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_import_every_module()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    experiments = parser.add_subparsers(dest="experiment", metavar="NAME", required=True,
                                        title="experiments")
    for experiment in EXPERIMENTS:
        # argparse expands % in a help: "50%" would be a format
        sub = experiments.add_parser(experiment.name, help=experiment.summary.replace("%", "%%"),
                                     description=experiment.summary)
        experiment.add_options(sub)
        add_common_options(sub)


def run(args: argparse.Namespace) -> int:
    experiment = EXPERIMENTS.get(args.experiment)
    common = CommonOptions.from_args(args, experiment.name)
    options = experiment.options(args)
    print(f"{experiment.name}: {experiment.describe(options)}", flush=True)
    common.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs = experiment.runs(options, common.out if common.logs else None)
    results = run_sweep(runs, workers=common.workers, dask=common.dask,
                        on_done=progress_printer(experiment.run_line))
    folders = write_reports(experiment.figures(options, results), common.out, common.html)
    logs = ", one event log per run" if any(run.log for run in runs) else ""
    print(f"results in {', '.join(f'{folder}/' for folder in folders)} (results.json, "
          f"table.txt{logs}); {time.perf_counter() - started:.0f} s")
    return 0
