"""The preemptive mode of a worker's local queues: a far shorter arrival suspends running tasks
(docs/local-queues.md, "Preemptive mode").

An arrival that does not fit its node, and whose job has far less estimated remaining work
(`Placement.priority`) than running tasks there, suspends the fewest of them that make room.
A suspended attempt waits in its node's queue again with the work it has left, resumes later
from there, and its reported runtime is its whole time running. Pilots are never suspended,
nor copies, nor tasks of no estimate.

The worker (common/worker.py) holds a `SuspensionBook` when the mode is on, and asks it which
attempts to suspend (`victims`); it moves each back to its node's queue, and the book banks
its run, tells the LM (`suspended`) and logs `task_suspended`. The book keeps how often each
live attempt has been suspended, adds `resumed` to its next start's line and `suspensions` to
its finish's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from common.commands import KillTask, Log, ReportToLM
from common.errors import InvalidInput, InvariantViolated
from common.reasons import Reason

if TYPE_CHECKING:
    from common.messages import Placement
    from common.step import Step
    from common.worker_attempts import LiveAttempt
    from common.worker_nodes import NodeState

# An attempt is suspended at most this often, then runs to its end: this bounds the thrash of
# a long task that a stream of short arrivals would otherwise pause again and again (each
# suspension costs a kill, two reports and a restart, and delays the long task's job).
MAX_SUSPENSIONS = 3


class SuspensionBook:
    def __init__(self, preempt_factor: float = 10.0) -> None:
        """`preempt_factor`: an arrival suspends running tasks whose priority is at least this
        many times its own."""
        if not 1 < preempt_factor < math.inf:
            raise InvalidInput("preempt_factor", f"must be a finite number > 1, got "
                                                 f"{preempt_factor}")
        self.preempt_factor = preempt_factor
        self._times: dict[str, int] = {}  # live attempt -> times suspended, if ever

    def times(self, attempt_id: str) -> int:
        """How often the live attempt has been suspended."""
        return self._times.get(attempt_id, 0)

    # -- the decision --------------------------------------------------------------------------

    def victims(self, node: NodeState, arrival: Placement, live: Mapping[str, LiveAttempt],
                queue_room: int) -> list[Placement]:
        """The running attempts of `node` to suspend so that `arrival` fits, if some do and
        the local queues have `queue_room` for them (a suspended attempt waits there); `live`
        is the worker's live attempts (read only)."""
        demand = arrival.task.demand
        victims = fewest_releasing(self._candidates(node, arrival, live),
                                   demand.cpu_m - node.free_cpu, demand.mem_mib - node.free_mem)
        return victims if len(victims) <= queue_room else []

    def _candidates(self, node: NodeState, arrival: Placement,
                    live: Mapping[str, LiveAttempt]) -> list[Placement]:
        """Running attempts the arrival may suspend, the longest (and then the latest
        started, which lose the least work) first."""
        if arrival.pilot:
            threshold = 0.0  # a pilot counts as the shortest: any estimate is far longer
        elif arrival.priority > 0:
            threshold = self.preempt_factor * arrival.priority
        else:
            return []  # no estimate: nothing to weigh a running task against
        times = self._times
        candidates = [
            placement for attempt_id, placement in node.running.items()
            if not placement.pilot and placement.copy_of is None and placement.priority > 0
            and placement.priority >= threshold
            and times.get(attempt_id, 0) < MAX_SUSPENSIONS
        ]
        candidates.sort(key=lambda p: (-p.priority, -live[p.attempt_id].since))
        return candidates

    # -- what happens to the attempts ----------------------------------------------------------

    def suspend(self, step: Step, node: NodeState, live: LiveAttempt, for_attempt: str,
                fields: dict) -> None:
        """Suspend a victim that still runs: its run so far is banked, its run stopped, its
        LM told. `fields`: the log fields about it, to which the suspension's are added.
        The worker moves it from its node's running tasks to the queue."""
        placement = live.placement
        attempt_id = placement.attempt_id
        now = step.now
        work_done = live.bank_run(live.progress(node.speed, now), now)
        times = self._times[attempt_id] = self._times.get(attempt_id, 0) + 1
        step.emit(KillTask(attempt_id))  # drivers cancel its run: no TaskRunEnded follows
        step.emit(ReportToLM(Reason.SUSPENDED, attempt_id, at=now))
        fields.update(work_done=work_done,
                      remaining_work=None if work_done is None else live.work_left(),
                      for_attempt=for_attempt, priority=placement.priority, suspensions=times,
                      ran_seconds=live.ran_seconds)
        step.emit(Log("task_suspended", fields))

    def resuming(self, live: LiveAttempt, fields: dict) -> None:
        """The attempt starts: a suspended one resumes with the work it has left."""
        if live.placement.attempt_id in self._times:
            fields["remaining_work"] = live.work_left()
            fields["resumed"] = True

    def finished(self, attempt_id: str, fields: dict) -> None:
        """The attempt finished: its finish's line says how often it was suspended."""
        times = self._times.pop(attempt_id, 0)
        if times:
            fields["suspensions"] = times

    def forget(self, attempt_id: str) -> None:
        """The attempt ended otherwise (cancelled)."""
        self._times.pop(attempt_id, None)

    # -- invariants ----------------------------------------------------------------------------

    def validate(self, live: Mapping[str, LiveAttempt]) -> None:
        """Counts only of live attempts, each suspended at least once and at most the bound."""
        for attempt_id, times in self._times.items():
            if attempt_id not in live:
                raise InvariantViolated(f"attempt {attempt_id}: suspended, but not live")
            if not 1 <= times <= MAX_SUSPENSIONS:
                raise InvariantViolated(f"attempt {attempt_id}: suspended {times} times")


def fewest_releasing(
    candidates: Sequence[Placement], need_cpu: int, need_mem: int
) -> list[Placement]:
    """Victims among `candidates` (most wanted first) whose demands add up to the need in
    both kinds; empty if all of them do not.

    One victim when one suffices (the first such). Otherwise the shortest prefix that
    suffices, less those the others make redundant (the last first): no victim is left that
    the arrival could do without, so none of them fits what remains beside the arrival. The
    true minimum is a set cover; a node runs few tasks, and one victim is the common case.
    """
    for placement in candidates:
        demand = placement.task.demand
        if demand.cpu_m >= need_cpu and demand.mem_mib >= need_mem:
            return [placement]
    chosen: list[Placement] = []
    cpu = mem = 0
    for placement in candidates:
        chosen.append(placement)
        cpu += placement.task.demand.cpu_m
        mem += placement.task.demand.mem_mib
        if cpu >= need_cpu and mem >= need_mem:
            break
    else:
        return []
    for placement in reversed(chosen[:-1]):  # the last one was needed to reach the need
        demand = placement.task.demand
        if cpu - demand.cpu_m >= need_cpu and mem - demand.mem_mib >= need_mem:
            chosen.remove(placement)
            cpu -= demand.cpu_m
            mem -= demand.mem_mib
    return chosen
