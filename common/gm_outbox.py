"""What a GM sends its LMs: each placement filed, as a new attempt, in a request, and the
requests sent as the request window lets them out.

A match (`common/placer.py`) is reserved in the view (plan on the view, apply on the truth:
docs/architecture.md, Code style), gets a new attempt id (`common/attempts.py`) and joins the
open batch for its LM and kind, or, a preemption, a request of its own (`common/dispatch.py`).
`send` turns the requests the window lets out into launch and preempt commands, each placement
carrying its job's priority as the job policy gives it when it leaves; the request's answer or
failure takes it out of the window and its reservation out of the view.

The GM moves the task (`GlobalMaster._launch`, `_on_reply`): the outbox changes no task's
state, only where its attempt is filed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.commands import Log, SendLaunch, SendPreempt
from common.dispatch import LMRequest, RequestWindow
from common.messages import RequestKind
from common.policies.job import NO_PILOTS
from common.usage import PendingPreemption

if TYPE_CHECKING:
    from common.attempts import AttemptBook
    from common.gm_records import TaskRecord
    from common.messages import Placement
    from common.placer import Match, Placer
    from common.policies.job import JobPolicy
    from common.step import Step
    from common.view import FederationView


class Outbox:
    """One GM's requests to its LMs, from the placement that files an attempt in one to the
    answer or failure that ends it."""

    def __init__(self, gm: str, epoch: int, window: int, view: FederationView, placer: Placer,
                 attempts: AttemptBook, policy: JobPolicy) -> None:
        self.gm = gm
        self.view = view
        self.placer = placer  # keeps the victims of the preemptions asked for
        self.attempts = attempts
        self.policy = policy  # the priority each placement carries
        self.requests = RequestWindow(gm, epoch, window)  # per-LM batches, a window in flight

    def file(self, task: TaskRecord, match: Match) -> LMRequest:
        """Reserve the match in the view, issue an attempt (the task's live one, at the
        match's node), and file it in a request: the open batch for its LM and kind, or a
        request of its own for a preemption, whose victims the placer then claims."""
        slot, demand = match.slot, task.spec.demand
        if match.victims is None:
            request = self.requests.batch_for(slot.lm, match.kind)
        else:
            request = self.requests.single(slot.lm, RequestKind.LAUNCH)
        # For a preemption only the demand is reserved, not the victims' release: a
        # reservation is re-applied on every newer snapshot, and one taken after the LM stopped
        # the victims would free them twice. Until the answer the node looks over-full instead.
        # A task sent to wait in a node's local queue reserves that queue's room instead.
        if match.queued:
            self.view.claim_queue(request.request_id, slot, match.index)
        else:
            self.view.reserve(request.request_id, slot, match.index, demand.cpu_m,
                              demand.mem_mib)
        attempt_id = self.attempts.issue(task)
        request.attempts.append(attempt_id)
        task.lm, task.node = slot.lm, slot.topology.node_ids[match.index]
        if match.victims is not None:
            self.placer.preempting(request.request_id, PendingPreemption(
                slot.lm, match.victims, task.job.spec.user, attempt_id, demand.cpu_m,
                demand.mem_mib))
        return request

    def send(self, step: Step) -> None:
        """Send what the request window lets out (placements already made joined their LM's
        open batch); the rest leaves when an answer frees a place."""
        requests = self.requests
        if not requests.queued:
            return
        told: dict[str, tuple[float, frozenset[int]]] = {}  # per job: the same for its tasks
        for request in requests.ready():
            # while it waited its turn, a task may have ended (an older attempt finished,
            # its job failed): what is no longer placing stays home
            placing = self.attempts.placing(request.attempts)
            if not placing:
                requests.finished(request.request_id)
                self.view.release(request.request_id)
                self.placer.forget(request.request_id)
                continue
            placements = self._placements(placing, told)
            epoch = self.view.slots[request.lm].version[0]  # the incarnation planned on
            if request.preempt:
                victims = self.placer.victims_of(request.request_id)
                step.emit(SendPreempt(request.lm, request.request_id, placements[0], victims,
                                      epoch))
            else:
                step.emit(SendLaunch(request.lm, request.request_id, request.kind, placements,
                                     epoch))
            step.emit(Log("request_sent", {"gm": self.gm, "lm": request.lm,
                                           "request": request.request_id,
                                           "items": len(placements)}))

    def _placements(self, placing: list[tuple[str, TaskRecord]],
                    told: dict[str, tuple[float, frozenset[int]]]) -> tuple[Placement, ...]:
        """What the LM is told of each attempt, with its job's priority and, while they are
        measured, pilots (worked out once per job in `told`)."""
        gm, placements = self.gm, []
        for attempt_id, task in placing:
            job_id = task.job.spec.job_id
            of_job = told.get(job_id)
            if of_job is None:
                progress = task.job.progress
                of_job = told[job_id] = (self.policy.worker_priority(progress),
                                         progress.pilots if progress.sampling else NO_PILOTS)
            placements.append(task.placement(attempt_id, gm, *of_job))
        return tuple(placements)

    def answered(self, request_id: str) -> LMRequest | None:
        """An LM answered: the request leaves the window and its reservation the view (the
        answer's snapshot shows what the LM made of it). None for a request not (or no
        longer) in flight."""
        request = self.requests.finished(request_id)
        self.view.release(request_id)
        return request

    def failed(self, request_id: str) -> LMRequest | None:
        """A request was sent and got no answer: as `answered`, and a preemption it asked for
        changed nothing. None, and nothing changed, for a request not in flight."""
        request = self.requests.finished(request_id)
        if request is None:
            return None
        self.placer.answered(request_id, accepted=False)
        self.view.release(request_id)
        return request

    def validate(self) -> None:
        self.requests.validate(self.view.inflight)
