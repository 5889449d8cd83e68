"""Each user queue's share of the federation as one GM sees it, for the fairness policy.

A GM learns what runs where from the LMs' heartbeats (each lists the attempts running on its
nodes, with their queue and size). Between heartbeats it also knows the preemptions it asked
for and the LMs have not yet shown the outcome of: for those, until a heartbeat lists the new
attempt, its size counts for its queue, and while a heartbeat still lists a victim, its size
is taken off its queue. Each adjustment applies only as long as the heartbeats do not show it
already, so nothing is counted twice: a queue's usage is never below zero (an earlier version
added every pending preemption's effect on top of heartbeats that sometimes showed it already,
and `/v1/queues` reported negative usage in the testbed). The property test of the federation
(tests/unit/test_invariants.py) checks every GM's estimate stays within [0, 1] after every event.

With `own_usage = "launches"` (the paper's Algorithm 2; common/policies/fairness.py) the GM's
own queues are not taken from heartbeats: `OwnUsage` counts what the GM itself has placing,
launched or running, changed by its own launches, the LMs' answers (a refusal requeues) and
the task events (a finish, a preemption). Heartbeats lag a round trip and a heartbeat
interval behind that, and before this a pass that launched a hundred tasks of a queue still
judged that queue by its usage before them. The other GMs' queues still come from heartbeats:
a GM hears of their launches no other way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.cluster import RunningInfo
from common.errors import InvariantViolated
from common.gm_records import ACTIVE_STATES, TaskRecord
from common.policies.fairness import Usage
from common.view import FederationView


@dataclass(slots=True)
class PendingPreemption:
    """A preemption this GM asked for, until the LM's next heartbeat shows its outcome.

    Until then its victims stay claimed (the view's running list still shows them, so
    without the claim the GM would name them again) and it adjusts the usage estimate.
    """

    lm: str
    victims: tuple[RunningInfo, ...]
    user: str  # the queue the new attempt belongs to
    attempt_id: str
    cpu_m: int
    mem_mib: int
    answered: bool = False
    refused: bool = False  # answered no: it changes nothing

    @property
    def victim_ids(self) -> tuple[str, ...]:
        return tuple(victim.attempt_id for victim in self.victims)


class OwnUsage:
    """Cpu and memory per own queue of the tasks this GM has placing, launched or running,
    kept by the GM as its tasks enter and leave those states (`moved`)."""

    def __init__(self, queues: Iterable[str]) -> None:
        self.queues = frozenset(queues)
        self.active: dict[str, tuple[str | None, str, int, int]] = {}  # task id -> attempt,
        # queue, cpu, memory
        self.cpu = dict.fromkeys(self.queues, 0)
        self.mem = dict.fromkeys(self.queues, 0)
        self.changes = 0  # for the estimate's cache

    def moved(self, task_id: str, attempt: str | None, user: str, cpu_m: int, mem_mib: int,
              active: bool) -> None:
        if active:
            self.active[task_id] = (attempt, user, cpu_m, mem_mib)
            sign = 1
        elif self.active.pop(task_id, None) is not None:
            sign = -1
        else:
            return
        self.cpu[user] += sign * cpu_m
        self.mem[user] += sign * mem_mib
        self.changes += 1

    def runs(self, attempt_id: str) -> bool:
        """Whether the attempt is still its task's active one here (a victim not yet ended)."""
        entry = self.active.get(attempt_id.rpartition("#")[0])
        return entry is not None and entry[0] == attempt_id

    def validate(self, gm: str, expected: dict[str, tuple[str | None, str, int, int]]) -> None:
        """The book lists exactly the GM's active tasks, and its sums are theirs."""
        if self.active != expected:
            raise InvariantViolated(f"{gm}: own usage counts {len(self.active)} active tasks, "
                                    f"the GM has {len(expected)}")
        for user in self.queues:
            cpu = sum(entry[2] for entry in expected.values() if entry[1] == user)
            mem = sum(entry[3] for entry in expected.values() if entry[1] == user)
            if (cpu, mem) != (self.cpu[user], self.mem[user]):
                raise InvariantViolated(f"{gm}: own usage of {user} is "
                                        f"{(self.cpu[user], self.mem[user])}, has {(cpu, mem)}")


class UsageEstimate:
    """The usage per queue, kept up to date instead of recomputed from every running attempt.

    Two parts, each changed only by what changes it: the sums of the LMs' last running lists
    (an LM's part is replaced when a heartbeat brings it a new list: O(queues)), and the
    adjustments of the preemptions in flight, per LM (recomputed for one LM when its list or
    its preemptions change). `usage()` adds them up only when one of them changed since the
    last call. Before, every decision that considered preempting recomputed both over every
    LM and every preemption in flight: on a saturated run a tenth of the wall time
    (benchmarks/bench_sim.py, py-spy).
    """

    def __init__(self, view: FederationView, own: OwnUsage | None = None) -> None:
        self.view = view
        self.own = own  # the GM's own queues from its own book, not heartbeats (None: not)
        self._own_seen = -1
        self.preemptions: dict[str, PendingPreemption] = {}  # by request id, until settled
        self.claimed: set[str] = set()  # victims of those: not to be named again
        self._by_lm: dict[str, dict[str, PendingPreemption]] = {}
        self._listed: dict[str, int] = {}  # queue -> cpu over every LM's last running list
        self._listed_mem: dict[str, int] = {}
        self._summed: dict[str, tuple[tuple, dict[str, list[int]]]] = {}  # lm -> list, its sums
        self._adjusted: dict[str, dict[str, list[int]]] = {}  # lm -> queue -> cpu, memory
        self._stale_lms: set[str] = set()  # LMs whose preemptions changed
        self._seen = (-1, -1)  # the view's (layouts, running changes) last summed
        self._usage: Usage | None = None

    # -- the preemptions in flight -----------------------------------------------------------

    def add(self, request_id: str, pending: PendingPreemption) -> None:
        self.preemptions[request_id] = pending
        self._by_lm.setdefault(pending.lm, {})[request_id] = pending
        self.claimed.update(pending.victim_ids)
        self._count(pending, 1)

    def answered(self, request_id: str, accepted: bool) -> None:
        pending = self.preemptions.get(request_id)
        if pending is None:
            return
        pending.answered = True
        if not accepted and not pending.refused:
            self._count(pending, -1)  # a refused one changes nothing
            pending.refused = True

    def forget(self, request_id: str) -> PendingPreemption | None:
        pending = self.preemptions.pop(request_id, None)
        if pending is not None:
            self._count(pending, -1)
            del self._by_lm[pending.lm][request_id]
            self.claimed.difference_update(pending.victim_ids)
        return pending

    def settle(self, lm: str) -> None:
        """A heartbeat of `lm` lists what really runs there: its answered preemptions are in
        it."""
        at_lm = self._by_lm.get(lm)
        if at_lm:
            for request_id in [rid for rid, p in at_lm.items() if p.answered]:
                self.forget(request_id)

    def _count(self, pending: PendingPreemption, sign: int) -> None:
        """Add one preemption's adjustment to its LM's (sign 1) or take it back (-1). Added
        one by one: a GM may name hundreds of victims on one LM in a pass, and recomputing
        that LM's adjustment after each was quadratic (a saturated run, py-spy)."""
        self._usage = None
        lm = pending.lm
        if lm in self._stale_lms or self._seen != (self.view.layouts, self.view.running_changes):
            self._stale_lms.add(lm)  # recomputed whole at the next estimate
            return
        slot = self.view.slots.get(lm)
        listed = slot.running_ids() if slot is not None else frozenset()
        _contribute(self._adjusted.setdefault(lm, {}), pending, listed, sign)

    # -- the estimate --------------------------------------------------------------------------

    def usage(self) -> Usage:
        seen = (self.view.layouts, self.view.running_changes)
        if seen != self._seen:
            self._seen = seen
            self._sum_listed()
            self._usage = None
        if self.own is not None and self.own.changes != self._own_seen:
            self._own_seen = self.own.changes
            self._usage = None
        if self._usage is None:
            self._usage = self._estimate()
        return self._usage

    def _sum_listed(self) -> None:
        """Replace the part of each LM whose running list is new since it was summed."""
        cpu, mem, summed = self._listed, self._listed_mem, self._summed
        for slot in self.view.order:
            last = summed.get(slot.lm)
            if last is not None and last[0] is slot.running:
                continue
            if last is not None:
                for user, (user_cpu, user_mem) in last[1].items():
                    cpu[user] -= user_cpu
                    mem[user] -= user_mem
            sums = slot.usage()
            _add(cpu, mem, sums)
            summed[slot.lm] = (slot.running, sums)
            if slot.lm in self._by_lm:
                self._stale_lms.add(slot.lm)

    def _estimate(self) -> Usage:
        cpu, mem = dict(self._listed), dict(self._listed_mem)
        for lm in self._stale_lms:
            self._adjust(lm)
        self._stale_lms.clear()
        for adjustment in self._adjusted.values():
            _add(cpu, mem, adjustment)
        self._own_part(cpu, mem)
        total_cpu, total_mem = self.view.capacity
        return {user: (cpu[user] / total_cpu, mem[user] / total_mem) for user in cpu}

    def _own_part(self, cpu: dict[str, int], mem: dict[str, int]) -> None:
        """With an own book: the GM's own queues as the book has them, less the victims of
        its preemptions in flight that are still active there (their preempted events have
        not arrived). What heartbeats and the adjustments said of them is replaced."""
        own = self.own
        if own is None:
            return
        cpu.update(own.cpu)
        mem.update(own.mem)
        for pending in self.preemptions.values():
            if pending.refused:
                continue
            for victim in pending.victims:
                if victim.user in own.queues and own.runs(victim.attempt_id):
                    cpu[victim.user] -= victim.cpu_m
                    mem[victim.user] -= victim.mem_mib

    def _adjust(self, lm: str) -> None:
        """The preemptions at `lm` against its last running list: until the list shows the
        new attempt its size counts for its queue; while it still lists a victim, the
        victim's size is taken off its queue."""
        at_lm = self._by_lm.get(lm)
        if not at_lm:
            self._by_lm.pop(lm, None)
            self._adjusted.pop(lm, None)
            return
        slot = self.view.slots.get(lm)
        listed = slot.running_ids() if slot is not None else frozenset()
        adjustment: dict[str, list[int]] = {}
        for pending in at_lm.values():
            _contribute(adjustment, pending, listed, 1)
        self._adjusted[lm] = adjustment

    def validate(self, gm: str, tasks: Iterable[TaskRecord] = ()) -> None:
        """The kept estimate equals one computed from scratch; an own book lists exactly the
        GM's `tasks` that are placing, launched or running."""
        if self.own is not None:
            self.own.validate(gm, {
                task.spec.task_id: (task.live, task.job.spec.user, task.spec.demand.cpu_m,
                                    task.spec.demand.mem_mib)
                for task in tasks if task.state in ACTIVE_STATES})
        kept = self.usage()
        cpu: dict[str, int] = {}
        mem: dict[str, int] = {}
        for slot in self.view.order:
            _add(cpu, mem, slot.usage())
        for lm, at_lm in self._by_lm.items():
            adjustment: dict[str, list[int]] = {}
            slot = self.view.slots.get(lm)
            listed = slot.running_ids() if slot is not None else frozenset()
            for pending in at_lm.values():
                _contribute(adjustment, pending, listed, 1)
            _add(cpu, mem, adjustment)
        self._own_part(cpu, mem)
        total_cpu, total_mem = self.view.capacity
        for user in set(cpu) | set(kept):
            fresh = (cpu.get(user, 0) / total_cpu, mem.get(user, 0) / total_mem)
            if kept.get(user, (0.0, 0.0)) != fresh:
                raise InvariantViolated(f"{gm}: kept usage of {user} is {kept.get(user)}, "
                                        f"recomputed {fresh}")
        claimed = {v for pending in self.preemptions.values() for v in pending.victim_ids}
        if claimed != self.claimed:
            raise InvariantViolated(f"{gm}: {len(self.claimed)} victims claimed, "
                                    f"{len(claimed)} named by preemptions in flight")


def _add(cpu: dict[str, int], mem: dict[str, int], sums: dict[str, list[int]]) -> None:
    """Add cpu and memory per queue into the running totals."""
    for user, (user_cpu, user_mem) in sums.items():
        cpu[user] = cpu.get(user, 0) + user_cpu
        mem[user] = mem.get(user, 0) + user_mem


def _contribute(adjustment: dict[str, list[int]], pending: PendingPreemption,
                listed: frozenset[str], sign: int) -> None:
    """One preemption's part of its LM's adjustment, against the LM's last running list."""
    if pending.refused:
        return
    if pending.attempt_id not in listed:
        used = adjustment.setdefault(pending.user, [0, 0])
        used[0] += sign * pending.cpu_m
        used[1] += sign * pending.mem_mib
    for victim in pending.victims:
        if victim.attempt_id in listed:
            used = adjustment.setdefault(victim.user, [0, 0])
            used[0] -= sign * victim.cpu_m
            used[1] -= sign * victim.mem_mib
