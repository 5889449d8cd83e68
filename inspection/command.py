"""`megha inspect`: event logs in, answers out (terminal tables, JSON, plots, HTML report).

Each RUN argument is one run: a log file, a directory of them (`logs/` of the local
launcher), `-` for stdin (`docker compose logs --no-log-prefix | megha inspect -`), or several
of these joined by commas; `NAME=...` names it. Two or more runs are also compared, the first
as the baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from common.errors import InvalidInput
from inspection.analysis import RunAnalysis
from inspection.compare import compare
from inspection.reader import ReadCounts, read_events
from inspection.terminal import render_comparison, render_run

PROGRESS_EVERY = 500_000  # events between progress lines on a terminal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="[NAME=]PATH[,PATH...]: a log file, a directory of *.log files, "
                             "or - for stdin")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write every figure as JSON (- for stdout, instead of the tables)")
    parser.add_argument("--plots", type=Path, default=None, metavar="DIR",
                        help="write PNG plots: CDFs of allocation time and JCT, share over "
                             "time, delay breakdown")
    parser.add_argument("--html", type=Path, default=None, metavar="FILE",
                        help="write one self-contained HTML report with the tables and plots")


def parse_run(text: str, index: int) -> tuple[str, list[str]]:
    name, sep, paths = text.partition("=")
    if not sep or "/" in name or not name:
        name, paths = "", text
    parts = [p for p in paths.split(",") if p]
    if not parts:
        raise InvalidInput(text, "names no file")
    if not name:
        name = "stdin" if parts == ["-"] else Path(parts[0].rstrip("/")).name or f"run{index}"
    return name, parts


def analyse(name: str, paths: list[str], progress: Console | None = None) -> tuple[dict, dict]:
    """One run's report and what reading it found (lines, events, malformed)."""
    counts = ReadCounts()
    run = RunAnalysis(name)
    for event in read_events(paths, counts):
        run.feed(event)
        if progress is not None and counts.events % PROGRESS_EVERY == 0:
            progress.print(f"{name}: {counts.events} events read", highlight=False)
    read = {"lines": counts.lines, "events": counts.events, "malformed": counts.malformed,
            "examples": counts.examples}
    if counts.events == 0:
        raise InvalidInput(",".join(paths), f"no event lines in {counts.lines} line(s)"
                           + (f"; first: {counts.examples[0]}" if counts.examples else ""))
    return run.report() | {"read": read}, read


def run(args: argparse.Namespace) -> int:
    runs = [parse_run(text, i) for i, text in enumerate(args.runs, start=1)]
    names = [name for name, _ in runs]
    if len(set(names)) != len(names):
        raise InvalidInput("RUN", f"two runs are named alike ({', '.join(names)}); name them "
                                  f"with NAME=PATH")
    err = Console(file=sys.stderr) if sys.stderr.isatty() else None
    reports = [analyse(name, paths, err)[0] for name, paths in runs]
    result = {"runs": reports}
    if len(reports) > 1:
        result["comparison"] = compare(reports)
    if args.json is not None:
        text = json.dumps(result, indent=1)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text)
    if args.json is None or str(args.json) != "-":
        # a log or a pipe gets 120 columns rather than rich's 80: the tables stay one line a row
        console = Console() if sys.stdout.isatty() else Console(width=120)
        for report in reports:
            render_run(console, report, report["read"])
        if "comparison" in result:
            render_comparison(console, result["comparison"])
    if args.plots is not None or args.html is not None:
        from inspection.plots import write_plots  # matplotlib only when asked for

        plots = write_plots(result, args.plots)
        if args.html is not None:
            from inspection.html import write_html

            write_html(result, plots, args.html)
            print(f"report in {args.html}", file=sys.stderr)
    return 0
