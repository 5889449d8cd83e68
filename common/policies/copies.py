"""How many redundant copies each running task gets on a cluster's idle nodes: the SRPT+R
paper's algorithms as an LM applies them per task (docs/redundancy.md).

Given `n` candidate tasks (originals that run) and `I` idle nodes, a policy chooses `k` of the
candidates and an order, the favoured one first. The `k + I` machines are then spread as the
paper's algorithms spread machines among jobs: every chosen task gets `floor(M / k)` machines
(its own and copies) and the favoured one the rest, `M - (k - 1) floor(M / k)` (`shares`).
With fewer idle nodes than chosen tasks that is one machine each, so every idle node goes to
the favoured task.

- `srpt+r`: all `n`, the least estimated remaining work first;
- `fair+r`: all `n`, the latest arrival first;
- `laps+r`: the `ceil(beta n)` latest arrivals, the latest first;
- `none`: no copies.

Each policy declares whether it makes copies at all (`copies`, False only for `none`): what
depends on that (an LM's copy book, the GMs' reprioritizations) asks `makes_copies` or
`reprioritizes`, never a policy's name.

`COPY_POLICIES.make(name, options)` passes the family's options, a `CopyOptions` (`beta`).
`max_copies` (the original included; 0: no bound) caps what one task gets, whatever the
policy (the LM's `CopyBook` applies it, `wanted_copies`); what the cap leaves over goes to the
next chosen tasks in order, up to the cap each.

The candidates are an index kept as tasks start and end (`Candidates`), so a decision costs
the copies it hands out, not a sort of every running task.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from operator import add, itemgetter
from typing import Protocol

from sortedcontainers import SortedList

from common.errors import InvalidInput
from common.policies.registry import Registry


def shares(chosen: int, machines: int) -> tuple[int, int]:
    """(machines each chosen job gets, machines the favoured one gets) when `machines` are
    spread over `chosen` jobs as the paper's algorithms do; `machines` >= `chosen` >= 1."""
    each = machines // chosen
    return each, machines - (chosen - 1) * each


class Candidates:
    """The originals that may get copies, in the two orders the policies read: by estimated
    remaining work (least first) and by arrival (latest first)."""

    def __init__(self) -> None:
        self._by_key: SortedList = SortedList()  # (priority, seq, attempt id)
        self._entries: dict[str, tuple[float, int, str]] = {}  # in arrival order
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, attempt_id: str) -> bool:
        return attempt_id in self._entries

    def add(self, attempt_id: str, priority: float) -> None:
        if attempt_id in self._entries:
            return
        self._seq += 1
        entry = (priority, self._seq, attempt_id)
        self._entries[attempt_id] = entry
        self._by_key.add(entry)

    def rekey(self, attempt_id: str, priority: float) -> bool:
        """Its job's estimate changed: a new key, the same place in arrival order. False if
        it is no candidate or already has that key."""
        entry = self._entries.get(attempt_id)
        if entry is None or entry[0] == priority:
            return False
        self._by_key.remove(entry)
        entry = (priority, entry[1], attempt_id)
        self._entries[attempt_id] = entry  # an existing key keeps its place in the dict
        self._by_key.add(entry)
        return True

    def discard(self, attempt_id: str) -> None:
        entry = self._entries.pop(attempt_id, None)
        if entry is not None:
            self._by_key.remove(entry)

    def ids(self) -> Iterator[str]:
        return iter(self._entries)

    def least_work_first(self) -> Iterator[str]:
        return map(itemgetter(2), self._by_key)  # in C: a decision may read them all

    def latest_first(self) -> Iterator[str]:
        return reversed(self._entries)


@dataclass(frozen=True, slots=True)
class CopyOptions:
    """The copy policies' options (the federation file's [policies.redundancy] `beta`)."""

    beta: float = 0.5  # laps+r: the share of the latest running tasks that get copies

    def __post_init__(self) -> None:
        check_beta(self.beta)


def check_beta(beta: object) -> None:
    """LAPS's share of the latest arrivals, here and in the simulator's machine model."""
    if not (isinstance(beta, int | float) and 0 < beta <= 1 and math.isfinite(beta)):
        raise InvalidInput("beta", f"must be in (0, 1], got {beta!r}")


class CopyPolicy(Protocol):
    name: str
    options: CopyOptions
    copies: bool  # whether it ever gives a task copies ("none" does not: its LMs keep no book)

    def chosen(self, candidates: int) -> int:
        """How many of the candidates may get copies."""

    def order(self, candidates: Candidates) -> Iterator[str]:
        """The candidates in the order they get copies, the favoured one first."""


COPY_POLICIES: Registry[type[CopyPolicy]] = Registry(
    "policies.redundancy.policy", options=CopyOptions, argument="redundancy")


class _Policy:
    copies = True

    def __init__(self, options: CopyOptions = CopyOptions()) -> None:
        self.options = options

    def chosen(self, candidates: int) -> int:
        return candidates


@COPY_POLICIES.register("none")
class NoCopies(_Policy):
    copies = False

    def chosen(self, candidates: int) -> int:
        return 0

    def order(self, candidates: Candidates) -> Iterator[str]:
        return iter(())


@COPY_POLICIES.register("srpt+r")
class SrptCopies(_Policy):
    def order(self, candidates: Candidates) -> Iterator[str]:
        return candidates.least_work_first()


@COPY_POLICIES.register("fair+r")
class FairCopies(_Policy):
    def order(self, candidates: Candidates) -> Iterator[str]:
        return candidates.latest_first()


@COPY_POLICIES.register("laps+r")
class LapsCopies(FairCopies):
    def chosen(self, candidates: int) -> int:
        return max(1, math.ceil(self.options.beta * candidates)) if candidates else 0


def makes_copies(policy: str) -> bool:
    """Whether the copy policy named `policy` gives tasks copies; an unknown name is refused."""
    return COPY_POLICIES.get(policy).copies


def reprioritizes(queue_depth: int, policy: str) -> bool:
    """Whether a job's changed priority matters past its GM: its tasks wait in the workers'
    local queues in priority order (`queue_depth` > 0) or run as candidates for copies ordered
    by it. Only then do GMs send reprioritizations and LMs index their attempts by job
    (docs/local-queues.md, Estimates that change)."""
    return queue_depth > 0 or makes_copies(policy)


def wanted_copies(policy: CopyPolicy, candidates: Candidates, idle: int,
                  max_copies: int = 0) -> dict[str, int]:
    """Extra copies per candidate (only those that get some), in the policy's order.

    Two passes over the chosen tasks in order, each handing out idle nodes while they last:
    the shares (the favoured task its share less its own machine, every other `each - 1`,
    all within the cap `max_copies - 1`), then, if the cap left nodes over, top-ups to the
    cap. Each pass gives the tasks after the first the same amount until the nodes run out,
    so the plan is runs of equal amounts, built as lists: with most of an LM's tasks getting
    copies on a lightly loaded cluster, a step per task in Python was the cost of a decision."""
    k = policy.chosen(len(candidates))
    limit = max_copies - 1 if max_copies else idle
    if not k or idle <= 0 or limit <= 0:
        return {}
    each, favoured = shares(k, k + idle)
    first, others, left = _hand_out(min(limit, favoured - 1), min(limit, each - 1), k - 1, idle)
    if max_copies and left > 0:
        # nodes left means every other task got the same (`others` full or empty): top them up
        have = others[0] if others else 0
        more_first, more, left = _hand_out(limit - first, limit - have, k - 1, left)
        first += more_first
        others = list(map(add, others, more)) + others[len(more):] if others else more
    # the order goes on past the tasks that get copies: zip stops at the plan's end
    return dict(zip(policy.order(candidates), [first, *others], strict=False))


def _hand_out(first_cap: int, cap: int, others: int, left: int) -> tuple[int, list[int], int]:
    """`left` nodes handed out in order, up to `first_cap` to the first task and `cap` to
    each of the `others` after it: (the first's, the others' in order (those that got some),
    the nodes left)."""
    first = max(0, min(first_cap, left))
    left -= first
    if cap <= 0 or left <= 0:
        return first, [], left
    full = min(others, left // cap)
    got = [cap] * full
    left -= full * cap
    if full < others and left > 0:
        got.append(left)  # the last one gets what remains
        left = 0
    return first, got, left
