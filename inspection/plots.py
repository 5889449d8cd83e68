"""The report as PNG plots: CDFs of allocation time and JCT, each user queue's share over time,
and where allocation time goes; with job-size estimation, the CDF of estimate / work and the
sampling ratios slearn chose over time; with redundant copies, the copies cancelled by
reason; every run overlaid where that reads well.

Figures are drawn on matplotlib's Agg canvas directly, without pyplot: nothing global (the
backend, the list of open figures) changes, so `megha inspect` can run beside anything.
A run that lacks a plot's data is left out of that plot; a plot without any data is not drawn.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from inspection.analysis import PARTS

DPI = 100
WIDE = (8.0, 4.5)  # inches at DPI: 800 x 450 pixels
LOG_SPAN = 100.0  # a log axis once the largest value is this many times the smallest


def run_style(index: int) -> dict:
    """Colour and dash of a run's curve: runs that coincide stay visible under each other."""
    return {"color": f"C{index % 10}", "linestyle": ("-", "--", ":", "-.")[index % 4]}


def new_figure(size: tuple[float, float] = WIDE) -> Figure:
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_SPAN


def cdf_plot(runs: list[dict], cdf_of: Callable[[dict], dict | None], scale: float,
             title: str, xlabel: str, log: bool | None = None) -> Figure | None:
    """Each run's CDF (`cdf_of(run)`: {"x": [...], "y": [...]}, x times `scale`) overlaid;
    a log x axis when `log`, or, left None, when the values span decades."""
    curves = [(i, run["name"], cdf_of(run)) for i, run in enumerate(runs)]
    curves = [(i, name, cdf) for i, name, cdf in curves if cdf and cdf["x"]]
    if not curves:
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    every_x: list[float] = []
    for index, name, cdf in curves:
        x = [value * scale for value in cdf["x"]]
        every_x += x
        axes.step(x, cdf["y"], where="post", label=name, **run_style(index))
    if log or (log is None and _spans_decades(every_x)):
        axes.set_xscale("log")  # values at 0 are not drawn on it: they are below any decade
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction at or below")
    axes.set_ylim(0, 1.02)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(title="run", loc="lower right")
    return figure


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def allocation_cdf(runs: list[dict]) -> Figure | None:
    return cdf_plot(runs, lambda run: run.get("allocation", {}).get("cdf"), 1000.0,
                     "Allocation time per task (first start on a worker - arrival at the GM)",
                     "allocation time (ms)")


def jct_cdf(runs: list[dict]) -> Figure | None:
    return cdf_plot(runs, lambda run: run.get("jct", {}).get("cdf"), 1.0, "Job completion time",
                    "job completion time (s)")


def share_over_time(runs: list[dict]) -> Figure | None:
    shown = [run for run in runs if run.get("fairness", {}).get("series", {}).get("t")]
    if not shown:
        return None
    # one colour per user queue in every subplot, so q2 is q2 whichever run it is in
    users = sorted({user for run in shown for user in run["fairness"]["series"]["users"]}
                   | {user for run in shown for user in run["fairness"]["configured"]})
    colour = {user: f"C{i % 10}" for i, user in enumerate(users)}
    figure = new_figure((WIDE[0], 1.5 + 3.0 * len(shown)))
    subplots = figure.subplots(len(shown), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for axes, run in zip(subplots, shown, strict=True):
        fairness = run["fairness"]
        for user, share in fairness["series"]["users"].items():
            axes.plot(fairness["series"]["t"], share, color=colour[user], label=user)
        for user, share in fairness["configured"].items():
            axes.axhline(share, color=colour[user], linestyle="--", linewidth=1)
        axes.set_title(f"{run['name']}: share of the cluster's cpu "
                       f"({fairness['capacity_cpu_m'] / 1000:g} cores); dashed: configured")
        axes.set_ylabel("share of cpu")
        axes.yaxis.set_major_formatter(PercentFormatter(1.0))
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
        axes.legend(title="user queue", loc="upper right", fontsize="small")
    subplots[-1].set_xlabel("time since the first task launch (s)")
    return figure


def delay_breakdown(runs: list[dict]) -> Figure | None:
    shown = [run for run in runs if run.get("breakdown", {}).get("mean_s")]
    if not shown:
        return None
    figure = new_figure((max(7.0, 3.5 + 1.2 * len(shown)), WIDE[1]))
    axes = figure.add_subplot()
    names = [run["name"] for run in shown]
    bottom = [0.0] * len(shown)
    for index, part in enumerate(PARTS):
        heights = [run["breakdown"]["mean_s"][part] * 1000 for run in shown]
        axes.bar(names, heights, bottom=bottom, color=f"C{index}", width=0.6,
                 label=part.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for x, total in enumerate(bottom):
        axes.annotate(f"{total:.1f} ms", (x, total), ha="center", va="bottom",
                      xytext=(0, 2), textcoords="offset points")
    axes.set_ylim(0, max(bottom) * 1.12 or 1.0)  # room for the totals above the bars
    axes.set_title("Allocation time by part (mean per task)")
    axes.set_xlabel("run")
    axes.set_ylabel("mean time (ms)")
    axes.grid(True, axis="y", alpha=0.3)
    # parts top to bottom in the legend, as they are stacked in the bars
    handles, labels = axes.get_legend_handles_labels()
    axes.legend(handles[::-1], labels[::-1], title="part", loc="upper left",
                bbox_to_anchor=(1.01, 1.0))
    return figure


def estimation_error_cdf(runs: list[dict]) -> Figure | None:
    # estimate / work is above 0, and over- and under-estimates by k times weigh alike: log
    figure = cdf_plot(runs, lambda run: run.get("estimation", {}).get("error", {}).get("cdf"),
                      1.0, "Job-size estimation error (estimate / measured work; 1 is exact)",
                      "estimate / work (log scale)", log=True)
    if figure is not None:
        figure.axes[0].axvline(1.0, color="grey", linewidth=1)  # the exact estimate
    return figure


def sampling_ratio_over_time(runs: list[dict]) -> Figure | None:
    shown = [(i, run) for i, run in enumerate(runs)
             if run.get("estimation", {}).get("sampling_ratio_over_time")]
    if not shown:
        return None
    figure = new_figure()
    axes = figure.add_subplot()
    markers = ("o", "s", "^", "D", "v", "x")
    highest = 0.0
    for index, run in shown:
        points = run["estimation"]["sampling_ratio_over_time"]
        highest = max(highest, *(r for _, r in points))
        axes.scatter([t for t, _ in points], [r for _, r in points], s=16, alpha=0.6,
                     marker=markers[index % len(markers)], color=run_style(index)["color"],
                     label=run["name"])
    axes.set_title("Sampling ratio chosen per wide job (slearn's pilot tasks / tasks)")
    axes.set_xlabel("job arrival, since the run's first (s)")
    axes.set_ylabel("sampling ratio")
    axes.set_ylim(0, highest * 1.25 or 1.0)  # room above the points for the legend
    axes.grid(True, alpha=0.3)
    axes.legend(title="run", loc="upper right", ncols=min(len(shown), 4))
    return figure


def copies_cancelled(runs: list[dict]) -> Figure | None:
    """Grouped bars: a group per reason a copy was cancelled, a bar per run with copies."""
    shown = [(i, run) for i, run in enumerate(runs)
             if run.get("redundancy", {}).get("cancelled_by_why")]
    if not shown:
        return None
    # reasons in the order of their total over the runs: the common ones on the left
    totals: dict[str, int] = {}
    for _, run in shown:
        for why, count in run["redundancy"]["cancelled_by_why"].items():
            totals[why] = totals.get(why, 0) + count
    reasons = sorted(totals, key=lambda why: -totals[why])
    figure = new_figure((max(7.0, 2.0 + 1.2 * len(reasons)), WIDE[1]))
    axes = figure.add_subplot()
    width = 0.8 / len(shown)
    for slot, (index, run) in enumerate(shown):
        counts = [run["redundancy"]["cancelled_by_why"].get(why, 0) for why in reasons]
        axes.bar([x + (slot - (len(shown) - 1) / 2) * width for x in range(len(reasons))],
                 counts, width=width, color=run_style(index)["color"], label=run["name"])
    axes.set_xticks(range(len(reasons)), [why.replace("_", " ") for why in reasons])
    axes.set_title("Redundant copies cancelled, by reason")
    axes.set_xlabel("reason")
    axes.set_ylabel("copies cancelled")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(title="run", loc="upper right")
    return figure


PLOTS: dict[str, Callable[[list[dict]], Figure | None]] = {
    "allocation_cdf": allocation_cdf,
    "jct_cdf": jct_cdf,
    "share_over_time": share_over_time,
    "delay_breakdown": delay_breakdown,
    "estimation_error_cdf": estimation_error_cdf,
    "sampling_ratio_over_time": sampling_ratio_over_time,
    "copies_cancelled": copies_cancelled,
}


def write_plots(result: dict, directory: Path | None) -> dict[str, bytes]:
    """PNG bytes by plot name, for every plot with data; also `<name>.png` in `directory`."""
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    pngs: dict[str, bytes] = {}
    for name, draw in PLOTS.items():
        figure = draw(result["runs"])
        if figure is None:
            continue
        pngs[name] = png_bytes(figure)
        if directory is not None:
            (directory / f"{name}.png").write_bytes(pngs[name])
    return pngs
