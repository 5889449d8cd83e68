"""Fewest remaining tasks first (`fewest-tasks`): the order of the published Megha simulator.

Each GM serves first the job with the fewest unfinished tasks (`JobProgress.remaining`: its
tasks minus those finished, so a running task still counts), ties by arrival at the GM. This
is the order of the published Megha simulator (`megha_sim`, its `gm_least_num_tasks` GM: the
job queue sorted by `num_tasks - len(completed_tasks)`), not the Megha paper's, which serves
a GM's jobs first come, first served (`fifo` here). No size is estimated: a job's width, and
what of it is done, is all it reads, so it needs no stated durations, pilots or history.

There is no ladder: the GM keeps one queue in `order_key` order, `(remaining, seq)`. The key
follows the job's progress as `wspt`'s does: after each finished task (`task_finished`, once
`JobProgress.finish` has counted it) and each task a recovered job reports done, the GM
refiles the job under its new key (`GlobalMaster` calls `Backlog.refile`, which re-keys a
ladder-less policy's job in `WaitingIndex.rekey`), so every pass sees the jobs in the order
of their current count of unfinished tasks.

The simulator sorts its queue when a job arrives and again when a job whose tasks were all
handed out comes back to it (`unschedule_job`: an LM refused a placement, so a task must be
placed again). That re-sort is needed there because a fully scheduled job leaves the
simulator's queue, and while it is out its finished tasks change its count; on its return
the queue is sorted by the counts as they are now. Here a job never leaves the order while
it has waiting tasks, and its key is already refiled at every finish, so the order is always
by the current counts; a requeued task (`Backlog.requeue`) finished nothing, changes no
count and so no key, and the job's place is already the one the simulator's re-sort would
give it. Two differences remain, both of timing: the simulator does not re-sort when a task
finishes (a job's count moves at the next arrival or requeue), where this policy moves it at
once; and a job the simulator puts back goes ahead of jobs with the same count (inserted
first, then a stable sort), where here ties go by arrival.

Workers' SRPT queues get the same figure (`worker_priority`: the unfinished tasks, fewest
first), and the GM sends it again as it halves (`common/reprioritize.py`).
"""

from __future__ import annotations

from common.policies.job import JOB_POLICIES, FifoPolicy, JobProgress


@JOB_POLICIES.register("fewest-tasks")
class FewestTasksPolicy(FifoPolicy):
    """The fewest unfinished tasks first, then arrival; no pilots, no levels. It reads none
    of its `JobOptions`."""

    def order_key(self, job: JobProgress) -> tuple:
        return (job.remaining, job.seq)

    def worker_priority(self, job: JobProgress) -> float:
        return float(job.remaining)
