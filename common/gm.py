"""The Global Master: places its user queues' tasks on a possibly stale view of every LM.

Flow (docs/architecture.md, Ownership and flows): tasks leave the pending queue in policy
order; each is tried in the GM's internal partitions round-robin across LMs, then in external
partitions (a repartition request), then, if the fairness policy allows, by preempting tasks of
a queue above its share (`common/placer.py`). A match is reserved in the view and batched per
LM (`common/gm_outbox.py`, `common/dispatch.py`); the LM's answer commits or refuses each item
and carries a fresh snapshot that replaces the view (plan on the view, apply on the truth). A
refused task returns to the front of its job's queue (the tail, with the paper's fairness
options). A pass runs after every event, when something may fit (`common/gm_pass.py`).

Attempts: every launch of a task gets a new attempt id `task#epoch.n` (`common/attempts.py`).
A task completes at most once: the first attempt to finish wins and any other live attempt is
cancelled, so a request whose answer was lost (`LMRequestFailed`) can be retried under a new
attempt id without ever counting a task twice.

Here: the protocol (which event does what) and the job and task lifecycle. Beside it, each with
its own state: `attempts.py`, `pending.py`, `gm_pass.py`, `placer.py`, `blocked.py`, `view.py`,
`gm_outbox.py`, `dispatch.py`, `reprioritize.py`.
"""

from __future__ import annotations

import random
from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING

from common.admission import Admission
from common.attempts import AttemptBook
from common.commands import JobEnded, Log, SendCancel
from common.errors import InvariantViolated
from common.events import (
    HeartbeatReceived,
    JobSubmitted,
    LMReplied,
    LMRequestFailed,
    PassContinued,
    TaskEventReceived,
    TaskEventsReceived,
    Tick,
)
from common.gm_config import GMConfig
from common.gm_moves import MOVES, NAME, arrival_fields, attempt_fields
from common.gm_outbox import Outbox
from common.gm_pass import SchedulingPass
from common.gm_queries import EndedJobs, job_status
from common.gm_records import (
    ENDED_JOB_STATES,
    ENDED_TASK_STATES,
    WAITING_STATES,
    JobRecord,
)
from common.lifecycle import (
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    TaskState,
    check_transition,
)
from common.messages import RequestKind
from common.pending import Backlog
from common.placer import Placer
from common.policies.fairness import FAIRNESS_POLICIES
from common.policies.job import JOB_POLICIES, JobProgress
from common.policies.placement import PLACEMENT_POLICIES
from common.reasons import Reason
from common.reprioritize import PriorityUpdates
from common.step import Step
from common.story import TransitionLog
from common.view import FederationView

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from common.cluster import ClusterTopology
    from common.commands import Command
    from common.gm_records import TaskRecord
    from common.messages import TaskEvent
    from common.models import JobSpec
    from common.placer import Match

# a placement's counter and the kind its log line names: by its request's kind, or queued
_PLACED = {kind: (f"placements_total.{kind}", str(kind)) for kind in RequestKind}
_QUEUED = ("placements_total.queue", "queue")
# a placed task's move, its members read once: reading a member from its enum class costs a
# tenth of a microsecond (Python 3.11), and the placement path would read them per task
_PLACING, _WAITING_FOR_LM = TaskState.PLACING, Reason.WAITING_FOR_LM
_TASK_ID, _SHAPE = attrgetter("task_id"), attrgetter("shape")


class GlobalMaster:
    """One GM. Drive it with `handle(event, now)`; carry out the commands it returns."""

    def __init__(
        self,
        config: GMConfig,
        *,
        topologies: Iterable[ClusterTopology] = (),
        story_len: int = 100_000,
        ended_jobs_kept: int = 100_000,
    ) -> None:
        self.config = config
        self.gm = config.gm_id
        self.rng = random.Random(config.seed)  # the job policy's draws (pilot tasks)
        self.policy = JOB_POLICIES.make(config.job_policy, config.job_policy_options)
        # Algorithm 2 and how it is carried out (common/policies/fairness.py, docs/fairness.md)
        self.fairness = FAIRNESS_POLICIES.make(config.fairness, config.fairness_options,
                                               queues=config.queues)
        self.own_queues = {q.name for q in config.queues if q.gm == config.gm_id}
        self.view = FederationView(self.gm)  # every LM as its last snapshot showed it
        self.placer = Placer(self.gm, self.view, self.fairness,
                             PLACEMENT_POLICIES.make(config.placement), self.own_queues)
        self.admission = Admission(self.gm, self.own_queues, config.num_constraints, self.view,
                                   topologies)
        self.jobs: dict[str, JobRecord] = {}  # unfinished, and the last `ended_jobs_kept` ended
        self._ended = EndedJobs(ended_jobs_kept)  # the feed of ended jobs clients follow
        self._tasks: dict[str, TaskRecord] = {}  # the tasks of unfinished jobs, by task id
        self._attempts = AttemptBook(self.gm, config.epoch, config.earlier_incarnations)
        # what goes to the LMs: each placement an attempt in a per-LM batch, a window in flight
        self._outbox = Outbox(self.gm, config.epoch, config.lm_window, self.view, self.placer,
                              self._attempts, self.policy)
        options = self.fairness.options  # which order a pass serves, where refusals go
        # waiting tasks, and the demands that fit nowhere
        self._backlog = Backlog(self.policy, options.round_robin, options.refused_to_tail)
        # whether a pass may place anything now, and the ContinuePass a bounded one has out
        self._pass = SchedulingPass(self.gm, self._backlog, self.view, self.jobs)
        # where each job's tasks are launched, to tell those LMs when its priority changes
        self._priorities = PriorityUpdates(self.gm, self.policy, config.reprioritize)
        self._job_seq = 0  # arrival order, for the job policy
        self.waiting = 0  # pending and held tasks: the backlog a GM bounds (see services)
        self.waiting_by_user: Counter[str] = Counter()  # ... per queue: its part of it
        self.counters: Counter[str] = Counter()  # the service's /metrics
        self.log = TransitionLog(story_len)  # every transition, for `story`
        self._handlers: dict[type, Callable[..., None]] = {
            JobSubmitted: self._on_job,
            LMReplied: self._on_reply,
            LMRequestFailed: self._on_request_failed,
            HeartbeatReceived: self._on_heartbeat,
            TaskEventReceived: self._on_task_event,
            TaskEventsReceived: self._on_task_events,
            Tick: self._on_tick,
            PassContinued: self._on_pass_continued,
        }

    # -- the entry point ---------------------------------------------------------------------

    def handle(self, event, now: float) -> list[Command]:
        step = Step(event.stimulus_id, now)
        self._handlers[type(event)](event, step)
        self._pass.run(self.config, self._try_place, step)
        self._outbox.send(step)
        return step.commands

    def story(self, *keys: str) -> list[dict]:
        return self.log.story(*keys)

    # -- submission --------------------------------------------------------------------------

    def _on_job(self, event: JobSubmitted, step: Step) -> None:
        job = event.job
        if job.job_id in self.jobs:
            step.emit(Log("job_duplicate", {"job": job.job_id, "user": job.user}))
            return
        self.check_job(job)
        self._job_seq += 1
        progress = JobProgress.of(job, self._job_seq, step.now)
        record = JobRecord(job, progress)
        self.policy.admit(progress, self.rng)
        record.key = self.policy.order_key(progress)
        record.level = progress.level
        tasks = record.add_tasks()
        for _, cpu_m, mem_mib, _ in dict.fromkeys(map(_SHAPE, tasks)):  # per shape, not task
            self.view.expect_demand(cpu_m, mem_mib)
        self._tasks.update(zip(map(_TASK_ID, job.tasks), tasks, strict=True))
        self._backlog.add_job(record)
        for task in tasks:
            self.log.add((step.now, step.stimulus_id, task.spec.task_id, "new", NAME[task.state],
                          ""))
        self.waiting += len(job.tasks)  # a job has tasks (`check_job`)
        self.waiting_by_user[job.user] += len(job.tasks)
        self.jobs[job.job_id] = record
        self.log.record(step.now, step.stimulus_id, job.job_id, "new", "pending",
                        f"{len(job.tasks)} tasks, user {job.user}")
        step.emit(Log("job_arrived", arrival_fields(self.gm, job, progress)))
        if progress.estimate is not None:
            self._log_estimate(record, step)
        if self._attempts.has_orphans:
            for task in list(record.pending) + list(record.held):
                self._adopt_orphan(task, step)
        for task_id, runtime in event.done_tasks:
            self._recover_done(record, task_id, runtime, step)
        if record.progress.done == record.progress.num_tasks:
            record.finished_at = step.now
            self._move_job(record, JobState.DONE, step)
            self._end_job(record, step)
            return
        self._backlog.refile(record)

    def _recover_done(self, job: JobRecord, task_id: str, runtime: float, step: Step) -> None:
        task = self._tasks.get(task_id)
        if task is None or task.job is not job or task.state is TaskState.DONE:
            return
        if task.state in WAITING_STATES:
            self._backlog.remove(task)
        task.runtime = runtime
        self._move(task, TaskState.DONE, Reason.FINISHED, step, "recovered")
        job.progress.finish(runtime)
        if self.policy.task_finished(job.progress, task.index, runtime):
            self._release_held(job, step)
        if job.state is JobState.PENDING:
            self._move_job(job, JobState.RUNNING, step)

    def check_job(self, job: JobSpec) -> None:
        """Raise `InvalidInput` for a job this GM must refuse; changes nothing."""
        self.admission.check(job, self._tasks)

    # -- the scheduling pass --------------------------------------------------------------------

    def _on_pass_continued(self, event: PassContinued, step: Step) -> None:
        self._pass.continued()  # handle() runs the pass on

    def _try_place(self, task: TaskRecord, step: Step, allow_preempt: bool = True) -> bool:
        self.counters["decisions_total"] += 1
        user = task.job.spec.user
        match = self.placer.place(task.spec, user, allow_preempt)
        if match is None:
            self._backlog.block((user, task.shape), Reason.NO_CAPACITY)
            task.reason = Reason.NO_CAPACITY
            return False
        self._launch(task, match, step)
        return True

    def _launch(self, task: TaskRecord, match: Match, step: Step) -> None:
        """File the match as a new attempt in a request to its LM (`Outbox.file`); the task
        waits for the LM's answer."""
        request = self._outbox.file(task, match)
        fields = attempt_fields(self.gm, task)
        if match.victims is None:
            self._move(task, _PLACING, _WAITING_FOR_LM, step, task.node)
            counter, kind = _QUEUED if match.queued else _PLACED[request.kind]
            self.counters[counter] += 1
            fields["kind"] = kind
            fields["request"] = request.request_id
            step.emit(Log("task_placed", fields))
            return
        self._move(task, _PLACING, _WAITING_FOR_LM, step,
                   f"preempting {len(match.victims)} on {task.lm}/{task.node}")
        self.counters["preemption_requests_total"] += 1
        fields["victims"] = [v.attempt_id for v in match.victims]
        fields["request"] = request.request_id
        step.emit(Log("preemption_requested", fields))

    # -- answers from LMs ------------------------------------------------------------------------

    def _on_reply(self, event: LMReplied, step: Step) -> None:
        request = self._outbox.answered(event.request_id)
        self.view.apply(event.snapshot, step.now)
        step.emit(Log("request_answered", {"gm": self.gm, "lm": event.lm,
                                           "request": event.request_id,
                                           "items": len(event.results)}))
        for result in event.results:
            self.placer.answered(event.request_id, result.accepted)
            task = self._attempts.get(result.attempt_id)
            if task is None or task.live != result.attempt_id:
                continue
            if result.accepted:
                task.launched_at = event.snapshot.version
                self._attempts.note_launch(event.lm, task.launched_at)
                if task.state is TaskState.PLACING:
                    self._move(task, TaskState.LAUNCHED, Reason.LAUNCHED, step,
                               f"{event.lm}/{result.node_id}")
            else:
                self.counters[f"launch_refused_total.{result.reason}"] += 1
                self._requeue(task, result.reason, step, refused=True)
        if request is None:
            step.emit(Log("reply_unexpected", {"lm": event.lm, "request": event.request_id}))

    def _on_request_failed(self, event: LMRequestFailed, step: Step) -> None:
        request = self._outbox.failed(event.request_id)
        if request is None:
            return
        for attempt_id in request.attempts:
            # a start already reported means the LM did take it: nothing to retry
            if self._attempts.is_placing(attempt_id):
                task = self._attempts.get(attempt_id)
                task.losses += 1
                self._requeue(task, event.reason, step)

    def _on_heartbeat(self, event: HeartbeatReceived, step: Step) -> None:
        snapshot = event.snapshot
        if self.view.apply(snapshot, step.now):
            self.placer.settle(snapshot.lm)
            for task_id in self._attempts.find_orphans(self.view.slots[snapshot.lm]):
                task = self._tasks.get(task_id)
                if task is not None:
                    self._adopt_orphan(task, step)
            if snapshot.running is not None and self.fairness.preempts and len(
                    self._backlog.blocked):
                # new running lists or released claims: users whose queue may now take from
                # another look again at what they could not place
                self._backlog.wake_users(self.placer.may_preempt_for(self.own_queues))
        # an idle LM repeats the same snapshot: its running list still counts for leases;
        # a finish that arrives after the lease expired still completes the task
        for task in self._attempts.expired(snapshot, step.now, self.config.attempt_grace):
            task.losses += 1
            self._requeue(task, Reason.LOST, step)

    def _on_tick(self, event: Tick, step: Step) -> None:
        self.view.update_reachability(step.now, self.config.lm_timeout)

    # whether its Ticks can wait for the next event: they only time out silent LMs
    waits_for_events = property(lambda self: self.config.lm_timeout == float("inf"))

    # -- task events --------------------------------------------------------------------------

    def _on_task_event(self, event: TaskEventReceived, step: Step) -> None:
        self._apply_task_event(event.event, step)

    def _on_task_events(self, event: TaskEventsReceived, step: Step) -> None:
        for report in event.events:
            self._apply_task_event(report, step)

    def _apply_task_event(self, report: TaskEvent, step: Step) -> None:
        task = self._attempts.get(report.attempt_id)
        if task is None:
            step.emit(Log("task_event_ignored", {"attempt": report.attempt_id,
                                                 "kind": str(report.kind)}))
            return
        if report.kind is Reason.STARTED:
            if task.live == report.attempt_id and task.state in (TaskState.PLACING,
                                                                 TaskState.LAUNCHED):
                if task.launched_at is None:  # the start overtook the LM's answer
                    slot = self.view.slots.get(report.lm)
                    task.launched_at = slot.version if slot is not None else (-1, -1)
                    self._attempts.note_launch(report.lm, task.launched_at)
                self._move(task, TaskState.RUNNING, Reason.STARTED, step)
                if task.started_at is None:  # allocation time counts the first start only
                    task.started_at = report.at if report.at is not None else step.now
                if task.job.state is JobState.PENDING:
                    self._move_job(task.job, JobState.RUNNING, step)
        elif report.kind is Reason.FINISHED:
            self._finish(task, report, step)
        elif task.live == report.attempt_id:
            self._attempt_ended(task, report, step)

    def _attempt_ended(self, task: TaskRecord, report: TaskEvent, step: Step) -> None:
        """Preempted, lost, failed or cancelled: requeue, or fail the job past the limits."""
        self.counters[f"attempts_ended_total.{report.kind}"] += 1
        if report.kind is Reason.FAILED:
            task.failures += 1
        elif report.kind is Reason.LOST:
            task.losses += 1
        if task.failures >= self.config.max_failures or task.losses > self.config.max_losses:
            why = (f"task {task.spec.task_id} ended {task.failures} times with failures and "
                   f"{task.losses} times lost; last: {report.kind} {report.detail}".strip())
            self._fail_job(task.job, why, step)
            return
        self._requeue(task, report.kind, step)

    def _finish(self, task: TaskRecord, report: TaskEvent, step: Step) -> None:
        job = task.job
        if task.state in ENDED_TASK_STATES:
            return
        if task.live is not None and task.live != report.attempt_id:
            step.emit(SendCancel(task.lm or report.lm, task.live))
        if task.state in WAITING_STATES:
            self._backlog.remove(task)
        task.runtime = report.runtime
        task.lm, task.node = report.lm, report.node_id
        self._move(task, TaskState.DONE, Reason.FINISHED, step, report.attempt_id)
        self._attempts.forget(task)
        job.progress.finish(report.runtime or 0.0)
        step.emit(Log("task_done", {
            "attempt": report.attempt_id, "task": task.spec.task_id, "job": job.spec.job_id,
            "user": job.spec.user, "gm": self.gm, "lm": report.lm, "node": report.node_id,
            "runtime": report.runtime}))
        if job.state is JobState.PENDING:
            self._move_job(job, JobState.RUNNING, step)
        if self.policy.task_finished(job.progress, task.index, report.runtime or 0.0):
            self._release_held(job, step)
        if job.progress.done == job.progress.num_tasks:
            job.finished_at = step.now
            self._move_job(job, JobState.DONE, step)
            self._end_job(job, step)
        else:
            self._backlog.refile(job)
            self._priorities.check(job, step)

    def _release_held(self, job: JobRecord, step: Step) -> None:
        """The job's pilots are measured: its size is estimated, its held tasks pending."""
        self._backlog.refile(job)  # into the queue of its estimate, before its tasks join
        if job.progress.estimate is not None:
            self._log_estimate(job, step)
        for held in self._backlog.release_held(job):
            self._move(held, TaskState.PENDING, Reason.NO_CAPACITY, step, "pilots measured")
            self._backlog.add(held)
        self._priorities.check(job, step)

    # -- moving tasks and jobs -------------------------------------------------------------------

    def _requeue(self, task: TaskRecord, why: Reason, step: Step, refused: bool = False) -> None:
        task.live = None
        self._move(task, TaskState.PENDING, why, step)
        self._backlog.requeue(task, refused)
        self.counters[f"requeues_total.{why}"] += 1
        step.emit(Log("task_requeued", {"task": task.spec.task_id, "job": task.job.spec.job_id,
                                        "gm": self.gm, "reason": str(why)}))

    def _move(self, task: TaskRecord, new: TaskState, reason: Reason, step: Step,
              detail: str = "") -> None:
        """The one place a task changes state: checked, logged, and the counts and lists that
        depend on its state kept in step (`MOVES`: what each move changes)."""
        old = task.state
        effects = MOVES[old].get(new)
        if effects is None:  # raises
            check_transition(TASK_TRANSITIONS, task.spec.task_id, old, new, self.log)
        waiting, runs, active, launched, old_name, new_name = effects
        self.log.add((step.now, step.stimulus_id, task.spec.task_id, old_name, new_name,
                      detail or NAME.get(reason, reason)))
        task.state, task.reason = new, reason
        if waiting:
            self.waiting += waiting
            self.waiting_by_user[task.job.spec.user] += waiting
        if runs:  # las: service so far
            task.job.progress.ran(task.index, step.now if new is TaskState.RUNNING else None)
        if active:
            self._backlog.occupy(task.job, active)
            self.placer.moved(task, active > 0)
        if launched > 0:
            self._attempts.list_launched(task)
            self._priorities.launched(task)
        elif launched < 0:
            self._priorities.unlaunched(task)  # by where it was listed: before unlisting
            self._attempts.unlist(task)

    def _move_job(self, job: JobRecord, new: JobState, step: Step) -> None:
        check_transition(JOB_TRANSITIONS, job.spec.job_id, job.state, new, self.log)
        self.log.record(step.now, step.stimulus_id, job.spec.job_id, NAME[job.state], NAME[new])
        job.state = new

    def _fail_job(self, job: JobRecord, why: str, step: Step) -> None:
        for task in job.tasks:
            if task.state in ENDED_TASK_STATES:
                continue
            if task.live is not None and task.state is not TaskState.PENDING and task.lm:
                step.emit(SendCancel(task.lm, task.live))
            self._move(task, TaskState.FAILED, Reason.FAILED, step, why)
            self._attempts.forget(task)
        job.reason = why
        job.finished_at = step.now
        self._move_job(job, JobState.FAILED, step)
        self._end_job(job, step)

    def _end_job(self, job: JobRecord, step: Step) -> None:
        spec = job.spec
        self._backlog.drop(job)
        for task in job.tasks:
            self._tasks.pop(task.spec.task_id, None)
        event = "job_done" if job.state is JobState.DONE else "job_failed"
        if job.state is JobState.DONE:
            self.policy.job_finished(job.progress, step.now)
        step.emit(Log(event, {"job": spec.job_id, "user": spec.user, "gm": self.gm,
                              "tasks": len(job.tasks), "arrival": spec.arrival,
                              "reason": job.reason} | self.policy.ended_fields(job.progress)))
        step.emit(JobEnded(spec.job_id, spec.user, str(job.state), job.reason))
        forgotten = self._ended.append(spec.job_id)
        record = self.jobs.get(forgotten) if forgotten is not None else None
        if record is not None and record.state in ENDED_JOB_STATES:  # never a live namesake
            del self.jobs[forgotten]
            # its tasks and it refer to each other: a simulation pauses the cyclic collector,
            # and a forgotten job freed at once is memory its later jobs reuse
            record.tasks.clear()

    def _log_estimate(self, job: JobRecord, step: Step) -> None:
        step.emit(Log("job_estimated", {"job": job.spec.job_id, "user": job.spec.user,
                                        "gm": self.gm} | self.policy.estimate_fields(job.progress)))

    def _adopt_orphan(self, task: TaskRecord, step: Step) -> None:
        """An attempt of this GM's earlier incarnation still runs the task: take it back."""
        orphan = self._attempts.take_orphan(task)
        if orphan is None:
            return
        attempt_id, lm, node = orphan
        self._backlog.remove(task)
        if task.state is TaskState.HELD:
            self._move(task, TaskState.PENDING, Reason.NO_CAPACITY, step)
        self._move(task, TaskState.PLACING, Reason.WAITING_FOR_LM, step)
        self._move(task, TaskState.LAUNCHED, Reason.LAUNCHED, step,
                   f"adopted {attempt_id} on {lm}/{node}")
        step.emit(Log("attempt_adopted", {"attempt": attempt_id, "task": task.spec.task_id,
                                          "job": task.job.spec.job_id, "gm": self.gm,
                                          "lm": lm, "node": node}))

    # -- questions users ask ----------------------------------------------------------------------

    def job_status(self, job_id: str) -> dict | None:
        job = self.jobs.get(job_id)
        return None if job is None else job_status(job, self._backlog.reason_of)

    def explain(self, task_id: str) -> dict:
        """Why a task waits: how many nodes each filter leaves, across this GM's views, and
        what each step of the search would find now."""
        task = self._tasks.get(task_id)
        if task is None:
            raise KeyError(task_id)
        return {"task": task_id, "state": str(task.state),
                "reason": str(self._backlog.reason_of(task)),
                **self.placer.explain(task.spec, task.job.spec.user)}

    def ended_since(self, after: int, limit: int) -> tuple[list[str], int]:
        """Up to `limit` jobs that ended after the `after`-th (see `EndedJobs.since`)."""
        return self._ended.since(after, limit)

    def would_complete(self, attempt_id: str) -> bool:
        """Whether a finish of this attempt would complete its task (it is the first)."""
        task = self._attempts.get(attempt_id)
        return task is not None and task.state not in ENDED_TASK_STATES

    # -- invariants ----------------------------------------------------------------------------

    def validate(self) -> None:
        waiting: Counter[str] = Counter()
        for job in self.jobs.values():
            if job.state in ENDED_JOB_STATES:
                continue
            job.validate(self.gm)
            self._backlog.validate(self.gm, job)
            for task in job.tasks:
                self._attempts.validate(task)
                waiting[job.spec.user] += task.state in WAITING_STATES
        self._attempts.validate_lists()
        self._backlog.validate_index(self.gm)
        self._backlog.validate_shares(self.gm, self.jobs.values())
        self.placer.estimate.validate(self.gm, self._tasks.values())
        self._priorities.validate(self.jobs.values())
        if waiting.total() != self.waiting or +waiting != +self.waiting_by_user:
            raise InvariantViolated(f"{self.gm}: counts {self.waiting} waiting tasks "
                                    f"{dict(+self.waiting_by_user)}, has {dict(+waiting)}")
        self._outbox.validate()
