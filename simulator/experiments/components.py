"""`megha experiment components`: where megha's allocation time goes, the Megha paper's
Figure 7 (communication over 90%, processing under 3%, framework queuing about 7%), a sweep of
a simulated cluster (cluster_sweep.py).

By default: the cloudera stand-in, as the paper, on 10,000 nodes, 4 GMs and 25 LMs
(`baselines`'s cluster), at our calibrated costs and at 0.1 and 0.03 of them, with
modelled processing (simulator/processing.py), so that each service is a single server whose
events wait behind one another. `--values` lists schedulers (megha, centralized). The figures
are each run's `breakdown.components` (inspection/analysis.py): communication, processing at
the GM, the LM and the worker, framework queuing, inconsistency retries, waiting for
resources and worker queuing, their mean and share of the mean allocation time.

`--delays MS,...` (here and in `centralized`) runs every value at each one-way network delay
(a constant, in milliseconds) instead of `--delay`'s one, as runs named `VALUE@delay-MSms`
whose shape says `delay_ms`; the figures are then each delay's own (`by_delay`) and what
changes with the delay (`delay_summary`): here, per value, the share of communication,
processing (GM, LM and worker) and framework queuing in the mean allocation time at each
delay, and the first delay at which communication is the largest part.
"""

from __future__ import annotations

from rich.table import Table

from common.errors import InvalidInput
from inspection.analysis import COMPONENTS
from simulator.experiments.delay_sweep import DelaySweep, by_delay
from simulator.experiments.registry import EXPERIMENTS
from simulator.processing import parse_processing

SCHEDULERS = ("megha", "centralized")
# the paper's Figure 7 shares, where it gives them
PAPER_SHARES = {"communication": "> 90%", "processing_gm": "< 3% (all processing)",
                "framework_queuing": "~7%", "batch_wait": "(in its queuing, in part)"}


def runs(values: tuple[str, ...]) -> list[tuple[str, dict]]:
    """(run name, change from the base shape) per value: a scheduler, or SCHEDULER@SCALE for
    its services with the modelled costs times SCALE (megha@0.1: ten times faster)."""
    out = []
    for value in values:
        scheduler, sep, scale = value.partition("@")
        if scheduler not in SCHEDULERS:
            raise InvalidInput("--values", f"{value!r}: {scheduler!r} is not one of the "
                                           f"schedulers components compares "
                                           f"({', '.join(SCHEDULERS)})")
        change = {"scheduler": scheduler}
        if sep:
            processing = f"model:{scale}"
            try:
                parse_processing(processing)
            except InvalidInput as error:
                raise InvalidInput("--values", f"{value!r}: {error.message}") from None
            change["processing"] = processing
        out.append((value, change))
    return out


def figures(reports: list[dict]) -> tuple[dict, tuple[Table, ...]]:
    """Each run's components, as the mean over tasks and as the median (the paper took the
    median of each component), each with its share of the sum: results.json's `figures`, and
    their table."""
    shares = {report["name"]: _components(report) for report in reports}
    table = Table(title="allocation time by component: mean ms and share; median ms and share "
                        "of the medians (the paper's measure)")
    table.add_column("component")
    for name in shares:
        table.add_column(f"{name} mean", justify="right")
        table.add_column(f"{name} median", justify="right")
    table.add_column("paper (Fig. 7)", justify="right")
    for part in COMPONENTS:
        cells = []
        for figures_of in shares.values():
            if figures_of is None:
                cells += ["-", "-"]
                continue
            cells.append(f"{figures_of['mean_ms'][part]:.3f}  {figures_of['share'][part]:6.1%}")
            cells.append(f"{figures_of['median_ms'][part]:.3f}  "
                         f"{figures_of['median_share'][part]:6.1%}")
        table.add_row(part.replace("_", " "), *cells, PAPER_SHARES.get(part, ""))
    return {"components": shares}, (table,)


def _components(report: dict) -> dict | None:
    components = report.get("breakdown", {}).get("components")
    if not components:
        return None
    return {"tasks": report["breakdown"]["tasks"],
            "mean_allocation_ms": report["allocation"]["overall"]["mean"] * 1e3,
            "mean_ms": {part: value * 1e3 for part, value in components["mean_s"].items()},
            "share": components["share"],
            "median_ms": {part: value * 1e3 for part, value in components["p50_s"].items()},
            "median_share": _shares_of(components["p50_s"])}


def _shares_of(values: dict[str, float]) -> dict[str, float]:
    """Each value's share of their sum; negatives (rounding, a few ns) count as 0."""
    total = sum(max(value, 0.0) for value in values.values())
    return {part: max(value, 0.0) / total if total > 0 else 0.0
            for part, value in values.items()}


# Figure 7's parts in components' --delays summary: processing the GM's, LM's and worker's
# together, the other components as they are; the table shows SHOWN of them
PROCESSING = ("processing_gm", "processing_lm", "processing_worker")
PARTS = {part: (part,) for part in COMPONENTS if part not in PROCESSING} | {
    "processing": PROCESSING}
SHOWN = ("communication", "processing", "framework_queuing", "batch_wait")


def delay_summary(by_delay: dict[str, dict]) -> tuple[dict, Table]:
    """Per value, at each delay: the share of each of `PARTS` in the mean allocation time and
    the largest part, and the first delay at which communication is the largest:
    results.json's `figures.delay_summary`, and its table."""
    summary: dict = {}
    table = Table(title="where communication starts to dominate: share of the mean allocation "
                        "time at each one-way delay")
    for column in ("value", "delay (ms)", "mean allocation (ms)", *SHOWN, "largest part"):
        table.add_column(column.replace("_", " "), justify="right")
    for delay, figures_at in by_delay.items():
        for name, components in figures_at["components"].items():
            if components is None:
                continue
            share = {part: sum(components["share"][each] for each in members)
                     for part, members in PARTS.items()}
            largest = max(share, key=share.get)
            summary.setdefault(name, {"by_delay": {}})["by_delay"][delay] = {
                "mean_allocation_ms": components["mean_allocation_ms"], "share": share,
                "largest": largest}
            table.add_row(name, delay, f"{components['mean_allocation_ms']:.3f}",
                          *(f"{share[part]:.1%}" for part in SHOWN),
                          f"{largest.replace('_', ' ')} {share[largest]:.1%}")
    for value in summary.values():
        value["communication_largest_from_ms"] = next(
            (float(delay) for delay, at in value["by_delay"].items()
             if at["largest"] == "communication"), None)
    return summary, table


EXPERIMENTS.register(DelaySweep(
    name="components",
    summary="where megha's allocation time goes: communication, processing, queuing, "
            "retries (the Megha paper's Figure 7)",
    # the calibrated model, and services 10 and 33 times faster: how fast they must be for
    # communication to dominate as in the paper
    swept="schedulers (SCHEDULER@SCALE: its costs times SCALE)",
    default_values="megha,megha@0.1,megha@0.03", plan=runs,
    defaults={"nodes": 10_000, "gms": 4, "lms": 25}, sets=frozenset({"scheduler"}),
    workload="cloudera", figures_of=by_delay(figures, delay_summary)))
