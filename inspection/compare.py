"""Runs side by side: the headline figures of each, and each run's ratio to the first.

The first run is the baseline (name it first: `megha inspect base=a/ new=b/`). A ratio below
1 means the run's figure is smaller than the baseline's: for times, faster.
"""

from __future__ import annotations

# (label, path into a run's report): the figures a comparison shows
FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("allocation p50 (s)", ("allocation", "overall", "p50")),
    ("allocation p99 (s)", ("allocation", "overall", "p99")),
    ("allocation max (s)", ("allocation", "overall", "max")),
    ("allocation mean (s)", ("allocation", "overall", "mean")),
    ("JCT mean (s)", ("jct", "overall", "mean")),
    ("JCT p50 (s)", ("jct", "overall", "p50")),
    ("JCT p99 (s)", ("jct", "overall", "p99")),
    ("slowdown mean", ("jct", "slowdown", "mean")),
    ("jobs done", ("counts", "jobs_done")),
    ("launches refused", ("counts", "launches_refused")),
    ("repartitions", ("counts", "repartitions")),
    ("preemptions", ("counts", "preemptions")),
    ("requeues", ("counts", "requeues")),
    ("tasks lost", ("counts", "tasks_lost")),
)


def _get(report: dict, path: tuple[str, ...]) -> float | None:
    value = report
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value if isinstance(value, int | float) else None


def compare(reports: list[dict]) -> dict:
    """{"runs": names, "rows": [{"figure", "values", "ratios"}]} (ratios to the first run;
    None where the baseline is 0 or a figure is missing)."""
    rows = []
    for label, path in FIGURES:
        values = [_get(report, path) for report in reports]
        base = values[0]
        ratios = [None if base in (None, 0) or value is None else value / base
                  for value in values]
        rows.append({"figure": label, "values": values, "ratios": ratios})
    return {"runs": [report["name"] for report in reports], "rows": rows}
