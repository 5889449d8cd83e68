"""A worker's local run queue per node, in the order of a named policy.

Placements that a worker cannot start at once wait here until their node frees resources.
The policy decides which waiting placement goes first: `srpt` (SRPT+R) runs slearn pilot
tasks first and then the job with the least estimated remaining work, `fifo` runs them in
arrival order. Policies are selected by name from `LOCAL_QUEUE_POLICIES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

from sortedcontainers import SortedList

from common.errors import InvalidInput
from common.messages import Placement

OrderKey = tuple[float | int, ...]


class LocalQueue(ABC):
    """Queued placements of one node, iterated in `order_key` order.

    `seq` is the caller's arrival counter: it breaks ties, so equal keys keep arrival order.
    """

    name: ClassVar[str] = ""

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


class SrptLocalQueue(LocalQueue):
    """Pilots first (their runtimes size whole jobs), then least estimated remaining work."""

    name = "srpt"

    @staticmethod
    def order_key(placement: Placement, seq: int) -> OrderKey:
        return (0 if placement.pilot else 1, placement.priority, seq)


class FifoLocalQueue(LocalQueue):
    name = "fifo"

    @staticmethod
    def order_key(placement: Placement, seq: int) -> OrderKey:
        return (seq,)


LOCAL_QUEUE_POLICIES: dict[str, type[LocalQueue]] = {
    policy.name: policy for policy in (SrptLocalQueue, FifoLocalQueue)
}


def local_queue_policy(name: str) -> type[LocalQueue]:
    """The policy class registered under `name`; `InvalidInput` lists the known names."""
    try:
        return LOCAL_QUEUE_POLICIES[name]
    except KeyError:
        known = ", ".join(sorted(LOCAL_QUEUE_POLICIES))
        raise InvalidInput("queue_policy", f"unknown policy {name!r} (known: {known})") from None
