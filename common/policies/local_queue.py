"""A worker's local run queue per node, in the order of a named policy.

Placements that a worker cannot start at once wait here until their node frees resources.
The policy decides which waiting placement goes first: `srpt` (SRPT+R) runs slearn pilot
tasks first and then the job with the least estimated remaining work, `fifo` runs them in
arrival order.

The worker makes one queue per node, so it takes the class, not an instance, and makes each
queue with the family's options: `LOCAL_QUEUE_POLICIES.get(name)(options=...)`, a
`LocalQueueOptions` (`aging`: work-seconds of priority credit per second waited; `fifo` has no
use for it). Both policies here are an order key on `KeyedLocalQueue`, which keeps the entries
sorted by it and indexes them by job, so that a job whose estimate changes is re-keyed without
a scan.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from sortedcontainers import SortedList

from common.errors import InvalidInput
from common.messages import Placement
from common.policies.registry import Registry

OrderKey = tuple[float | int, ...]


@dataclass(frozen=True, slots=True)
class LocalQueueOptions:
    """The local queue policies' options (the federation file's [policies.local_queues]
    `aging`; its other keys are the LM's and the worker's, not a queue's)."""

    aging: float = 0.0  # work-seconds of priority credit per second waited (srpt)

    def __post_init__(self) -> None:
        if not 0 <= self.aging < math.inf:
            raise InvalidInput("aging", f"must be a finite number >= 0, got {self.aging}")


class LocalQueue(Protocol):
    """Queued placements of one node: the worker starts them in iteration order.

    `seq` is the caller's arrival counter: it breaks ties, so equal keys keep arrival order.
    `now` is the time of the push: the start of the entry's wait, for aging.
    """

    name: str
    options: LocalQueueOptions

    def push(self, placement: Placement, seq: int, now: float) -> None:
        """Queue a placement; `InvalidInput` if its attempt is already queued."""

    def remove(self, attempt_id: str) -> Placement | None:
        """Take the attempt out of the queue; None if it is not queued here."""

    def get(self, attempt_id: str) -> Placement | None:
        """The queued placement of the attempt; None if it is not queued here."""

    def reprioritize(self, job_id: str, priority: float) -> int:
        """Give the job's queued placements this priority; how many changed.

        Each keeps its seq and its enqueue time (its aging credit survives)."""

    def __iter__(self) -> Iterator[Placement]:
        """The queued placements, in the order the worker should start them."""

    def __contains__(self, attempt_id: object) -> bool: ...

    def __len__(self) -> int: ...


LOCAL_QUEUE_POLICIES: Registry[type[LocalQueue]] = Registry(
    "policies.local_queue", options=LocalQueueOptions, argument="queue_policy")


@dataclass(slots=True)
class _Entry:
    key: OrderKey
    placement: Placement
    seq: int
    enqueued_at: float


class KeyedLocalQueue(ABC):
    """A local queue iterated in the order of the subclass's `order_key` (lowest first)."""

    name: str

    def __init__(self, options: LocalQueueOptions = LocalQueueOptions()) -> None:
        self.options = options
        self.aging = options.aging  # srpt's order key reads it at every push
        # the attempt id in each entry only breaks ties among equal keys (seq reused by a
        # caller must not make the list compare placements). Made at the first push: every
        # node has a queue, most never queue anything, and an empty SortedList is 300 bytes
        # (3 MB of a 10,000-node simulation)
        self._entries: SortedList | None = None
        self._by_attempt: dict[str, _Entry] = {}
        self._by_job: dict[str, set[str]] = {}  # job id -> its queued attempt ids

    @abstractmethod
    def order_key(self, placement: Placement, seq: int, enqueued_at: float) -> OrderKey:
        """The policy: lower keys run first. It may not depend on the time of the call,
        only on the entry: the list is sorted once, on push."""

    def push(self, placement: Placement, seq: int, now: float) -> None:
        attempt_id = placement.attempt_id
        if attempt_id in self._by_attempt:
            raise InvalidInput("attempt_id", f"{attempt_id!r} is already queued")
        key = self.order_key(placement, seq, now)
        if self._entries is None:
            self._entries = SortedList()
        self._entries.add((key, attempt_id))
        self._by_attempt[attempt_id] = _Entry(key, placement, seq, now)
        self._by_job.setdefault(placement.task.job_id, set()).add(attempt_id)

    def remove(self, attempt_id: str) -> Placement | None:
        """Take the attempt out of the queue; None if it is not queued here."""
        entry = self._by_attempt.pop(attempt_id, None)
        if entry is None:
            return None
        self._entries.remove((entry.key, attempt_id))
        job_id = entry.placement.task.job_id
        attempts = self._by_job[job_id]
        attempts.discard(attempt_id)
        if not attempts:
            del self._by_job[job_id]
        return entry.placement

    def get(self, attempt_id: str) -> Placement | None:
        entry = self._by_attempt.get(attempt_id)
        return None if entry is None else entry.placement

    def reprioritize(self, job_id: str, priority: float) -> int:
        changed = 0
        for attempt_id in self._by_job.get(job_id, ()):
            entry = self._by_attempt[attempt_id]
            if entry.placement.priority == priority:
                continue
            # a new placement, not a mutated one: the simulator shares placements among roles
            entry.placement = replace(entry.placement, priority=priority)
            key = self.order_key(entry.placement, entry.seq, entry.enqueued_at)
            if key != entry.key:
                self._entries.remove((entry.key, attempt_id))
                self._entries.add((key, attempt_id))
                entry.key = key
            changed += 1
        return changed

    def __iter__(self) -> Iterator[Placement]:
        by_attempt = self._by_attempt
        for _key, attempt_id in self._entries or ():
            yield by_attempt[attempt_id].placement

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._by_attempt

    def __len__(self) -> int:
        return len(self._by_attempt)


@LOCAL_QUEUE_POLICIES.register("srpt")
class SrptLocalQueue(KeyedLocalQueue):
    """Pilots first (their runtimes size whole jobs), then least estimated remaining work,
    less an aging credit for the time waited.

    An entry's effective key at time `now` is `priority - aging * (now - enqueued_at)`. The
    `- aging * now` term is the same for every entry, so the order is that of the static key
    `priority + aging * enqueued_at`, computed once on push.

    The bound this gives, with aging `a` > 0: an entry of estimate `e` queued at `t0` has key
    `e + a*t0`; a later arrival of estimate `e' >= 0` at `t1` has key `e' + a*t1 >= a*t1`,
    and goes first only if `a*t1 < e + a*t0`, that is `t1 - t0 < e / a`. So the entry is
    overtaken by later arrivals for at most `e / a` seconds of its wait; arrivals after that
    queue behind it (pilots excepted: they always go first). With `a` = 0 this is plain SRPT.
    """

    def order_key(self, placement: Placement, seq: int, enqueued_at: float) -> OrderKey:
        return (0 if placement.pilot else 1, placement.priority + self.aging * enqueued_at, seq)


@LOCAL_QUEUE_POLICIES.register("fifo")
class FifoLocalQueue(KeyedLocalQueue):
    """Arrival order (it accepts `aging` and ignores it: every entry ages alike)."""

    def order_key(self, placement: Placement, seq: int, enqueued_at: float) -> OrderKey:
        return (seq,)
