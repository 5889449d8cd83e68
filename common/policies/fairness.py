"""Fair sharing across user queues (Megha's Algorithm 2), registered by name.

Consulted only when a task finds no room anywhere. If the task's queue uses less than its
share, victims are taken from the queue furthest above its share (largest violation first);
otherwise the task waits.

Algorithm 2 is carried out in one of several ways, chosen by `FairnessOptions` (the
federation file's `[policies.fairness_options]`; docs/fairness.md has the table and the
measurements). Two policies name the two ends:

- `fair_share` (the default): today's refinements. Usage is a queue's *dominant* share (the
  larger of its fractions of all cpu and of all memory, so a memory-heavy queue cannot hide
  behind a small cpu footprint), and an *anti-oscillation* rule: a preemption happens only if
  the requesting queue stays within its share with the new task, and the victims' queue stays
  at or above its share without the victims. Without it two queues near their shares preempt
  each other back and forth, every round trip, while their GMs' usage figures (from
  heartbeats) lag behind. The GM serves its jobs in the job policy's order whatever their
  queue, knows its own queues' usage from the LMs' heartbeats only, and puts a refused task
  back at the front of its job's queue.
- `fair_share_paper`: Algorithm 2 as the paper writes it. The GM round-robins over its own
  user queues (one task of each in turn), keeps its own queues' usage from its own launches
  and the LMs' answers and task events (heartbeats tell it only the other GMs' queues), puts a
  refused task at the tail of its job's queue, and preempts without the anti-oscillation rule
  on a single resource. The paper does not define usage over two resources: its simulator, as
  Sparrow's, counts slots. We take cpu as that one resource (in slot mode cpu and memory
  fractions are the same, so this changes nothing there).

Each option may be set on its own over either policy's defaults.

The GM proposes victims from its possibly stale view; the LM verifies them against the truth
before anything is stopped (`LocalMaster._preempt_verdict`).

`FAIRNESS_POLICIES.make(name, options, queues=...)` passes the options (None: the policy's
`defaults`) and every user queue of the federation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
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


# Each option's choices, today's first. The federation file's table checks against these.
OPTION_CHOICES: dict[str, tuple[str, ...]] = {
    # the order a GM's scheduling pass serves its waiting tasks in: the job policy's over all
    # its queues, or its user queues in turn, one task each (the paper)
    "queue_order": ("job_policy", "round_robin"),
    # where a GM learns its own queues' usage: the LMs' heartbeats only, or its own launches,
    # the LMs' answers and the task events (the paper)
    "own_usage": ("heartbeats", "launches"),
    # where a task an LM refused goes: the front of its job's queue, or its tail (the paper)
    "refused": ("front", "tail"),
    # a queue's usage: the larger of its cpu and memory fractions, or its cpu fraction alone
    "usage": ("dominant", "cpu"),
}


@dataclass(frozen=True, slots=True)
class FairnessOptions:
    """How a GM carries out Algorithm 2 (the choices: `OPTION_CHOICES`; `anti_oscillation`:
    whether the rule in this module's docstring applies)."""

    queue_order: str = "job_policy"
    own_usage: str = "heartbeats"
    refused: str = "front"
    anti_oscillation: bool = True
    usage: str = "dominant"

    def __post_init__(self) -> None:
        for option in fields(self):
            value, choices = getattr(self, option.name), OPTION_CHOICES.get(option.name)
            if choices is None:
                if not isinstance(value, bool):
                    raise InvalidInput(f"fairness_options.{option.name}",
                                       f"must be true or false, got {value!r}")
            elif value not in choices:
                raise InvalidInput(f"fairness_options.{option.name}", unknown_choice(
                    option.name, value))

    @property
    def round_robin(self) -> bool:
        return self.queue_order == "round_robin"

    @property
    def tracks_own_usage(self) -> bool:
        return self.own_usage == "launches"

    @property
    def refused_to_tail(self) -> bool:
        return self.refused == "tail"


def unknown_choice(option: str, value: object) -> str:
    """What a value outside an option's choices is told, in code and in the file."""
    return f"must be one of {', '.join(map(repr, OPTION_CHOICES[option]))}, got {value!r}"


REFINED = FairnessOptions()  # today's behaviour
PAPER = FairnessOptions(queue_order="round_robin", own_usage="launches", refused="tail",
                        anti_oscillation=False, usage="cpu")

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


def cpu_only(used: tuple[float, float]) -> float:
    return used[0]


MEASURES: dict[str, Callable[[tuple[float, float]], float]] = {"dominant": dominant,
                                                                "cpu": cpu_only}


def dominant_usage(
    running: Iterable[RunningInfo], total_cpu: int, total_mem: int
) -> dict[str, float]:
    return {user: dominant(used) for user, used in queue_usage(running, total_cpu,
                                                               total_mem).items()}


class FairnessPolicy(Protocol):
    """Decides whether a task that fits nowhere may take room from other queues' tasks."""

    name: str
    preempts: bool  # False: the GM never looks for victims
    defaults: FairnessOptions  # the options a federation file that sets none gets
    options: FairnessOptions  # those in force: the defaults unless the file set some

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        """The queues `user` may take from, in the order to try them; empty if none."""

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        """Whether taking attempts worth `freed` (fractions of cpu, memory) from `queue` is
        allowed."""


FAIRNESS_POLICIES: Registry[type[FairnessPolicy]] = Registry(
    "policies.fairness", options=FairnessOptions, argument="fairness")


@FAIRNESS_POLICIES.register("none")
class NoPreemption:
    preempts = False  # the GM skips looking for victims altogether
    defaults = options = REFINED  # the GM's side of the options (queue order, ...) applies

    def __init__(self, queues: Sequence[UserQueue] = (),
                 options: FairnessOptions | None = None) -> None:
        self.options = options or self.defaults  # no shares to keep: nothing is ever taken

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        return []

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        return False


@FAIRNESS_POLICIES.register("fair_share")
class FairShare:
    """Algorithm 2: a queue below its share may preempt queues above theirs; with today's
    refinements unless `options` say otherwise."""

    preempts = True
    defaults = options = REFINED

    def __init__(self, queues: Sequence[UserQueue],
                 options: FairnessOptions | None = None) -> None:
        validate_queues(queues)
        self.shares = {queue.name: queue.share for queue in queues}
        self.options = options or self.defaults
        self.measure = MEASURES[self.options.usage]

    def victim_queues(
        self, user: str, usage: Usage, demand: tuple[float, float] = NONE_USED
    ) -> list[str]:
        """Queues to take from, largest violation first; empty unless `user` is below its
        share and (anti-oscillation) stays within it with a task of `demand` (fractions of
        cpu and memory)."""
        share, measure = self.shares.get(user), self.measure
        mine = usage.get(user, NONE_USED)
        if share is None or measure(mine) >= share:
            return []
        if self.options.anti_oscillation and measure(
                (mine[0] + demand[0], mine[1] + demand[1])) > share + _SLACK:
            return []
        over = [
            (measure(usage.get(other, NONE_USED)) - other_share, other)
            for other, other_share in self.shares.items()
            if other != user and measure(usage.get(other, NONE_USED)) > other_share
        ]
        return [other for _, other in sorted(over, reverse=True)]

    def may_take(self, queue: str, usage: Usage, freed: tuple[float, float]) -> bool:
        """Whether `queue` may lose `freed`: with anti-oscillation, only if it stays at or
        above its share; without it (the paper), any queue above its share may (the
        estimate counts each preemption named, so a queue stops being taken from once it is
        down to its share)."""
        if not self.options.anti_oscillation:
            return True
        used = usage.get(queue, NONE_USED)
        return self.measure((used[0] - freed[0], used[1] - freed[1])) >= (
            self.shares[queue] - _SLACK)


@FAIRNESS_POLICIES.register("fair_share_paper")
class FairSharePaper(FairShare):
    """Algorithm 2 as the paper writes it (`PAPER`): see this module's docstring."""

    defaults = options = PAPER


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
