"""`--delays MS,...` of the sweeps of the Megha paper's Figures 6 and 7 (centralized.py,
components.py): every value of the sweep at each one-way network delay, a constant in
milliseconds, instead of `--delay`'s one. The runs are named `VALUE@delay-MSms` and their
`shape` says `delay_ms` (simulate_shape's delay for the run); the figures are each delay's
own (`by_delay`) and what the experiment says changes with the delay (its `DelaySummary`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.table import Table

from common.errors import InvalidInput
from simulator.experiments.cluster_sweep import ClusterSweep, Figures, SweepOptions

# the runs of each delay's figures -> what changes across the delays, and its table
DelaySummary = Callable[[dict[str, dict]], tuple[dict, Table]]


def delay_suffix(delay_ms: float) -> str:
    """What a run's name adds for its delay: megha@delay-0.5ms."""
    return f"@delay-{delay_ms:g}ms"


def parse_delays(args: argparse.Namespace) -> tuple[float, ...]:
    """--delays' milliseconds, in increasing order (none: not given); it replaces --delay
    and --calibration, so either with it is refused."""
    if args.delays is None:
        return ()
    for option in ("delay", "calibration"):
        if getattr(args, option) is not None:
            raise InvalidInput("--delays", f"gives each run its own constant delay: give "
                                           f"--delays or --{option}, not both")
    delays = []
    for item in args.delays.split(","):
        try:
            delay = float(item)
        except ValueError:
            delay = math.nan
        if not math.isfinite(delay) or delay <= 0:
            raise InvalidInput("--delays", f"{item!r} is not a delay in ms (a positive number)")
        if delay_suffix(delay) in map(delay_suffix, delays):
            raise InvalidInput("--delays", f"{item!r}: {delay:g} ms is given twice")
        delays.append(delay)
    return tuple(sorted(delays))


@dataclass(frozen=True)
class DelaySweep(ClusterSweep):
    """A `ClusterSweep` with `--delays`: each value at each delay, in the runs' `shape` as
    `delay_ms` (simulate_shape's delay for the run)."""

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument_group(f"{self.name}: a sweep of the network delay").add_argument(
            "--delays", default=None, metavar="MS,...",
            help="one-way network delays in milliseconds, comma-separated (0.5,1,2,5): every "
                 "value runs at each, a constant delay, instead of --delay's one")

    def options(self, args: argparse.Namespace) -> SweepOptions:
        delays = parse_delays(args)
        options = super().options(args)
        if not delays:
            return options
        return replace(options, shapes=tuple(
            (name + delay_suffix(delay), shape | {"delay_ms": delay})
            for delay in delays for name, shape in options.shapes))

    def timing(self, options: SweepOptions) -> str:
        delays = list(dict.fromkeys(shape["delay_ms"] for _name, shape in options.shapes
                                    if "delay_ms" in shape))
        if not delays:
            return super().timing(options)
        return (f"one-way delays {', '.join(f'{delay:g}' for delay in delays)} ms, each value "
                f"at each")


def by_delay(figures_of: Figures, summary_of: DelaySummary) -> Figures:
    """`figures_of`, for runs at one delay; for runs at several (--delays): its figures of each
    delay's runs (under their values' names), `by_delay`, and `summary_of`'s across the
    delays, `delay_summary`, whose table comes first."""
    def figures(runs: list[dict]) -> tuple[dict, tuple[Table, ...]]:
        delays = list(dict.fromkeys(run["shape"].get("delay_ms") for run in runs))
        if delays == [None]:
            return figures_of(runs)
        own: dict = {}
        tables = []
        for delay in delays:
            suffix = delay_suffix(delay)
            own[f"{delay:g}"], own_tables = figures_of(
                [run | {"name": run["name"].removesuffix(suffix)} for run in runs
                 if run["shape"]["delay_ms"] == delay])
            for table in own_tables:
                table.title = f"{table.title or ''} (delay {delay:g} ms)".strip()
                tables.append(table)
        summary, table = summary_of(own)
        return ({"delays_ms": delays, "by_delay": own, "delay_summary": summary},
                (table, *tables))
    return figures


