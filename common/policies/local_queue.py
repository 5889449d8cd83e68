"""A worker's local run queue per node, in the order of a named policy.

Placements that a worker cannot start at once wait here until their node frees resources.
The policy decides which waiting placement goes first: `srpt` (SRPT+R) runs slearn pilot
tasks first and then the job with the least estimated remaining work, `fifo` runs them in
arrival order.

The worker makes one queue per node, so it takes the class, not an instance:
`LOCAL_QUEUE_POLICIES.get(name)()`; a queue's constructor takes nothing. Both policies here
are an order key on `KeyedLocalQueue`, which keeps the entries sorted by it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Protocol

from sortedcontainers import SortedList

from common.errors import InvalidInput
from common.messages import Placement
from common.policies.registry import Registry

OrderKey = tuple[float | int, ...]


class LocalQueue(Protocol):
    """Queued placements of one node: the worker starts them in iteration order.

    `seq` is the caller's arrival counter: it breaks ties, so equal keys keep arrival order.
    """

    name: str

    def push(self, placement: Placement, seq: int) -> None:
        """Queue a placement; `InvalidInput` if its attempt is already queued."""

    def remove(self, attempt_id: str) -> Placement | None:
        """Take the attempt out of the queue; None if it is not queued here."""

    def get(self, attempt_id: str) -> Placement | None:
        """The queued placement of the attempt; None if it is not queued here."""

    def __iter__(self) -> Iterator[Placement]:
        """The queued placements, in the order the worker should start them."""

    def __contains__(self, attempt_id: object) -> bool: ...

    def __len__(self) -> int: ...


LOCAL_QUEUE_POLICIES: Registry[type[LocalQueue]] = Registry("policies.local_queue",
                                                            argument="queue_policy")


class KeyedLocalQueue(ABC):
    """A local queue iterated in the order of the subclass's `order_key` (lowest first)."""

    name: str

    def __init__(self) -> None:
        # the attempt id in each entry only breaks ties among equal keys (seq reused by a
        # caller must not make the list compare placements)
        self._entries: SortedList = SortedList()
        self._by_attempt: dict[str, tuple[OrderKey, Placement]] = {}

    @staticmethod
    @abstractmethod
    def order_key(placement: Placement, seq: int) -> OrderKey:
        """The policy: lower keys run first."""

    def push(self, placement: Placement, seq: int) -> None:
        if placement.attempt_id in self._by_attempt:
            raise InvalidInput("attempt_id", f"{placement.attempt_id!r} is already queued")
        key = self.order_key(placement, seq)
        self._entries.add((key, placement.attempt_id))
        self._by_attempt[placement.attempt_id] = (key, placement)

    def remove(self, attempt_id: str) -> Placement | None:
        """Take the attempt out of the queue; None if it is not queued here."""
        entry = self._by_attempt.pop(attempt_id, None)
        if entry is None:
            return None
        key, placement = entry
        self._entries.remove((key, attempt_id))
        return placement

    def get(self, attempt_id: str) -> Placement | None:
        entry = self._by_attempt.get(attempt_id)
        return None if entry is None else entry[1]

    def __iter__(self) -> Iterator[Placement]:
        for _key, attempt_id in self._entries:
            yield self._by_attempt[attempt_id][1]

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._by_attempt

    def __len__(self) -> int:
        return len(self._by_attempt)


@LOCAL_QUEUE_POLICIES.register("srpt")
class SrptLocalQueue(KeyedLocalQueue):
    """Pilots first (their runtimes size whole jobs), then least estimated remaining work."""

    @staticmethod
    def order_key(placement: Placement, seq: int) -> OrderKey:
        return (0 if placement.pilot else 1, placement.priority, seq)


@LOCAL_QUEUE_POLICIES.register("fifo")
class FifoLocalQueue(KeyedLocalQueue):
    """Arrival order."""

    @staticmethod
    def order_key(placement: Placement, seq: int) -> OrderKey:
        return (seq,)
