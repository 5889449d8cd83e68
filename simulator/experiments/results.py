"""The one writer of an experiment's results (and of `megha twin`'s): results.json, the tables
on the terminal and in table.txt, and with `--html` the page.

results.json has one schema for every experiment: `experiment` (its name), its settings
(top-level fields of its own), `runs` (each with `name`, `jct`, `allocation`, `counts` and
what the experiment adds), where the runs are simulations `comparison` (megha inspect's
side-by-side table of them), and the experiment's own `figures` if it has some. table.txt
holds what the terminal shows: the comparison, then the experiment's tables.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inspection.compare import compare
from inspection.terminal import render_comparison

WIDTH = 180  # of table.txt, and of the terminal when the output is not one
# Writes the HTML page at the path, its pictures (if files) into the folder of its report.
Page = Callable[[Path, Path], None]


@dataclass(frozen=True)
class Report:
    """One folder of an experiment's results: what the writer writes there."""

    document: dict | None  # results.json (None: no results.json, only tables)
    tables: tuple[Table, ...] = ()  # printed, and written to table.txt, after the comparison
    page: Page | None = None  # with --html
    folder: str = ""  # under --out ("": --out itself)
    notes: tuple[str, ...] = ()  # lines printed before the tables, not written


def results_document(experiment: str, runs: list[dict], *, settings: dict | None = None,
                     figures: dict | None = None, comparison: bool = False) -> dict:
    """results.json's content in the shared schema; `comparison`: megha inspect's table of
    the runs, which must then be its reports."""
    document = {"experiment": experiment, **(settings or {}), "runs": runs}
    if comparison:
        document["comparison"] = compare(runs)
    if figures:
        document["figures"] = figures
    return document


def inspection_result(document: dict) -> dict:
    """What megha inspect's HTML report and plots read, from a document with a comparison."""
    for run in document["runs"]:  # not read from a log: nothing was malformed
        run.setdefault("read", {"lines": 0, "events": 0, "malformed": 0, "examples": []})
    return {"runs": document["runs"], "comparison": document["comparison"]}


def inspection_page(document: dict) -> Page:
    """megha inspect's report of the document's runs, its plots also in FOLDER/plots."""

    def write(html: Path, folder: Path) -> None:
        from inspection.html import write_html
        from inspection.plots import write_plots

        result = inspection_result(document)
        write_html(result, write_plots(result, folder / "plots"), html)

    return write


def write_reports(reports: list[Report], out: Path, html: Path | None) -> list[Path]:
    """Every report into its folder of `out`, its page to `html` (with several pages, each
    named after its folder: report-yh1.html); the folders that hold a results.json."""
    terminal = Console() if sys.stdout.isatty() else Console(width=WIDTH)
    folders = []
    for report in reports:
        folder = out / report.folder
        folder.mkdir(parents=True, exist_ok=True)
        for note in report.notes:
            print(note)
        if report.document is not None:
            (folder / "results.json").write_text(json.dumps(report.document, indent=1))
            folders.append(folder)
        with (folder / "table.txt").open("w") as file:
            for console in (terminal, Console(file=file, width=WIDTH)):
                _show(console, report)
        if html is not None and report.page is not None:
            path = (html.with_name(f"{html.stem}-{report.folder}{html.suffix}")
                    if report.folder else html)
            report.page(path, folder)
            print(f"report in {path}")
    return folders


def _show(console: Console, report: Report) -> None:
    if report.document is not None and "comparison" in report.document:
        render_comparison(console, report.document["comparison"])
    for table in report.tables:
        console.print(table)
