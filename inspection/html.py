"""The report as one self-contained HTML file: the terminal's tables for every run, the
comparison, and the plots embedded as PNG data URIs. No script, font or stylesheet is
fetched, so the file can be mailed, archived or opened offline and still read the same.

Every table and image has a stable id (`allocation-<run>`, `plot-<name>`) for tests and links.
Text from the logs (run names, user queues, reasons) is escaped in one place, `_table`.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from inspection.analysis import COMPONENTS, PARTS
from inspection.terminal import (
    JCT_BIN_CAPTION,
    JCT_BIN_HEADER,
    comparison_cells,
    estimation_lines,
    jct_bin_rows,
    redundancy_lines,
    weighted_jct_line,
)

_STATS = ("count", "mean", "p50", "p90", "p99", "p99.9", "max")

# (alt text, caption) of each plot inspection/plots.py draws
PLOT_TEXT = {
    "allocation_cdf": ("CDF of per-task allocation time, in ms, one curve per run",
                       "Allocation time per task: first start on a worker minus the job's "
                       "arrival at the GM."),
    "jct_cdf": ("CDF of job completion time, in seconds, one curve per run",
                "Job completion time: the job's end at the GM minus its arrival."),
    "share_over_time": ("Each user queue's share of the cluster's cpu over time, per run",
                        "Share of the cluster's cpu held by each user queue over time; the "
                        "dashed lines are the configured shares."),
    "delay_breakdown": ("Stacked bars of the mean allocation time's parts, in ms, per run",
                        "Where allocation time goes: framework queuing, processing, "
                        "communication and worker queuing (mean per task)."),
    "estimation_error_cdf": ("CDF of each job's estimated over measured work, log scale, one "
                             "curve per run",
                             "Job-size estimation error: the predictor's estimate of a job's "
                             "task-seconds over the task-seconds it measured (1 is exact)."),
    "sampling_ratio_over_time": ("Sampling ratio slearn chose for each wide job, by arrival "
                                 "time, per run",
                                 "Sampling ratio over time: the share of a wide job's tasks "
                                 "slearn ran first as pilots, by the job's arrival."),
    "copies_cancelled": ("Bars of the redundant copies cancelled, by reason, per run",
                         "Redundant copies cancelled, by reason: sibling won (another attempt "
                         "of the task finished first), original ended, node taken (a GM's "
                         "task needed the node), reallocated, node down, lost, worker ended."),
}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { border-bottom: 2px solid #444; }
h2 { margin-top: 2em; border-bottom: 1px solid #aaa; }
table { border-collapse: collapse; margin: 1em 0; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; white-space: nowrap; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #ddd; }
th { background: #eee; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #f7f7f7; }
figure { margin: 1.5em 0; }
figcaption { color: #555; }
img.plot { max-width: 100%; border: 1px solid #ddd; }
.muted { color: #777; }
"""


def _ms(value) -> str:
    return "" if value is None else f"{value * 1000:.1f}"


def _s(value) -> str:
    return "" if value is None else f"{value:.2f}"


def _table(table_id: str, caption: str, header: list[str], rows: list[list[str]],
           text_columns: int = 1) -> str:
    """A table of plain text cells (escaped here); columns after the first `text_columns`
    are numbers, right-aligned."""
    def cells(tag: str, values: list[str]) -> str:
        classes = ["" if i < text_columns else ' class="num"' for i in range(len(values))]
        return "".join(f"<{tag}{c}>{html.escape(v)}</{tag}>"
                       for c, v in zip(classes, values, strict=True))
    body = "\n".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return (f'<table id="{html.escape(table_id)}" class="report">\n'
            f"<caption>{html.escape(caption)}</caption>\n"
            f"<thead><tr>{cells('th', header)}</tr></thead>\n<tbody>\n{body}\n</tbody></table>")


def _stats_table(table_id: str, caption: str, rows: dict[str, dict], unit: str) -> str:
    show = _ms if unit == "ms" else _s
    header = [""] + [stat if stat == "count" else f"{stat} ({unit})" for stat in _STATS]
    body = [[name, str(summary["count"]), *(show(summary.get(stat)) for stat in _STATS[1:])]
            for name, summary in rows.items() if summary.get("count")]
    return _table(table_id, caption, header, body)


def _run_ids(names: list[str]) -> list[str]:
    """An id fragment per run: its name, whitespace made `_`, unique even if two collide."""
    ids: list[str] = []
    for index, name in enumerate(names, start=1):
        candidate = re.sub(r"\s", "_", name) or f"run{index}"
        ids.append(candidate if candidate not in ids else f"{candidate}-{index}")
    return ids


def _read_section(run: dict, rid: str) -> str:
    read = run["read"]
    examples = "".join(f"<li><code>{html.escape(e)}</code></li>" for e in read["examples"])
    policies = [[kind, name] for kind, name in run["policies"].items()]
    return (f'<p id="read-{html.escape(rid)}">{read["events"]} events from {read["lines"]} '
            f'lines, {read["malformed"]} malformed.</p>\n'
            + (f"<ul>{examples}</ul>\n" if examples else "")
            + (_table(f"policies-{rid}", "policies", ["decision", "policy"], policies, 2)
               if policies else '<p class="muted">policies: not logged</p>'))


def _breakdown_table(run: dict, rid: str) -> str:
    breakdown = run["breakdown"]
    if not breakdown["tasks"]:
        return '<p class="muted">no task has every event of the allocation breakdown</p>'
    incomplete = breakdown["incomplete"]
    caption = f"where allocation time goes ({breakdown['tasks']} tasks" + (
        f", {incomplete} without every event)" if incomplete else ")")
    rows = [[part.replace("_", " "), _ms(breakdown["mean_s"][part]),
             _ms(breakdown["p50_s"][part]), f"{breakdown['share'][part]:.1%}"]
            for part in PARTS]
    table = _table(f"breakdown-{rid}", caption,
                   ["part", "mean (ms)", "p50 (ms)", "share of mean"], rows)
    components = breakdown.get("components")
    if not components:
        return table
    # a simulation's finer split (the Megha paper's Figure 7)
    rows = [[part.replace("_", " "), _ms(components["mean_s"][part]),
             _ms(components["p50_s"][part]), f"{components['share'][part]:.1%}"]
            for part in COMPONENTS]
    return table + _table(f"components-{rid}", "its components (the Megha paper's Figure 7)",
                          ["component", "mean (ms)", "p50 (ms)", "share of mean"], rows)


def _counts_table(run: dict, rid: str) -> str:
    rows = []
    for name, value in run["counts"].items():
        if isinstance(value, dict):
            label = name.removesuffix("_by_reason").replace("_", " ")
            rows += [[f"{label}: {reason}", str(count)] for reason, count in value.items()]
        else:
            rows.append([name.replace("_", " "), str(value)])
    return _table(f"counts-{rid}", "counts", ["what", "count"], rows)


def _fairness_table(run: dict, rid: str) -> str:
    fairness = run["fairness"]
    if not fairness["mean_share"]:
        return '<p class="muted">no share over time: no task start with cpu, or no LM capacity</p>'
    rows = []
    active = fairness.get("waiting_share", {})
    for user, share in fairness["mean_share"].items():
        configured = fairness["configured"].get(user)
        rows.append([user, "" if configured is None else f"{configured:.0%}", f"{share:.1%}",
                     f"{active[user]:.1%}" if user in active else "-"])
    caption = (f"share of the cluster's cpu ({fairness['capacity_cpu_m'] / 1000:g} cores), "
               f"time-weighted: over the run, and over the times the queue had tasks waiting")
    return _table(f"fairness-{rid}", caption,
                  ["user queue", "configured", "mean share", "while it waited"], rows)


def _estimation_section(run: dict, rid: str) -> str:
    if "estimation" not in run:
        return ""
    estimation = run["estimation"]
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in estimation_lines(estimation))
    return (f'<h3 id="estimation-{html.escape(rid)}">Estimation</h3>\n<ul>{lines}</ul>\n'
            + _table(f"jct-bins-{rid}", JCT_BIN_CAPTION, JCT_BIN_HEADER,
                     jct_bin_rows(estimation)))


def _redundancy_section(run: dict, rid: str) -> str:
    if "redundancy" not in run:
        return ""
    redundancy = run["redundancy"]
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in redundancy_lines(redundancy))
    rows = [[why.replace("_", " "), str(count)]
            for why, count in redundancy["cancelled_by_why"].items()]
    return (f'<h3 id="redundancy-{html.escape(rid)}">Redundant copies</h3>\n<ul>{lines}</ul>\n'
            + (_table(f"copies-cancelled-{rid}", "copies cancelled by reason",
                      ["reason", "copies"], rows) if rows else ""))


def _weighted_jct(jct: dict, rid: str) -> str:
    line = weighted_jct_line(jct)
    return "" if line is None else (f'<p id="weighted-jct-{html.escape(rid)}">'
                                    f"{html.escape(line)}</p>")


def _run_section(run: dict, rid: str) -> str:
    allocation, jct = run["allocation"], run["jct"]
    parts = [
        f'<section id="run-{html.escape(rid)}" class="run">',
        f"<h2>Run {html.escape(run['name'])}</h2>",
        _read_section(run, rid),
        _stats_table(f"allocation-{rid}",
                     "allocation time (first start on a worker - arrival at the GM)",
                     {"all tasks": allocation["overall"]}
                     | {f"user {u}": s for u, s in allocation["by_user"].items()}
                     | {f"jobs of {c}": s for c, s in allocation["by_size"].items()}, "ms"),
        _breakdown_table(run, rid),
        _stats_table(f"jct-{rid}", "job completion time",
                     {"all jobs": jct["overall"]}
                     | {f"user {u}": s for u, s in jct["by_user"].items()}
                     | {f"jobs of {c}": s for c, s in jct["by_size"].items()}, "s"),
        _weighted_jct(jct, rid),
        _stats_table(f"slowdown-{rid}", "slowdown (JCT / the job's longest task)",
                     {"all jobs": jct["slowdown"]}, "x"),
        _counts_table(run, rid),
        _fairness_table(run, rid),
        _estimation_section(run, rid),
        _redundancy_section(run, rid),
        "</section>",
    ]
    return "\n".join(part for part in parts if part)


def _comparison_section(comparison: dict) -> str:
    runs = comparison["runs"]
    header = ["figure", *runs, *(f"{name} / {runs[0]}" for name in runs[1:])]
    rows = []
    for row in comparison["rows"]:
        rows.append([row["figure"], *comparison_cells(row)])
    reference = comparison.get("reference")
    note = (f'\n<p class="muted">/ {html.escape(reference)}: the run\'s figure divided by '
            f"{html.escape(reference)}'s; above 1, {html.escape(reference)} is the faster.</p>"
            if reference else "")
    return ('<section id="comparison-section">\n<h2>Comparison</h2>\n'
            + _table("comparison", f"comparison (ratios to {runs[0]})", header, rows)
            + note + "\n</section>")


def _plot_figure(name: str, png: bytes) -> str:
    alt, caption = PLOT_TEXT.get(name, (name.replace("_", " "), name.replace("_", " ")))
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure id="figure-{name}">\n'
            f'<img id="plot-{name}" class="plot" alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{data}">\n'
            f"<figcaption>{html.escape(caption)}</figcaption>\n</figure>")


def render_html(result: dict, plots: dict[str, bytes]) -> str:
    runs = result["runs"]
    ids = _run_ids([run["name"] for run in runs])
    names = ", ".join(run["name"] for run in runs)
    body = [f"<h1>megha inspect: {html.escape(names)}</h1>"]
    body += [_run_section(run, rid) for run, rid in zip(runs, ids, strict=True)]
    if "comparison" in result:
        body.append(_comparison_section(result["comparison"]))
    if plots:
        body.append('<section id="plots">\n<h2>Plots</h2>\n'
                    + "\n".join(_plot_figure(name, png) for name, png in plots.items())
                    + "\n</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>megha inspect: {html.escape(names)}</title>\n<style>{_CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def write_html(result: dict, plots: dict[str, bytes], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(result, plots), encoding="utf-8")
