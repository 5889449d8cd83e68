"""The report as terminal tables (rich): what `megha inspect` prints by default."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from inspection.analysis import COMPONENTS, PARTS

_STATS = ("count", "mean", "p50", "p90", "p99", "p99.9", "max")


def _ms(value) -> str:
    return "" if value is None else f"{value * 1000:.1f}"


def _s(value) -> str:
    return "" if value is None else f"{value:.2f}"


def _stats_table(title: str, rows: dict[str, dict], unit: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for stat in _STATS:
        table.add_column(stat if stat == "count" else f"{stat} ({unit})", justify="right")
    show = _ms if unit == "ms" else _s
    for name, summary in rows.items():
        if not summary.get("count"):
            continue
        table.add_row(name, str(summary["count"]),
                      *(show(summary.get(stat)) for stat in _STATS[1:]))
    return table


def weighted_jct_line(jct: dict) -> str | None:
    """The weighted JCT's sentence (the terminal's and the HTML report's); None when every job
    done weighs 1 (it is then the mean) or none is done."""
    if not jct.get("weighted") or jct.get("weighted_mean") is None:
        return None
    return (f"weighted JCT mean {jct['weighted_mean']:.2f} s: sum of weight x JCT / sum of "
            f"weights over {jct['overall']['count']} jobs done")


def _ratio(value) -> str:
    return "" if value is None else f"{value:.3g}"


def estimation_lines(estimation: dict) -> list[str]:
    """The estimation block's sentences (the terminal's and the HTML report's)."""
    error = estimation["error"]
    lines = [f"predictor {estimation['predictor']}: {estimation['jobs']} of "
             f"{estimation['jobs_done']} done jobs with an estimate "
             f"({estimation['jobs_thin']} thin)"]
    if error["count"]:
        lines.append(f"estimate / work over {error['count']} jobs: p10 {_ratio(error['p10'])}, "
                     f"p50 {_ratio(error['p50'])}, p90 {_ratio(error['p90'])}; mean "
                     f"|log10| {error['mean_abs_log10']:.3f}")
    share = estimation["correct_queue_share_wide"]
    if share is not None:
        lines.append(f"wide jobs in their true queue: {share:.1%} of "
                     f"{estimation['correct_queue_wide_jobs']}")
    delay = estimation["estimation_delay"]
    if delay.get("count"):
        lines.append(f"estimate known after arrival: mean {delay['mean']:.2f} s, p50 "
                     f"{delay['p50']:.2f} s, p90 {delay['p90']:.2f} s ({delay['count']} jobs)")
    if estimation["sampling_ratio_counts"]:
        lines.append("sampling ratios (jobs): " + ", ".join(
            f"{ratio} ({count})" for ratio, count in estimation["sampling_ratio_counts"].items()))
    return lines


def jct_bin_rows(estimation: dict) -> list[list[str]]:
    """The 2x2 JCT table's rows: thin, wide; by short (true level 0) and long (>= 1): jobs,
    mean (s), p50 (s)."""
    rows = []
    for width in ("thin", "wide"):
        row = [width]
        for length in ("short", "long"):
            cell = estimation["jct_by_bin"][f"{width}_{length}"]
            row += [str(cell["count"]), _s(cell.get("mean")), _s(cell.get("p50"))]
        rows.append(row)
    return rows


JCT_BIN_HEADER = ["width", "short: jobs", "short: mean (s)", "short: p50 (s)", "long: jobs",
                  "long: mean (s)", "long: p50 (s)"]
JCT_BIN_CAPTION = ("JCT by width and true size (long: true queue index >= 1, short: 0; thin: "
                   "fewer tasks than the thin limit)")


def render_estimation(console: Console, estimation: dict) -> None:
    console.print("[bold]Estimation[/bold]")
    for line in estimation_lines(estimation):
        console.print(f"  {line}", highlight=False)
    table = Table(title=JCT_BIN_CAPTION, title_justify="left")
    for column in JCT_BIN_HEADER:
        table.add_column(column, justify="left" if column == "width" else "right")
    for row in jct_bin_rows(estimation):
        table.add_row(*row)
    console.print(table)


def _work(value: float) -> str:
    return f"{value:.1f} s"


def redundancy_lines(redundancy: dict) -> list[str]:
    """The redundant copies block's sentences (the terminal's and the HTML report's); work in
    work-seconds, the seconds a task takes at its nominal speed."""
    cancelled = ", ".join(f"{why.replace('_', ' ')} {count}"
                          for why, count in redundancy["cancelled_by_why"].items())
    lines = [f"{redundancy['copies_launched']} copies launched for "
             f"{redundancy['tasks_with_copies']} tasks; {redundancy['copies_cancelled']} "
             f"cancelled" + (f": {cancelled}" if cancelled else "")]
    if redundancy["tasks_won"]:
        lines.append(f"{redundancy['tasks_won']} tasks with copies finished: "
                     f"{redundancy['wins_by_copy']} won by a copy "
                     f"({redundancy['wins_by_copy_share']:.1%}), "
                     f"{redundancy['wins_by_original']} by the original")
    checkpoints = redundancy["checkpoints_per_task"]
    if checkpoints["count"]:
        lines.append(f"checkpoints per task: mean {checkpoints['mean']:.2f}, p50 "
                     f"{checkpoints['p50']:g}, max {checkpoints['max']}; "
                     f"{redundancy['checkpoint_answers']} checkpoint answers, "
                     f"{redundancy['restores']} restores")
    if redundancy["late_finishes"]:
        lines.append(f"copies that finished after their cancel: {redundancy['late_finishes']}")
    by = redundancy["wasted_work_by"]
    share = redundancy["wasted_work_share"]
    # wasted: the work of the attempts that lost their race (analysis._work_by_outcome)
    lines.append(f"wasted work {_work(redundancy['wasted_work'])} (copies "
                 f"{_work(by['copies'])}, beaten originals {_work(by['originals'])})"
                 + ("" if share is None else f", {share:.1%} of the useful "
                                             f"{_work(redundancy['useful_work'])}"))
    return lines


def render_redundancy(console: Console, redundancy: dict) -> None:
    console.print("[bold]Redundant copies[/bold]")
    for line in redundancy_lines(redundancy):
        console.print(f"  {line}", highlight=False)


def render_run(console: Console, run: dict, read: dict) -> None:
    policies = ", ".join(f"{k} {v}" for k, v in run["policies"].items()) or "not logged"
    console.rule(f"[bold]{run['name']}[/bold]")
    console.print(f"{read['events']} events from {read['lines']} lines, "
                  f"{read['malformed']} malformed; policies: {policies}")
    for example in read["examples"]:
        console.print(f"  malformed: {example}")
    allocation = run["allocation"]
    console.print(_stats_table(
        "allocation time (first start on a worker - arrival at the GM)",
        {"all tasks": allocation["overall"]}
        | {f"user {u}": s for u, s in allocation["by_user"].items()}
        | {f"jobs of {c}": s for c, s in allocation["by_size"].items()}, "ms"))
    breakdown = run["breakdown"]
    if breakdown["tasks"]:
        incomplete = breakdown["incomplete"]
        title = f"where allocation time goes ({breakdown['tasks']} tasks" + (
            f", {incomplete} without every event)" if incomplete else ")")
        table = Table(title=title, title_justify="left")
        for column in ("part", "mean (ms)", "p50 (ms)", "share of mean"):
            table.add_column(column, justify="left" if column == "part" else "right")
        for part in PARTS:
            table.add_row(part.replace("_", " "), _ms(breakdown["mean_s"][part]),
                          _ms(breakdown["p50_s"][part]), f"{breakdown['share'][part]:.1%}")
        console.print(table)
        components = breakdown.get("components")
        if components:  # a simulation's finer split (the Megha paper's Figure 7)
            table = Table(title="its components (the Megha paper's Figure 7)",
                          title_justify="left")
            for column in ("component", "mean (ms)", "p50 (ms)", "share of mean"):
                table.add_column(column, justify="left" if column == "component" else "right")
            for part in COMPONENTS:
                table.add_row(part.replace("_", " "), _ms(components["mean_s"][part]),
                              _ms(components["p50_s"][part]),
                              f"{components['share'][part]:.1%}")
            console.print(table)
    jct = run["jct"]
    console.print(_stats_table(
        "job completion time", {"all jobs": jct["overall"]}
        | {f"user {u}": s for u, s in jct["by_user"].items()}
        | {f"jobs of {c}": s for c, s in jct["by_size"].items()}, "s"))
    weighted = weighted_jct_line(jct)
    if weighted is not None:
        console.print(f"  {weighted}", highlight=False)
    if jct["slowdown"].get("count"):
        console.print(_stats_table("slowdown (JCT / the job's longest task)",
                                   {"all jobs": jct["slowdown"]}, "x"))
    if "variability" in run:
        console.print(_stats_table("node speed variability (a run's wall time / its duration)",
                                   {"tasks started": run["variability"]}, "x"))
    counts = run["counts"]
    table = Table(title="counts", title_justify="left")
    table.add_column("what")
    table.add_column("count", justify="right")
    for name, value in counts.items():
        if isinstance(value, dict):
            for reason, count in value.items():
                table.add_row(f"  {name.removesuffix('_by_reason').replace('_', ' ')}: "
                              f"{reason}", str(count))
        else:
            table.add_row(name.replace("_", " "), str(value))
    console.print(table)
    fairness = run["fairness"]
    if fairness["mean_share"]:
        table = Table(title=f"share of the cluster's cpu "
                            f"({fairness['capacity_cpu_m'] / 1000:g} cores), time-weighted",
                      title_justify="left")
        for column in ("user queue", "configured", "mean share", "while it waited"):
            table.add_column(column, justify="left" if column == "user queue" else "right")
        active = fairness.get("waiting_share", {})
        for user, share in fairness["mean_share"].items():
            configured = fairness["configured"].get(user)
            table.add_row(user, "" if configured is None else f"{configured:.0%}",
                          f"{share:.1%}", f"{active[user]:.1%}" if user in active else "-")
        console.print(table)
    if "estimation" in run:
        render_estimation(console, run["estimation"])
    if "redundancy" in run:
        render_redundancy(console, run["redundancy"])


def comparison_cells(row: dict) -> list[str]:
    """A comparison row's cells after its label: the values, then the ratios to the first run
    (the terminal's and the HTML report's)."""
    if row.get("kind") == "ratio":
        values = ["" if v is None else f"{v:.2f}x" for v in row["values"]]
    else:
        values = ["" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
                  for v in row["values"]]
    return values + ["" if r is None else f"{r:.2f}x" for r in row["ratios"][1:]]


# Runs one comparison table shows beside the first: a sweep of 18 runs in one table has
# 36 columns, too narrow to read, so a wide comparison is printed as several tables.
RUNS_PER_TABLE = 3


def render_comparison(console: Console, comparison: dict) -> None:
    runs = comparison["runs"]
    others = list(range(1, len(runs)))
    chunks = [others[i:i + RUNS_PER_TABLE] for i in range(0, len(others), RUNS_PER_TABLE)]
    for part, chunk in enumerate(chunks or [[]], 1):
        shown = [0, *chunk]
        title = f"comparison (ratios to {runs[0]})"
        if len(chunks) > 1:
            title += f", part {part} of {len(chunks)}"
        table = Table(title=title, title_justify="left")
        table.add_column("figure")
        for i in shown:
            table.add_column(runs[i], justify="right")
        for i in chunk:
            table.add_column(f"{runs[i]} / {runs[0]}", justify="right")
        for row in comparison["rows"]:
            cells = comparison_cells(row)
            values, ratios = cells[:len(runs)], cells[len(runs):]
            table.add_row(row["figure"], *(values[i] for i in shown),
                          *(ratios[i - 1] for i in chunk))
        console.print(table)
    if comparison.get("reference"):
        console.print(f"/ {comparison['reference']}: the run's figure divided by "
                      f"{comparison['reference']}'s; above 1, {comparison['reference']} is "
                      f"the faster", highlight=False)
