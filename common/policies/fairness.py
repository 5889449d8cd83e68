"""Fair sharing across user queues (Megha's Algorithm 2), registered by name.

Consulted only when a task finds no room anywhere. If the task's queue uses less than its
share, victims are taken from the queue furthest above its share (largest violation first);
otherwise the task waits. Usage is a queue's dominant share of the federation: the larger of
its fractions of all cpu and of all memory (so a memory-heavy queue cannot hide behind a
small cpu footprint).

One deliberate tightening of the paper's rule, against oscillation: a preemption happens
only if the requesting queue stays within its share with the new task, and the victims'
queue stays at or above its share without the victims. Without it two queues near their
shares preempt each other back and forth, every round trip, while their GMs' usage figures
(from heartbeats) lag behind.

The GM proposes victims from its possibly stale view; the LM verifies them against the truth
before anything is stopped (`LocalMaster._preempt_verdict`).

`FAIRNESS_POLICIES.make(name, queues=...)` passes every user queue of the federation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from common.cluster import RunningInfo
from common.errors import InvalidInput
from common.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class UserQueue:
    name: str
    share: float  # the queue's entitled fraction of the federation
    gm: str  # the GM that serves it


def validate_queues(queues: Sequence[UserQueue]) -> None:
    names = [queue.name for queue in queues]
    for i, queue in enumerate(queues):
        if not queue.name:
            raise InvalidInput(f"queues[{i}].name", "must be non-empty")
        if names.count(queue.name) > 1:
            raise InvalidInput(f"queues[{i}].name", f"duplicate queue {queue.name!r}")
        if not 0 < queue.share <= 1:
            raise InvalidInput(f"queues[{i}].share", f"must be in (0, 1], got {queue.share}")
    total = sum(queue.share for queue in queues)
    if total > 1 + 1e-9:
        raise InvalidInput("queues", f"shares add up to {total:.3f}, more than 1")


Usage = dict[str, tuple[float, float]]  # queue -> (fraction of all cpu, of all memory)
NONE_USED = (0.0, 0.0)
_SLACK = 1e-9  # float sums of fractions: a queue exactly at its share is at its share


def queue_usage(running: Iterable[RunningInfo], total_cpu: int, total_mem: int) -> Usage:
    cpu: dict[str, int] = {}
    mem: dict[str, int] = {}
    for info in running:
        cpu[info.user] = cpu.get(info.user, 0) + info.cpu_m
        mem[info.user] = mem.get(info.user, 0) + info.mem_mib
    return {user: (cpu[user] / total_cpu, mem[user] / total_mem) for user in cpu}


def dominant(used: tuple[float, float]) -> float:
    return max(used)


def dominant_usage(
    running: Iterable[RunningInfo], total_cpu: int, total_mem: int
) -> dict[str, float]:
    return {user: dominant(used) for user, used in queue_usage(running, total_cpu,
                                                               total_mem).items()}


class FairnessPolicy(Protocol):
    """Decides whether a task that fits nowhere may take room from other queues' tasks."""

    name: str
    preempts: bool  # False: the GM never looks for victims

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        """The queues `user` may take from, in the order to try them; empty if none."""

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        """Whether taking attempts worth `freed` (fractions of cpu, memory) from `queue` is
        allowed."""


FAIRNESS_POLICIES: Registry[type[FairnessPolicy]] = Registry("policies.fairness",
                                                              argument="fairness")


@FAIRNESS_POLICIES.register("none")
class NoPreemption:
    preempts = False  # the GM skips looking for victims altogether

    def __init__(self, queues: Sequence[UserQueue] = ()) -> None:
        pass  # no shares to keep: nothing is ever taken

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        return []

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        return False


@FAIRNESS_POLICIES.register("fair_share")
class FairShare:
    """Algorithm 2: a queue below its share may preempt queues above theirs."""

    preempts = True

    def __init__(self, queues: Sequence[UserQueue]) -> None:
        validate_queues(queues)
        self.shares = {queue.name: queue.share for queue in queues}

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        """Queues to take from, largest violation first; empty unless `user` is below its
        share and stays within it with a task of `demand` (fractions of cpu and memory)."""
        share = self.shares.get(user)
        mine = usage.get(user, NONE_USED)
        if share is None or dominant(mine) >= share:
            return []
        if max(mine[0] + demand[0], mine[1] + demand[1]) > share + _SLACK:
            return []
        over = [
            (dominant(usage.get(other, NONE_USED)) - other_share, other)
            for other, other_share in self.shares.items()
            if other != user and dominant(usage.get(other, NONE_USED)) > other_share
        ]
        return [other for _, other in sorted(over, reverse=True)]

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        """Whether `queue` stays at or above its share after losing `freed`."""
        used = usage.get(queue, NONE_USED)
        return max(used[0] - freed[0], used[1] - freed[1]) >= self.shares[queue] - _SLACK


def choose_victims(
    candidates: Sequence[RunningInfo], free_cpu: int, free_mem: int, cpu_m: int, mem_mib: int
) -> tuple[str, ...] | None:
    """Fewest victims on one node that make room: largest first. None if even all cannot."""
    need_cpu, need_mem = cpu_m - free_cpu, mem_mib - free_mem
    chosen: list[str] = []
    for info in sorted(candidates, key=lambda r: (r.cpu_m, r.mem_mib), reverse=True):
        if need_cpu <= 0 and need_mem <= 0:
            break
        chosen.append(info.attempt_id)
        need_cpu -= info.cpu_m
        need_mem -= info.mem_mib
    return tuple(chosen) if need_cpu <= 0 and need_mem <= 0 else None
