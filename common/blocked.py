"""What cannot be placed now, and when to look again: the GM's memo of blocked demands.

A *demand* is what a waiting task needs: its user queue and its shape (constraint set, cpu,
memory); tasks of one demand succeed or fail alike on one view. When a scheduling pass finds
no node for a demand (and no preemption for it), the demand is *blocked*: later passes skip its
tasks in O(1) instead of searching again. A blocked demand is woken only by what could change
the answer:

- capacity that matches: a node that may have gained room (the view's `gained` vector) and
  satisfies the demand's constraints and has room for it now;
- a new chance to preempt: the fairness policy finds a queue its user may take from (after a
  heartbeat brings new running lists, or a preemption settles).

So with thousands of tasks waiting on a full cluster, a snapshot costs one check per blocked
demand against the few nodes it changed, not one search per waiting task (and a pass runs at
all only when something was woken or a new demand arrived: `dirty`).

A job whose waiting tasks are all of blocked demands is *parked*: a pass skips it whole, in
O(1), until one of its demands is woken or a task of it starts waiting anew. Without this a
pass still visited every waiting task to find its demand blocked, and with a GM's backlog full
(thousands of tasks) and a pass after every answer from an LM, those visits took two thirds of
the GM's time and its completed rate fell under overload (benchmarks/bench_testbed.py, py-spy).
"""

from __future__ import annotations

from collections.abc import Iterable

from bitarray import bitarray

from common.cluster import ClusterState, ClusterTopology
from common.errors import InvariantViolated
from common.reasons import Reason

Shape = tuple[frozenset[int], int, int]  # TaskSpec.shape: constraints, cpu_m, mem_mib
Demand = tuple[str, Shape]  # (user queue, shape)


class BlockedDemands:
    def __init__(self) -> None:
        self._blocked: dict[Demand, Reason] = {}
        # a pass may place something: a demand was woken, or tasks of an unblocked demand
        # arrived (a job, a requeue, tasks released from being held)
        self.dirty = True
        self.parked: set[str] = set()  # job ids whose waiting tasks are all blocked
        # demand -> jobs parked on it (may name jobs unparked since: waking them is harmless)
        self._parked_on: dict[Demand, set[str]] = {}

    def __len__(self) -> int:
        return len(self._blocked)

    def __contains__(self, demand: Demand) -> bool:
        return demand in self._blocked

    def reason(self, demand: Demand) -> Reason | None:
        return self._blocked.get(demand)

    def block(self, demand: Demand, reason: Reason) -> None:
        self._blocked[demand] = reason

    def arrived(self, demand: Demand, job_id: str) -> None:
        """A task of `demand` (of job `job_id`) became waiting: the job is looked at again,
        and a pass is needed unless the demand is blocked."""
        self.parked.discard(job_id)
        if demand not in self._blocked:
            self.dirty = True

    def park(self, job_id: str, demands: Iterable[Demand]) -> None:
        """Every waiting task of `job_id` is of one of `demands`, all blocked: skip the job
        until one of them is woken (or `arrived` names it)."""
        self.parked.add(job_id)
        for demand in demands:
            self._parked_on.setdefault(demand, set()).add(job_id)

    def unpark(self, job_id: str) -> None:
        self.parked.discard(job_id)

    def _woken(self, demand: Demand) -> None:
        del self._blocked[demand]
        jobs = self._parked_on.pop(demand, None)
        if jobs:
            self.parked -= jobs

    def wake_all(self) -> None:
        if self._blocked:
            self._blocked.clear()
            self.dirty = True
        self.parked.clear()
        self._parked_on.clear()

    def wake_users(self, users: Iterable[str]) -> None:
        """Look again at these users' demands (they may preempt now)."""
        users = set(users)
        woken = [demand for demand in self._blocked if demand[0] in users]
        for demand in woken:
            self._woken(demand)
        if woken:
            self.dirty = True

    def wake_by_capacity(self, gained: bitarray, topology: ClusterTopology | None,
                         state: ClusterState | None, reachable: bitarray | None) -> int:
        """Unblock every demand that one of the `gained` nodes can take now; how many."""
        if not self._blocked or topology is None or state is None or not gained.any():
            return 0
        if len(gained) != len(topology):  # the view was laid out anew: everything may fit
            count = len(self._blocked)
            self.wake_all()
            return count
        candidates = gained & state.available
        if reachable is not None:
            candidates &= reachable
        if not candidates.any():
            return 0
        free_cpu, free_mem = state.free_cpu, state.free_mem
        woken = []
        fits_by_shape: dict[Shape, bool] = {}
        for demand in self._blocked:
            shape = demand[1]
            fits = fits_by_shape.get(shape)
            if fits is None:
                constraints, cpu_m, mem_mib = shape
                fits = fits_by_shape[shape] = any(
                    free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib
                    for i in (topology.mask_for(constraints) & candidates).search(1))
            if fits:
                woken.append(demand)
        for demand in woken:
            self._woken(demand)
        if woken:
            self.dirty = True
        return len(woken)

    def validate_parked(self, gm: str, job_id: str, user: str, pending: Iterable) -> None:
        """A parked job's pending tasks all have blocked demands (else it would never wake)."""
        if job_id in self.parked:
            for task in pending:
                if (user, task.shape) not in self:
                    raise InvariantViolated(f"{gm}: job {job_id} is parked but "
                                            f"{task.spec.task_id}'s demand is not blocked")
