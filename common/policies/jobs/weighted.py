"""Weighted shortest processing time first (`wspt`): Smith's rule over a GM's jobs.

Each job carries a weight (`JobSpec.weight`, 1 unless the workload says otherwise: loadgen's
`--weight`), and the figure to lower is the weighted JCT, the sum of weight times JCT. On one
machine with known processing times Smith's rule is optimal for it: serve jobs by weight over
processing time, highest first. The packing paper's model, like the `oracle` policy, knows
processing times: a job's *work* is the sum of its tasks' stated durations (`true_work`), and
its *remaining work* that sum minus the runtime of its finished tasks (`attained`), never
below 0 (a task that ran longer than it said leaves the rest no longer). A job without stated
durations uses the trace's per-task estimate times its tasks left; a job with neither has no
known work and comes after every job with some, by weight (highest first), then arrival.

There is no ladder: the GM keeps one queue in `order_key` order, ascending remaining work /
weight (weight / remaining work, highest first). The key is not fixed at arrival: the GM
refiles a job under its new key whenever one of its tasks finishes (`Backlog.refile`, as
`las` moves down its levels), so the queue is ordered by the remaining-work ratio at every
pass: the preemptive form of the rule, under which a job nearly done overtakes a fresh one.
Workers' SRPT queues get the same ratio (`worker_priority`, lower served first), and the GM
sends it again as it halves or doubles (`common/reprioritize.py`).
"""

from __future__ import annotations

from common.policies.job import JOB_POLICIES, FifoPolicy, JobProgress


def remaining_work(job: JobProgress) -> float | None:
    """The job's remaining work, task-seconds; None when it has no known work."""
    if job.true_work > 0:
        return max(job.true_work - job.attained, 0.0)
    if job.trace_estimate is not None and job.trace_estimate > 0:
        return job.trace_estimate * job.remaining
    return None


@JOB_POLICIES.register("wspt")
class WeightedShortestFirstPolicy(FifoPolicy):
    """Smith's rule: highest weight / remaining work first; no pilots, no levels."""

    def order_key(self, job: JobProgress) -> tuple:
        work = remaining_work(job)
        if work is None:
            return (1, -job.weight, job.seq)
        return (0, work / job.weight, job.seq)

    def worker_priority(self, job: JobProgress) -> float:
        work = remaining_work(job)
        return job.arrival if work is None else work / job.weight  # as fifo without work
