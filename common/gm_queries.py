"""What a GM answers about its jobs, beside scheduling them: a job's status, and the feed of
ended jobs a client follows instead of asking about each job."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from common.gm_records import JobRecord, TaskRecord
from common.reasons import Reason


def job_status(job: JobRecord,
               reason_of: Callable[[TaskRecord], Reason] = lambda task: task.reason) -> dict:
    """A job and its tasks; `reason_of` says why a task is where it is (for a waiting one,
    its demand may be blocked: `Backlog.reason_of`)."""
    progress = job.progress
    return {
        "job": job.spec.job_id, "user": job.spec.user, "name": job.spec.name,
        "state": str(job.state),
        "reason": job.reason, "arrival": job.spec.arrival, "finished_at": job.finished_at,
        "tasks_total": progress.num_tasks, "tasks_done": progress.done,
        "estimated_task_duration": progress.estimated_task_duration,
        "estimated_remaining_work": progress.estimated_remaining_work,
        "tasks": [
            {"task": t.spec.task_id, "state": str(t.state), "reason": str(reason_of(t)),
             "attempt": t.live, "lm": t.lm, "node": t.node, "runtime": t.runtime,
             "started_at": t.started_at, "pilot": t.index in progress.pilots}
            for t in job.tasks
        ],
    }


class EndedJobs:
    """Ended jobs in the order they ended, numbered from 1; the oldest are forgotten past
    `kept` (and the GM forgets their records with them)."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._ids: deque[str] = deque()
        self._base = 1  # the number of `_ids[0]`

    def append(self, job_id: str) -> str | None:
        """Record that `job_id` ended; returns the job forgotten to make room, if any."""
        self._ids.append(job_id)
        if len(self._ids) <= self.kept:
            return None
        self._base += 1
        return self._ids.popleft()

    def since(self, after: int, limit: int) -> tuple[list[str], int]:
        """Up to `limit` jobs that ended after the `after`-th (1 is the first to end), and the
        number of the last one returned (`after` if none): a cursor for a client that follows
        completions without asking about each job. Jobs forgotten already are skipped."""
        start = max(after + 1, self._base)
        first = start - self._base
        ended = self._ids  # a deque indexes from its nearer end: clients read the tail
        ids = [ended[k] for k in range(first, min(len(ended), first + max(0, limit)))]
        return ids, (start + len(ids) - 1) if ids else after
