"""What an experiment is, and the registry `megha experiment` finds them in.

An experiment is a study `megha experiment NAME` runs: a set of independent runs (each a
`simulator.sweep.Run`), and what its figures make of their results. Each module of this
package that defines one registers it on import (`EXPERIMENTS.register(...)`), and the
command imports every module of the package: a new experiment is a new module, nothing else
(docs/architecture.md, "Adding an experiment").

The command drives every experiment the same way (simulator/experiments/__init__.py):

    options = experiment.options(args)       # typed, checked: bad input names its option
    print(f"{experiment.name}: {experiment.describe(options)}")
    runs = experiment.runs(options, logs)     # logs: --out, or None with --no-log
    results = run_sweep(runs, ..., on_done=progress_printer(experiment.run_line))
    write_reports(experiment.figures(options, results), out, html)   # results.py
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from common.errors import InvalidInput

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from simulator.experiments.results import Report
    from simulator.sweep import Run

Options = TypeVar("Options")


class Experiment(Protocol[Options]):
    """One study of `megha experiment`: its name, its options and how it runs."""

    name: str  # what `megha experiment NAME` calls it
    summary: str  # one line, for `megha experiment --help`

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        """The study's own options (the common ones, --out and where runs go, are added by
        the command)."""

    def options(self, args: argparse.Namespace) -> Options:
        """The typed options of the parsed arguments, checked: bad input is an
        `InvalidInput` naming its option, before any run starts."""

    def describe(self, options: Options) -> str:
        """What runs, under which policies and settings: the run's first line (after
        "NAME: ")."""

    def runs(self, options: Options, logs: Path | None) -> list[Run]:
        """The independent runs, each writing its event log into `logs` where it writes one
        (None: no logs, `--no-log`)."""

    def run_line(self, result: Any) -> str:
        """A finished run's result in a few words, for the sweep's line about it."""

    def figures(self, options: Options, results: list[Any]) -> list[Report]:
        """What the runs' results come to: results.json, tables and pages to write (the
        results in the order of `runs`)."""


class ExperimentRegistry:
    """The experiments by name."""

    def __init__(self) -> None:
        self._experiments: dict[str, Experiment] = {}

    def register(self, experiment: Experiment) -> Experiment:
        if experiment.name in self._experiments:
            raise ValueError(f"the experiment {experiment.name!r} is registered twice")
        self._experiments[experiment.name] = experiment
        return experiment

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._experiments))

    def get(self, name: str) -> Experiment:
        experiment = self._experiments.get(name)
        if experiment is None:
            raise InvalidInput("experiment", f"unknown experiment {name!r} (known: "
                                             f"{', '.join(self.names())})")
        return experiment

    def __iter__(self) -> Iterator[Experiment]:
        return (self._experiments[name] for name in self.names())


EXPERIMENTS = ExperimentRegistry()
