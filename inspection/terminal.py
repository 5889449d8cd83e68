"""The report as terminal tables (rich): what `megha inspect` prints by default."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from inspection.analysis import PARTS

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
    jct = run["jct"]
    console.print(_stats_table(
        "job completion time", {"all jobs": jct["overall"]}
        | {f"user {u}": s for u, s in jct["by_user"].items()}
        | {f"jobs of {c}": s for c, s in jct["by_size"].items()}, "s"))
    if jct["slowdown"].get("count"):
        console.print(_stats_table("slowdown (JCT / the job's longest task)",
                                   {"all jobs": jct["slowdown"]}, "x"))
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
        for column in ("user queue", "configured", "mean share"):
            table.add_column(column, justify="left" if column == "user queue" else "right")
        for user, share in fairness["mean_share"].items():
            configured = fairness["configured"].get(user)
            table.add_row(user, "" if configured is None else f"{configured:.0%}",
                          f"{share:.1%}")
        console.print(table)


def render_comparison(console: Console, comparison: dict) -> None:
    runs = comparison["runs"]
    table = Table(title=f"comparison (ratios to {runs[0]})", title_justify="left")
    table.add_column("figure")
    for name in runs:
        table.add_column(name, justify="right")
    for name in runs[1:]:
        table.add_column(f"{name} / {runs[0]}", justify="right")
    for row in comparison["rows"]:
        values = ["" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
                  for v in row["values"]]
        ratios = ["" if r is None else f"{r:.2f}x" for r in row["ratios"][1:]]
        table.add_row(row["figure"], *values, *ratios)
    console.print(table)
