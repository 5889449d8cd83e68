"""What a GM keeps of each job and task it owns.

Plain records: the GM and its helpers (`common/attempts.py`, `common/pending.py`,
`common/placer.py`, `common/gm_outbox.py`) change their fields; the GM alone moves a task or
job from state to state (`GlobalMaster._move`, `_move_job`), checked against the tables in
`common/lifecycle.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import InvariantViolated
from common.job_queue import JobQueue
from common.lifecycle import JobState, TaskState
from common.messages import Placement
from common.models import JobSpec, TaskSpec
from common.policies.job import JobProgress
from common.reasons import Reason

LAUNCHED_STATES = frozenset({TaskState.LAUNCHED, TaskState.RUNNING})  # an LM holds an attempt
# placed or about to be: what a priority queue's share of resources counts (policies/jobs)
ACTIVE_STATES = frozenset({TaskState.PLACING, *LAUNCHED_STATES})
WAITING_STATES = frozenset({TaskState.PENDING, TaskState.HELD})  # the backlog a GM bounds
ENDED_TASK_STATES = frozenset({TaskState.DONE, TaskState.FAILED})
ENDED_JOB_STATES = frozenset({JobState.DONE, JobState.FAILED})


@dataclass(slots=True, eq=False)
class TaskRecord:
    spec: TaskSpec
    job: JobRecord
    index: int  # within its job: pilots are named by index
    shape: tuple  # TaskSpec.shape, computed once: placement caches and skips by it
    state: TaskState = TaskState.PENDING
    reason: Reason = Reason.NO_VIEW  # why it is where it is; for a pending task, why it waits
    attempts: int = 0  # attempt ids issued so far: the n of `task#epoch.n`
    live: str | None = None  # the attempt the GM is waiting for
    lm: str | None = None  # where the live (or finishing) attempt runs
    node: str | None = None
    failures: int = 0  # worker-reported failures (`GMConfig.max_failures`)
    losses: int = 0  # node losses and unanswered requests (`GMConfig.max_losses`)
    runtime: float | None = None
    started_at: float | None = None  # first start: the worker's clock, else when the GM heard
    launched_at: tuple[int, int] | None = None  # the LM's version when it took the attempt
    missing_since: float | None = None  # first heartbeat that no longer listed it
    listed: tuple[str, str] | None = None  # (lm, attempt) under which the attempt book lists it
    seq: int = 0  # its place in its job's waiting queue (`common/job_queue.py`)
    # the job's priority its last placement carried (None: not sent by this incarnation):
    # what its worker keys it by until a reprioritization (`common/reprioritize.py`)
    priority: float | None = None

    def placement(self, attempt_id: str, gm: str, priority: float,
                  pilots: frozenset[int]) -> Placement:
        """What the LM and worker are told of one attempt of this task (the priority it
        carries is noted); `pilots`: its job's pilot tasks while they are being measured
        (`JobProgress.sampling`), else none."""
        self.priority = priority
        return Placement(attempt_id, self.spec, self.node or "", gm, self.job.spec.user,
                         priority, self.index in pilots)


@dataclass(slots=True, eq=False)
class JobRecord:
    spec: JobSpec
    progress: JobProgress  # what the job policy orders by, and the pilots it chose
    tasks: list[TaskRecord] = field(default_factory=list)
    pending: JobQueue = field(default_factory=JobQueue)  # to place, in this order
    held: JobQueue = field(default_factory=JobQueue)  # waiting for its pilots
    state: JobState = JobState.PENDING
    key: tuple = ()  # the job policy's order key, as filed in the pending index
    level: int = 0  # the priority queue it is filed in (`progress.level` once refiled)
    active: int = 0  # its tasks placing, launched or running
    reason: str = ""  # why it failed
    finished_at: float | None = None

    def add_tasks(self) -> list[TaskRecord]:
        """A record per task of the spec: held if the job policy chose pilots and it is not
        one of them, else pending (the GM's backlog queues them)."""
        pilots, tasks = self.progress.pilots, self.tasks
        # tasks of one shape share one tuple: a job's tasks mostly have one, and a simulation
        # keeps 100,000s of records
        shapes: dict[tuple, tuple] = {}
        for index, spec in enumerate(self.spec.tasks):
            shape = spec.shape
            task = TaskRecord(spec, self, index, shapes.setdefault(shape, shape))
            tasks.append(task)
            if pilots and index not in pilots:
                task.state, task.reason = TaskState.HELD, Reason.HELD_FOR_PILOTS
        return tasks

    def validate(self, gm: str) -> None:
        done = sum(t.state is TaskState.DONE for t in self.tasks)
        if done != self.progress.done:
            raise InvariantViolated(f"{gm}: job {self.spec.job_id} counts {self.progress.done} "
                                    f"done tasks, has {done}")
