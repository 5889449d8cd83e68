"""Runs side by side: the headline figures of each, and each run's ratio to the first.

The first run is the baseline (name it first: `megha inspect base=a/ new=b/`). A ratio below
1 means the run's figure is smaller than the baseline's: for times, faster.

When a run carries job-size estimation (its report has an `estimation` section), the table
also gives each run's estimation error (p50 of estimate / work) and share of wide jobs in their
true queue, and, if one run is the reference `slearn` (the run named so, else the one run
whose predictor is slearn), each run's mean and p50 JCT divided by the reference's: above 1,
slearn is the faster.

When some run's jobs carry weights other than 1 (its report's `jct.weighted`), the table also
gives each run's weighted JCT mean (the sum of weight x JCT over the sum of weights), after
the JCT mean: the figure the `wspt` job policy lowers. Without weights it equals the mean and
is left out.

When a run has redundant copies (a `redundancy` section), the table also gives each run's
copies launched, share of its tasks with copies won by a copy, and wasted work over useful
work; a run without copies shows none of them.
"""

from __future__ import annotations

# (label, path into a run's report): the figures a comparison shows
FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("allocation p50 (s)", ("allocation", "overall", "p50")),
    ("allocation p99 (s)", ("allocation", "overall", "p99")),
    ("allocation p99.99 (s)", ("allocation", "overall", "p99.99")),
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

# (label, path): the weighted mean JCT, shown after the JCT mean when some run has weights
WEIGHTED_FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("weighted JCT mean (s)", ("jct", "weighted_mean")),
)

# (label, path): the redundancy figures, shown when some run has a redundancy section
REDUNDANCY_FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("copies launched", ("redundancy", "copies_launched")),
    ("wins by copy share", ("redundancy", "wins_by_copy_share")),
    ("wasted work share", ("redundancy", "wasted_work_share")),
)

REFERENCE = "slearn"
# (label, path): the estimation figures, shown when some run has an estimation section
ESTIMATION_FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("estimate/work p50", ("estimation", "error", "p50")),
    ("correct queue share (wide jobs)", ("estimation", "correct_queue_share_wide")),
)
# (label, path): each run's figure divided by the reference run's (named after the label)
TO_REFERENCE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("JCT mean", ("jct", "overall", "mean")),
    ("JCT p50", ("jct", "overall", "p50")),
)


def _get(report: dict, path: tuple[str, ...]) -> float | None:
    value = report
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value if isinstance(value, int | float) else None


def _ratios(values: list, base) -> list[float | None]:
    return [None if base in (None, 0) or value is None else value / base for value in values]


def reference_run(reports: list[dict]) -> int | None:
    """The index of the run the `/ slearn` rows divide by: the run named `slearn`, else the
    only run whose predictor is slearn; None if there is none."""
    names = [report["name"] for report in reports]
    if REFERENCE in names:
        return names.index(REFERENCE)
    by_predictor = [i for i, report in enumerate(reports)
                    if report.get("estimation", {}).get("predictor") == REFERENCE]
    return by_predictor[0] if len(by_predictor) == 1 else None


def _rows(figures: tuple[tuple[str, tuple[str, ...]], ...], reports: list[dict]) -> list[dict]:
    rows = []
    for label, path in figures:
        values = [_get(report, path) for report in reports]
        rows.append({"figure": label, "values": values, "ratios": _ratios(values, values[0])})
    return rows


def compare(reports: list[dict]) -> dict:
    """{"runs": names, "rows": [{"figure", "values", "ratios"}]} (ratios to the first run;
    None where the baseline is 0 or a figure is missing). With estimation, also
    "reference": the run the `/ slearn` rows divide by, or None; their `values` are the
    ratios themselves (`"kind": "ratio"`) and their `ratios` are None (the label, as
    `JCT mean / slearn`, names the reference run)."""
    figures = FIGURES
    if any(report.get("jct", {}).get("weighted") for report in reports):
        after = [label for label, _ in FIGURES].index("JCT mean (s)") + 1
        figures = FIGURES[:after] + WEIGHTED_FIGURES + FIGURES[after:]
    rows = _rows(figures, reports)
    result = {"runs": [report["name"] for report in reports], "rows": rows}
    if any("redundancy" in report for report in reports):
        rows += _rows(REDUNDANCY_FIGURES, reports)
    if not any("estimation" in report for report in reports):
        return result
    rows += _rows(ESTIMATION_FIGURES, reports)
    reference = reference_run(reports)
    result["reference"] = None if reference is None else reports[reference]["name"]
    if reference is not None:
        for label, path in TO_REFERENCE:
            values = [_get(report, path) for report in reports]
            rows.append({"figure": f"{label} / {result['reference']}",
                         "values": _ratios(values, values[reference]),
                         "ratios": [None] * len(reports), "kind": "ratio"})
    return result
