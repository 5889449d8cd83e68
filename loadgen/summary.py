"""The figures of a replay: counts, allocation-time and job-completion-time percentiles, as a
dictionary (for the results file and scripts) and as the text printed at the end."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from loadgen.replay import LATE_AFTER, JobOutcome, ReplayResult, rejection_reasons

PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted values."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = (len(sorted_values) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    figures = {f"p{p}": percentile(ordered, p) for p in PERCENTILES}
    figures["max"] = ordered[-1]
    figures["mean"] = statistics.fmean(ordered)
    return figures


def summarize(result: ReplayResult) -> dict:
    outcomes = result.outcomes
    accepted = [o for o in outcomes if o.status == "accepted"]
    allocation = [t for o in accepted for t in o.allocation_times()]
    jcts = [o.jct for o in accepted if o.jct is not None]
    late = [o.late_by for o in outcomes if o.late_by > LATE_AFTER]
    return {
        "jobs": len(outcomes),
        "tasks": sum(len(o.job.tasks) for o in outcomes),
        "accepted": len(accepted),
        "rejected": sum(o.status == "rejected" for o in outcomes),
        "unreachable": sum(o.status in ("unreachable", "unsent") for o in outcomes),
        "rejection_reasons": dict(rejection_reasons(outcomes).most_common()),
        "completed": sum(o.state == "done" for o in accepted),
        "failed": sum(o.state == "failed" for o in accepted),
        "unfinished": sum(o.state not in ("done", "failed") for o in accepted),
        "tasks_with_start_time": len(allocation),
        "late_submissions": len(late),
        "max_late_s": max(late, default=0.0),
        "allocation_time_s": distribution(allocation),
        "jct_s": distribution(jcts),
        "wall_s": result.wall_seconds,
        "timed_out": result.timed_out,
    }


def job_record(outcome: JobOutcome) -> dict:
    """One job of the results file."""
    return {"job": outcome.job.job_id, "user": outcome.job.user, "gm": outcome.gm,
            "tasks": len(outcome.job.tasks), "scheduled_s": outcome.job.arrival,
            "late_by_s": outcome.late_by, "status": outcome.status,
            "http_status": outcome.http_status, "detail": outcome.detail,
            "state": outcome.state, "reason": outcome.reason, "arrival": outcome.arrival,
            "finished_at": outcome.finished_at, "jct_s": outcome.jct,
            "allocation_times_s": outcome.allocation_times()}


def _ms(figures: dict[str, float] | None) -> str:
    if figures is None:
        return "none measured"
    order = [f"p{p}" for p in PERCENTILES] + ["max", "mean"]
    return "  ".join(f"{key} {figures[key] * 1000:.1f}" for key in order)


def _s(figures: dict[str, float] | None) -> str:
    if figures is None:
        return "none measured"
    order = ["mean"] + [f"p{p}" for p in PERCENTILES] + ["max"]
    return "  ".join(f"{key} {figures[key]:.2f}" for key in order)


SHOWN_REASONS = 5  # distinct rejection reasons the printed summary lists


def render(summary: dict) -> str:
    lines = [
        "replay summary",
        f"  jobs        {summary['jobs']} submitted ({summary['tasks']} tasks): "
        f"{summary['accepted']} accepted, {summary['rejected']} rejected, "
        f"{summary['unreachable']} not delivered",
        f"  outcome     {summary['completed']} completed, {summary['failed']} failed, "
        f"{summary['unfinished']} unfinished",
    ]
    reasons = list(summary["rejection_reasons"].items())
    for reason, count in reasons[:SHOWN_REASONS]:
        lines.append(f"  refused x{count}: {reason}")
    if len(reasons) > SHOWN_REASONS:
        others = sum(count for _, count in reasons[SHOWN_REASONS:])
        lines.append(f"  refused x{others}: {len(reasons) - SHOWN_REASONS} other reason(s), "
                     f"every one in the --results file")
    lines += [
        f"  late        {summary['late_submissions']} submission(s) more than "
        f"{LATE_AFTER * 1000:.0f} ms behind schedule (worst {summary['max_late_s']:.3f} s)",
        f"  allocation  ms over {summary['tasks_with_start_time']} tasks, "
        f"from arrival at the GM to start on a worker: {_ms(summary['allocation_time_s'])}",
        f"  jct         s over {summary['completed']} jobs: {_s(summary['jct_s'])}",
        f"  wall time   {summary['wall_s']:.1f} s" + (" (gave up waiting)"
                                                      if summary["timed_out"] else ""),
    ]
    return "\n".join(lines)
