"""When a GM tells its LMs that a job's priority changed (docs/local-queues.md, Estimates that
change).

A placement carries its job's priority (`Placement.priority`, the job policy's
`worker_priority`: its estimated remaining work) as it was when the GM sent it. Workers order
their local queues by it, and LMs their redundant copies' candidates; when the job's estimate
changes later (SLearn's pilots are measured, its tasks finish and its remaining work shrinks),
the tasks already at the workers would keep a stale key. `PriorityUpdates` decides when that
matters and to whom the new priority goes:

- **which LMs**: those holding launched or running tasks of the job now, counted per job and LM
  as tasks move in and out of the launched states (`GlobalMaster._move`), so that finding them
  costs nothing per task;
- **when**: only when the priority moved by at least `REPRIORITIZE_FACTOR` from any priority
  the job's launched tasks carried or a reprioritization sent since, or when the job's own
  estimate appeared (a priority without one, such as FIFO's arrival time, is not comparable
  to one with it).

It is built enabled only where an order at the workers exists to correct: a federation with
local queues or redundant copies (`GMConfig.reprioritize`); disabled, it keeps nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.commands import Log, SendReprioritize
from common.errors import InvariantViolated
from common.gm_records import ENDED_JOB_STATES, LAUNCHED_STATES, JobRecord, TaskRecord
from common.policies.job import JobPolicy, JobProgress
from common.step import Step

# A job's priority is sent again only once it has halved or doubled since the last one its
# workers heard. Its remaining work shrinks by one task's worth per finish: re-keying on every
# finish would cost one message per LM per task, while a factor of 2 bounds a job's
# reprioritizations to about log2(width) + 1 and never leaves a worker's key more than twice
# off, which keeps an SRPT order between jobs of different sizes.
REPRIORITIZE_FACTOR = 2.0


@dataclass(slots=True)
class _Carried:
    """What the launched tasks of one job carry, and where they are."""

    lms: dict[str, int] = field(default_factory=dict)  # LM -> its launched tasks of the job
    # the range of the priorities they carry (or were last sent): empty while low > high
    low: float = math.inf
    high: float = -math.inf
    unknown: bool = False  # one carries a priority not comparable (adopted, infinite)
    estimated: bool = False  # whether the job had its own estimate when they were sent

    def take(self, priority: float | None) -> None:
        if priority is None or not math.isfinite(priority):
            self.unknown = True
            return
        if priority < self.low:
            self.low = priority
        if priority > self.high:
            self.high = priority


def moved(old: float, new: float) -> bool:
    """Whether a worker keyed by `old` should hear `new`: off by the factor either way; a
    non-positive one (a pilot's 0, no attained service yet) differs from any other."""
    if old == new:
        return False
    if old <= 0 or new <= 0:
        return True
    return max(old, new) >= REPRIORITIZE_FACTOR * min(old, new)


def has_estimate(progress: JobProgress) -> bool:
    """The job's own estimate of its task duration is known (SLearn's pilots, history)."""
    return progress.estimated_task_duration is not None


class PriorityUpdates:
    """One GM's launched tasks per job and LM, and the priorities they carry."""

    def __init__(self, gm: str, policy: JobPolicy, enabled: bool) -> None:
        self.gm = gm
        self.policy = policy
        self.enabled = enabled
        self._jobs: dict[str, _Carried] = {}  # only jobs with launched tasks

    def launched(self, task: TaskRecord) -> None:
        """The task entered the launched states, at the LM its attempt book lists it under,
        carrying the priority it was sent with (`TaskRecord.priority`)."""
        if not self.enabled or task.listed is None:
            return
        job = task.job
        carried = self._jobs.get(job.spec.job_id)
        if carried is None:
            carried = self._jobs[job.spec.job_id] = _Carried(
                estimated=has_estimate(job.progress))
        lm = task.listed[0]
        carried.lms[lm] = carried.lms.get(lm, 0) + 1
        carried.take(task.priority)

    def unlaunched(self, task: TaskRecord) -> None:
        """The task leaves the launched states (called before its listing is dropped)."""
        if not self.enabled or task.listed is None:
            return
        job_id = task.job.spec.job_id
        carried = self._jobs[job_id]
        lm = task.listed[0]
        left = carried.lms[lm] - 1
        if left:
            carried.lms[lm] = left
        else:
            del carried.lms[lm]
            if not carried.lms:
                del self._jobs[job_id]  # the next launch carries the priority of its time

    def check(self, job: JobRecord, step: Step) -> None:
        """The job's estimate may have changed: send its new priority where it matters."""
        carried = self._jobs.get(job.spec.job_id)
        if carried is None:
            return
        priority = self.policy.worker_priority(job.progress)
        if not math.isfinite(priority):
            return  # a worker keys its queue by finite priorities only
        estimated = has_estimate(job.progress)
        if carried.unknown or estimated != carried.estimated:
            previous = None if carried.low > carried.high else carried.high
        elif moved(carried.high, priority):
            previous = carried.high
        elif moved(carried.low, priority):
            previous = carried.low
        else:
            return
        job_id = job.spec.job_id
        lms = sorted(carried.lms)
        for lm in lms:
            step.emit(SendReprioritize(lm, job_id, priority))
        step.emit(Log("job_reprioritized", {"job": job_id, "gm": self.gm, "priority": priority,
                                            "previous": previous, "lms": lms}))
        carried.low = carried.high = priority
        carried.unknown = False
        carried.estimated = estimated

    def validate(self, jobs: Iterable[JobRecord]) -> None:
        """The counts per job and LM are what the tasks' states and listings say."""
        if not self.enabled:
            return
        counted: dict[str, dict[str, int]] = {}
        for job in jobs:
            if job.state in ENDED_JOB_STATES:
                continue
            for task in job.tasks:
                if task.state in LAUNCHED_STATES and task.listed is not None:
                    by_lm = counted.setdefault(job.spec.job_id, {})
                    by_lm[task.listed[0]] = by_lm.get(task.listed[0], 0) + 1
        kept = {job_id: carried.lms for job_id, carried in self._jobs.items()}
        if kept != counted:
            raise InvariantViolated(f"{self.gm}: launched tasks per job and LM drifted: "
                                    f"counts {kept}, has {counted}")
