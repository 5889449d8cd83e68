"""The figures of a replay: counts, backpressure (answers 429 and the delay they caused),
allocation-time and job-completion-time percentiles, as a dictionary (for the results file and
scripts) and as the text printed at the end."""

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
    held_back = [o for o in outcomes if o.held_back]
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
        # backpressure: answers 429 (each retried after its Retry-After), and the jobs it
        # delayed (a 429, or a wait behind their GM's shut or narrowed gate)
        "answers_429": sum(o.deferrals for o in outcomes),
        "jobs_answered_429": sum(o.deferrals > 0 for o in outcomes),
        "jobs_held_back": len(held_back),
        "held_back_accepted_after_s": distribution(
            [o.accepted_after for o in held_back if o.accepted_after is not None]),
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
            "attempts": outcome.attempts, "answers_429": outcome.deferrals,
            "held_s": outcome.held_s, "accepted_after_s": outcome.accepted_after,
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


def _backpressure(summary: dict) -> str:
    waits = summary["held_back_accepted_after_s"]
    accepted = ("none accepted" if waits is None else
                f"accepted after p50 {waits['p50']:.1f} s, max {waits['max']:.1f} s")
    return (f"  backpressure  {summary['answers_429']} answers 429 for "
            f"{summary['jobs_answered_429']} jobs (retried as told); "
            f"{summary['jobs_held_back']} jobs held back, {accepted}")


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
    lines.append(
        f"  late        {summary['late_submissions']} submission(s) more than "
        f"{LATE_AFTER * 1000:.0f} ms behind schedule (worst {summary['max_late_s']:.3f} s)")
    if summary["answers_429"]:
        lines.append(_backpressure(summary))
    lines += [
        f"  allocation  ms over {summary['tasks_with_start_time']} tasks, "
        f"from arrival at the GM to start on a worker: {_ms(summary['allocation_time_s'])}",
        f"  jct         s over {summary['completed']} jobs: {_s(summary['jct_s'])}",
        f"  wall time   {summary['wall_s']:.1f} s" + (" (gave up waiting)"
                                                      if summary["timed_out"] else ""),
    ]
    return "\n".join(lines)
