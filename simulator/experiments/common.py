"""What the experiments share: the options every one takes (where the results go, where the
runs run), the options of a generated cluster's shape, and the parsers of comma-separated
lists, so that the same bad input gets the same message from every experiment; and the mean
over seeds with its confidence interval."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from common.errors import InvalidInput
from simulator import sweep
from simulator.cluster import PAPER_NODE

NODES_PER_WORKER = 100  # `megha simulate`'s default, for the experiments that keep it
Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class CommonOptions:
    """The options of every experiment: where its results go and where its runs run."""

    out: Path  # results.json, table.txt and the event logs
    html: Path | None  # the HTML report, if asked
    workers: int | None  # processes of the pool (None: one per core; 1: this process)
    dask: str | None  # the address of a Dask scheduler instead
    logs: bool  # whether the runs write event logs (--no-log: no)

    @classmethod
    def from_args(cls, args: argparse.Namespace, experiment: str) -> CommonOptions:
        sweep.check(args.workers, args.dask)
        return cls(out=args.out or Path("experiments") / experiment, html=args.html,
                   workers=args.workers, dask=args.dask, logs=not args.no_log)


def add_common_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("results, and where the runs go")
    group.add_argument("--out", type=Path, default=None,
                       help="folder for the logs, results.json and table.txt (default "
                            "experiments/NAME)")
    group.add_argument("--html", type=Path, default=None,
                       help="also write an HTML report of the runs")
    group.add_argument("--workers", type=int, default=None,
                       help="runs at once, one process each (default: the CPU count; 1: one "
                            "after the other in this process)")
    group.add_argument("--dask", default=None, metavar="ADDRESS",
                       help="run on the Dask cluster whose scheduler is at ADDRESS "
                            "(tcp://host:8786) instead (the 'sweep' extra; docs/sweeps.md)")
    group.add_argument("--no-log", action="store_true",
                       help="write no event log (the experiments whose runs write one)")


def add_values_option(group: argparse._ArgumentGroup, what: str, default: str) -> None:
    """--values: what the experiment sweeps."""
    group.add_argument("--values", default=None,
                       help=f"{what}, comma-separated (default {default})")


def add_seed_option(group: argparse._ArgumentGroup) -> None:
    """--seed, for the experiments without the workload options (which have it)."""
    group.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")


def add_seeds_option(group: argparse._ArgumentGroup, default: int = 1) -> None:
    """--seeds: runs per value, with seeds --seed, --seed + 1, ..."""
    group.add_argument("--seeds", type=int, default=default,
                       help=f"runs per value, with seeds SEED, SEED+1, ...: the mean over "
                            f"them with a 95%% confidence interval (default {default})")


def seeds_of(args: argparse.Namespace) -> tuple[int, ...]:
    """The seeds of --seed and --seeds."""
    at_least("--seeds", args.seeds, 1)
    return tuple(range(args.seed, args.seed + args.seeds))


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> dict:
    """The mean of `values` and the half-width of its `confidence` interval (Student's t with
    n - 1 degrees of freedom: t * s / sqrt(n)); the half-width is None under two values."""
    count = len(values)
    mean = statistics.fmean(values) if count else None
    half = None
    if count > 1:
        from scipy.stats import t

        half = float(t.ppf((1 + confidence) / 2, count - 1)) * statistics.stdev(values) / (
            math.sqrt(count))
    return {"n": count, "mean": mean, "half_width": half, "confidence": confidence}


def plus_minus(interval: dict, scale: float = 1.0, digits: int = 2) -> str:
    """`mean ± half-width` of a `mean_interval` (times `scale`)."""
    if interval["mean"] is None:
        return "-"
    mean = f"{interval['mean'] * scale:.{digits}f}"
    if interval["half_width"] is None:
        return mean
    return f"{mean} ± {interval['half_width'] * scale:.{digits}f}"


# the options of a generated cluster's shape: dest -> (option, type, what it sets)
SHAPE_OPTIONS = {
    "nodes": ("--nodes", int, "nodes"),
    "gms": ("--gms", int, "GMs"),
    "lms": ("--lms", int, "LMs"),
    "nodes_per_worker": ("--nodes-per-worker", int, "nodes one worker agent hosts"),
    "heartbeat": ("--heartbeat", float, "LM heartbeat interval, s"),
}


def add_shape_options(group: argparse._ArgumentGroup, defaults: dict[str, int | float | None],
                      said: dict[str, str] | None = None) -> None:
    """The shape options of `defaults`, in this order, each with its default; `said` is what
    the help says of a default the experiment decides itself (given as None)."""
    said = said or {}
    for dest, default in defaults.items():
        option, kind, what = SHAPE_OPTIONS[dest]
        shown = f"{default:g}" if isinstance(default, float) else default
        group.add_argument(option, type=kind, default=default,
                           help=f"{what} (default {said.get(dest, shown)})")


def add_node_option(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--node", default=f"{PAPER_NODE[0]},{PAPER_NODE[1]}", metavar="CPU_M,MEM",
                       help="a node's capacity (default 64 cores, 16 GiB: the paper's)")


def at_least(option: str, value: Number | None, least: Number) -> None:
    """Refuse `value` below `least`, naming its option (None: not given, nothing to check)."""
    if value is not None and value < least:
        raise InvalidInput(option, f"must be at least {least}, got {value}")


def listed(text: str, known: Iterable[str], option: str, what: str) -> tuple[str, ...]:
    """The names of a comma-separated list, each one of `known` (`what` names one: "a job
    policy")."""
    known = tuple(known)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if name not in known:
            raise InvalidInput(option, f"{name!r} is not {what} (known: {', '.join(known)})")
    if not names:
        raise InvalidInput(option, "nothing listed")
    return names


def numbers(text: str, option: str, kind: Callable[[str], Number] = float,
            what: str = "numbers") -> tuple[Number, ...]:
    """The numbers of a comma-separated list."""
    try:
        return tuple(kind(value) for value in text.split(","))
    except ValueError:
        raise InvalidInput(option, f"expected {what} separated by commas, got "
                                   f"{text!r}") from None


def parse_loads(text: str) -> tuple[float, ...]:
    """`--loads`: offered loads, each a positive number."""
    loads = numbers(text, "--loads")
    for load in loads:
        if not (math.isfinite(load) and load > 0):
            raise InvalidInput("--loads", f"an offered load must be a positive number, got "
                                          f"{load:g}")
    return loads


def refuse_given(args: argparse.Namespace, why: dict[str, str]) -> None:
    """Refuse the options of `why` (dests) that were given, each with why it does not apply:
    options the workload's group brings that the experiment sets itself."""
    for dest, reason in why.items():
        if vars(args)[dest] is not None:
            raise InvalidInput(f"--{dest.replace('_', '-')}", reason)


def simulated_run_line(report: dict) -> str:
    """A finished simulation in a few words, for the sweep's line about it."""
    jct = report["jct"]["overall"]
    mean = f"mean JCT {jct['mean']:.1f} s" if jct.get("count") else "no job ended"
    return f"{mean}, virtual {report['virtual_s']:,.0f} s"
