"""How recent attempts ended: a bounded map from attempt id to its last state, oldest end
forgotten first.

An LM's and a worker's attempt books both keep one, so that an id seen before is never run
again, in flat memory. A dict and a queue of ids in the order they first ended, not an
OrderedDict: the same oldest id goes first, in about half the memory (a long simulation keeps
every end of its run, 100,000s).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from common.errors import InvariantViolated

State = TypeVar("State")


class EndedMemory(Generic[State]):
    __slots__ = ("_order", "_states", "kept", "get")

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._states: dict[str, State] = {}
        self._order: deque[str] = deque()  # each id once, in the order it first ended
        self.get = self._states.get  # state of an id, or None (read per attempt)

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._states

    def __len__(self) -> int:
        return len(self._states)

    def remember(self, attempt_id: str, state: State) -> None:
        """The attempt ended in `state` (again: its state is updated, its place kept)."""
        states = self._states
        if attempt_id not in states:
            self._order.append(attempt_id)
        states[attempt_id] = state
        if len(states) > self.kept:
            del states[self._order.popleft()]

    def validate(self, owner: str) -> None:
        if len(self._order) != len(self._states):
            raise InvariantViolated(f"{owner}: ended attempts and their order differ")
