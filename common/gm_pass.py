"""A GM's scheduling pass: whether one can place anything now, and how far it goes.

After every event the GM runs a pass over its backlog (`common/pending.py`). Most events
change nothing a pass could use, so the pass first asks what is worth trying: a job policy
that re-keys all jobs at once does so (`Backlog.reorder`), the demands that the capacity freed
since the last pass can take wake up, and the pass stops there when nothing is ready (nothing
new waits, and nothing blocked could fit now) or no LM is reachable.

A pass is bounded by `GMConfig.pass_tasks`: it places that many tasks and asks its driver to
hand it the rest in a later step (`ContinuePass`, at most one out at a time), so that what it
placed leaves at once; the backlog's index keeps the order, so the next pass goes on from
where this one stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.commands import ContinuePass, Log

if TYPE_CHECKING:
    from collections.abc import Callable

    from common.gm_config import GMConfig
    from common.gm_records import JobRecord, TaskRecord
    from common.pending import Backlog
    from common.step import Step
    from common.view import FederationView


class SchedulingPass:
    """When the pass over one GM's backlog runs, and the `ContinuePass` it has out."""

    def __init__(self, gm: str, backlog: Backlog, view: FederationView,
                 jobs: dict[str, JobRecord]) -> None:
        self.gm = gm
        self.backlog = backlog
        self.view = view
        self.jobs = jobs  # the GM's, by id: the pass visits them in the backlog's order
        self.continuing = False  # a ContinuePass is out: the GM will be handed the rest

    def run(self, config: GMConfig, try_place: Callable[[TaskRecord, Step, bool], bool],
            step: Step) -> None:
        """Place what is ready, as `config` says now (`work_conserving`: held tasks may use
        what pending ones cannot; `pass_tasks`: the bound). `try_place(task, step,
        allow_preempt)` (the last two by name) launches the task and returns True, or blocks
        its demand and returns False (`GlobalMaster._try_place`)."""
        backlog = self.backlog
        if not backlog:
            return
        view = self.view
        reordered = backlog.reorder(step.now, view.capacity, self.jobs.values())
        if reordered:
            step.emit(Log("jobs_reordered", {"gm": self.gm} | reordered))
        if not view.any_reachable:
            return
        backlog.wake_by_capacity(view)
        work_conserving = config.work_conserving
        if not backlog.ready(work_conserving):
            return  # nothing new waits, and nothing blocked could fit now
        # the pass changes the view only by reserving: its searches may keep their
        # candidates from task to task (`FederationView.find`)
        # (closures: a partial with keyword arguments costs twice as much per task)
        def with_preemption(task: TaskRecord) -> bool:
            return try_place(task, step, True)

        def without_preemption(task: TaskRecord) -> bool:
            return try_place(task, step, False)

        view.start_pass()
        try:
            bounded = backlog.place(self.jobs, with_preemption,
                                    without_preemption if work_conserving else None,
                                    config.pass_tasks)
        finally:
            view.end_pass()
        if bounded and not self.continuing:
            self.continuing = True
            step.emit(ContinuePass())

    def continued(self) -> None:
        """The driver handed the GM its `ContinuePass`: the pass of this step goes on, and a
        pass bounded again asks for another."""
        self.continuing = False
