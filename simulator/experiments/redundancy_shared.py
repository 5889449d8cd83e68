"""What both redundancy studies share: the options of the machines' speeds and of `--beta`,
and how they show their results: the mean of each policy at each swept value with its 95%
confidence interval (Student's t over the seeds' means) and its ratio to the baseline (a
table), and the page of `--html` (the tables, the mean against the swept value, a CDF per
value). The paper's study (redundancy.py) sweeps arrival rates and measures flowtimes, the
federated cluster's (redundancy_cluster.py) offered loads and JCTs: a `Sweep` says which.
"""

from __future__ import annotations

import argparse
import base64
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from simulator.experiments.common import mean_interval
from simulator.experiments.results import Page

SPEEDS = ("two-state", "gamma", "constant")


def half_width(means: list[float]) -> float:
    """The 95% confidence interval's half-width of the seeds' means, as every experiment
    states its intervals (`mean_interval`: Student's t); 0 for a single seed."""
    return mean_interval(means)["half_width"] or 0.0


def add_speed_option(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--speed", choices=SPEEDS, default="two-state",
                       help="how machines' (nodes') rates vary (default two-state, the paper's)")


def add_beta_option(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--beta", type=float, default=0.5,
                       help="LAPS's share of the latest jobs, laps+r's of the running tasks "
                            "(default 0.5)")


@dataclass(frozen=True)
class Sweep:
    """How a redundancy study's table, plots and page name what it sweeps and measures: the
    paper's arrival rates and flowtimes, or the federated cluster's offered loads and JCTs."""

    field: str  # the runs' key of the swept value: "rate" or "load"
    heading: str  # a value's column heading, {value} standing for it: "λ={value:g}"
    axis: str  # the plot's x axis
    measure: str  # what the runs measure: "flowtime" or "JCT"
    cdf: Callable[[dict], dict | None]  # a run's CDF of that measure
    baseline: str  # the policy the others are compared to
    cluster: str  # what the runs ran on, for the plot's title
    title: str  # the page's heading

    def column(self, value: float) -> str:
        return self.heading.format(value=value)


def mean_table(runs: list[dict], policies: tuple[str, ...], values: tuple[float, ...],
               sweep: Sweep) -> Table:
    """The mean of each policy at each swept value, ± its 95% CI, and over the baseline's."""
    by = {(run["policy"], run[sweep.field]): run["jct"]["overall"] for run in runs}
    shown = Table(title=f"Mean {sweep.measure} (± 95% CI over seeds), and / {sweep.baseline}")
    shown.add_column("policy")
    for value in values:
        shown.add_column(sweep.column(value))
        shown.add_column(f"/ {sweep.baseline}")
    for policy in policies:
        row = [policy]
        for value in values:
            figure = by[(policy, value)]
            base = by.get((sweep.baseline, value))
            row += [f"{figure['mean']:.1f} ± {figure['ci95']:.1f}",
                    f"{figure['mean'] / base['mean']:.2f}" if base else "-"]
        shown.add_row(*row)
    return shown


def _plots(runs: list[dict], policies: tuple[str, ...], values: tuple[float, ...],
           sweep: Sweep) -> dict[str, bytes]:
    """The mean against the swept value, one line per policy; a CDF per value."""
    from inspection.plots import cdf_plot, new_figure, png_bytes, run_style

    by = {(run["policy"], run[sweep.field]): run for run in runs}
    slug = sweep.measure.lower()
    figure = new_figure()
    axes = figure.add_subplot()
    for index, policy in enumerate(policies):
        figures = [by[(policy, value)]["jct"]["overall"] for value in values]
        axes.errorbar(values, [f["mean"] for f in figures], yerr=[f["ci95"] for f in figures],
                      marker="o", capsize=3, label=policy, **run_style(index))
    axes.set(xlabel=sweep.axis, ylabel=f"mean {sweep.measure}",
             title=f"Mean {sweep.measure} against load ({sweep.cluster})")
    axes.grid(alpha=0.3)
    axes.legend()
    pictures = {f"{slug}_vs_{sweep.field}.png": png_bytes(figure)}
    for value in values:
        at_value = [by[(policy, value)] for policy in policies]
        figure = cdf_plot(at_value, sweep.cdf, 1.0,
                          f"{sweep.measure[:1].upper()}{sweep.measure[1:]} CDF at "
                          f"{sweep.column(value)}", f"{sweep.measure} (log scale)", log=True)
        if figure is not None:
            pictures[f"{slug}_cdf_{value:g}.png"] = png_bytes(figure)
    return pictures


def page(runs: list[dict], policies: tuple[str, ...], values: tuple[float, ...],
         tables: tuple[Table, ...], sweep: Sweep) -> Page:
    """The study's page: its tables, the mean against the swept value, a CDF per value."""

    def write(path: Path, folder: Path) -> None:
        console = Console(record=True, width=160, file=io.StringIO())
        for shown in tables:
            console.print(shown)
        images = "".join(
            f'<h2>{name[:-4].replace("_", " ")}</h2><img src="data:image/png;base64,'
            f'{base64.b64encode(data).decode()}">'
            for name, data in _plots(runs, policies, values, sweep).items())
        path.write_text(f"<!doctype html><meta charset='utf-8'><title>megha experiment "
                        f"redundancy</title><h1>{sweep.title}</h1>"
                        f"<pre>{console.export_text()}</pre>{images}")

    return write
