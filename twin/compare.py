"""How far a simulation is from the services on the same workload: per figure, the larger of
the two values over the smaller (1.0: identical; None where either is missing or zero), and
the side-by-side table of the three runs."""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.table import Table

# name -> (section, key) of a report (inspection/analysis.py)
FIGURES = {
    "allocation_p50": ("allocation", "p50"), "allocation_p90": ("allocation", "p90"),
    "allocation_p99": ("allocation", "p99"), "allocation_mean": ("allocation", "mean"),
    "jct_mean": ("jct", "mean"), "jct_p50": ("jct", "p50"), "jct_p99": ("jct", "p99"),
}
COUNTS = ("launches_refused", "repartitions", "preemptions", "requeues")
TARGETS = {"allocation_p50": 1.2, "allocation_p99": 1.5, "jct_mean": 1.1}  # the issue's


def figure(report: dict, name: str) -> float | None:
    section, key = FIGURES[name]
    value = report.get(section, {}).get("overall", {}).get(key)
    return None if value is None else float(value)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return max(a, b) / min(a, b)


def divergence(services: dict, simulated: dict) -> dict:
    """Each figure's larger-over-smaller ratio, and each component's share apart (points)."""
    out = {name: ratio(figure(services, name), figure(simulated, name)) for name in FIGURES}
    shares = (services.get("breakdown", {}).get("components", {}).get("share", {}),
              simulated.get("breakdown", {}).get("components", {}).get("share", {}))
    out["component_share_gap"] = {name: abs(shares[0][name] - shares[1].get(name, 0.0))
                                  for name in shares[0]}
    return out


def summary(report: dict) -> dict:
    """A run's figures that the twin compares: allocation and JCT, the Figure 7 components'
    shares and medians, and the counts."""
    components = report.get("breakdown", {}).get("components", {})
    return {"allocation": {k: report["allocation"]["overall"].get(k)
                           for k in ("count", "p50", "p90", "p99", "mean")},
            "jct": {k: report["jct"]["overall"].get(k) for k in ("count", "mean", "p50", "p99")},
            "components_share": components.get("share", {}),
            "components_p50_s": components.get("p50_s", {}),
            "counts": {k: report["counts"].get(k, 0) for k in COUNTS}}


def render(console: Console, runs: list[dict], divergences: dict[str, dict]) -> None:
    """The three runs side by side, each simulation's divergence beside its value."""
    names = [run["name"] for run in runs]
    table = Table(title="the services and the simulator on one workload (x: larger over "
                        "smaller, 1.00 is identical)")
    table.add_column("figure")
    for name in names:
        table.add_column(name, justify="right")

    def cell(run: dict, name: str, text: str) -> str:
        apart = divergences.get(run["name"], {}).get(name)
        return text if apart is None else f"{text} ({apart:.2f}x)"

    for name in FIGURES:
        unit, scale = ("ms", 1e3) if name.startswith("allocation") else ("s", 1.0)
        row = []
        for run in runs:
            value = figure(run, name)
            row.append("-" if value is None else cell(run, name, f"{value * scale:,.2f} {unit}"))
        table.add_row(name, *row)
    component_names = runs[0].get("breakdown", {}).get("components", {}).get("share", {})
    for component in component_names:
        shares = [run.get("breakdown", {}).get("components", {}).get("share", {}).get(component)
                  for run in runs]
        if any(shares):
            table.add_row(f"share: {component}",
                          *("-" if s is None else f"{s:.1%}" for s in shares))
    for count in COUNTS:
        table.add_row(count, *(f"{run['counts'].get(count, 0):,}" for run in runs))
    table.add_row("wall s", *(f"{run.get('wall_s', 0):,.1f}" for run in runs))
    console.print(table)


def hop_medians(sources: dict[str, object]) -> dict[str, dict[str, dict]]:
    """Per source (a TimeModel: its distributions; a folder or file of logs: what they show)
    and hop, the median and p90 in seconds and how many messages: where a simulation's time
    goes apart from the services', hop by hop."""
    from inspection.reader import ReadCounts, read_events
    from simulator.timemodel import HOPS, TimeModel
    from twin.fit import observe

    out: dict[str, dict[str, dict]] = {}
    for name, source in sources.items():
        if isinstance(source, TimeModel):
            out[name] = {hop: {"p50": source.hops[hop].at(0.5), "p90": source.hops[hop].at(0.9),
                               "messages": source.hops[hop].samples} for hop in HOPS}
            continue
        seen = observe(read_events([str(source)], ReadCounts()))
        out[name] = {}
        for hop, samples in seen.hops.items():
            delays = np.array([sample[0] for sample in samples])
            out[name][hop] = {"p50": float(np.percentile(delays, 50)),
                              "p90": float(np.percentile(delays, 90)),
                              "messages": len(delays)}
    return out


def render_hops(console: Console, hops: dict[str, dict[str, dict]]) -> None:
    """Each hop's median (p90) in ms, per source."""
    from simulator.timemodel import HOPS

    table = Table(title="each hop's delay, ms: median (p90); calibration is the model, the "
                        "others what their logs show")
    table.add_column("hop")
    for name in hops:
        table.add_column(name, justify="right")
    for hop in HOPS:
        cells = []
        for figures in hops.values():
            value = figures.get(hop)
            cells.append("-" if value is None else
                         f"{value['p50'] * 1e3:.2f} ({value['p90'] * 1e3:.2f})")
        table.add_row(hop, *cells)
    console.print(table)
