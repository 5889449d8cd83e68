"""Each user queue's share of the federation as one GM sees it, for the fairness policy.

A GM learns what runs where from the LMs' heartbeats (each lists the attempts running on its
nodes, with their queue and size). Between heartbeats it also knows the preemptions it asked
for and the LMs have not yet shown the outcome of: for those, until a heartbeat lists the new
attempt, its size counts for its queue, and while a heartbeat still lists a victim, its size
is taken off its queue. Each adjustment applies only as long as the heartbeats do not show it
already, so nothing is counted twice: a queue's usage is never below zero (an earlier version
added every pending preemption's effect on top of heartbeats that sometimes showed it already,
and `/v1/queues` reported negative usage in the testbed). A usage can still run ahead of the
truth by what finished since the last heartbeat; it is kept within [0, 1], the range of a
fraction of the federation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.cluster import RunningInfo
from common.policies.fairness import Usage


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


def estimate_usage(running_by_lm: Iterable[tuple[str, Iterable[RunningInfo], frozenset[str]]],
                   preemptions: Iterable[PendingPreemption],
                   capacity: tuple[int, int]) -> Usage:
    """Usage per queue: `running_by_lm` gives, per LM, what its last heartbeat listed (and the
    listed attempt ids); `preemptions` are those not yet settled by a heartbeat."""
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    listed_by_lm: dict[str, frozenset[str]] = {}
    for lm, running, listed in running_by_lm:
        listed_by_lm[lm] = listed
        for info in running:
            cpu[info.user] = cpu.get(info.user, 0) + info.cpu_m
            mem[info.user] = mem.get(info.user, 0) + info.mem_mib
    for pending in preemptions:
        if pending.refused:
            continue
        listed = listed_by_lm.get(pending.lm, frozenset())
        if pending.attempt_id not in listed:
            cpu[pending.user] = cpu.get(pending.user, 0) + pending.cpu_m
            mem[pending.user] = mem.get(pending.user, 0) + pending.mem_mib
        for victim in pending.victims:
            if victim.attempt_id in listed:
                cpu[victim.user] -= victim.cpu_m
                mem[victim.user] -= victim.mem_mib
    total_cpu, total_mem = capacity
    return {user: (_fraction(cpu[user], total_cpu), _fraction(mem[user], total_mem))
            for user in cpu}


def _fraction(used: int, total: int) -> float:
    return min(1.0, max(0.0, used / total))
