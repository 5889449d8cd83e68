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


def estimate_usage(listed_by_lm: Iterable[tuple[str, dict[str, list[int]], frozenset[str]]],
                   preemptions: Iterable[PendingPreemption],
                   capacity: tuple[int, int]) -> Usage:
    """Usage per queue: `listed_by_lm` gives, per LM, what its last heartbeat listed (cpu and
    memory per queue, and the listed attempt ids); `preemptions` are those not yet settled."""
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    ids_by_lm: dict[str, frozenset[str]] = {}
    for lm, sums, listed in listed_by_lm:
        ids_by_lm[lm] = listed
        for user, (user_cpu, user_mem) in sums.items():
            cpu[user] = cpu.get(user, 0) + user_cpu
            mem[user] = mem.get(user, 0) + user_mem
    for pending in preemptions:
        if pending.refused:
            continue
        listed = ids_by_lm.get(pending.lm, frozenset())
        if pending.attempt_id not in listed:
            cpu[pending.user] = cpu.get(pending.user, 0) + pending.cpu_m
            mem[pending.user] = mem.get(pending.user, 0) + pending.mem_mib
        for victim in pending.victims:
            if victim.attempt_id in listed:
                cpu[victim.user] -= victim.cpu_m
                mem[victim.user] -= victim.mem_mib
    total_cpu, total_mem = capacity
    return {user: (cpu[user] / total_cpu, mem[user] / total_mem) for user in cpu}
