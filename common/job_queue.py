"""One job's waiting tasks of one kind (pending, or held for pilots), grouped by shape.

Tasks of one shape succeed or fail alike on one view (`common/blocked.py`), so the scheduling
pass (`common/pending.py`) takes a group's tasks in order until one finds no node, and skips
the rest of the group in O(1) instead of visiting each.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from common.gm_records import TaskRecord

Shape = tuple[frozenset[int], int, int, frozenset[str] | None]  # TaskSpec.shape: constraints,
# cpu_m, mem_mib, placement set


class JobQueue:
    """One job's waiting tasks of one kind, grouped by shape. Queue order is kept as a number
    per task (`TaskRecord.seq`): a task put at the front gets a number below every other, one
    put at the back a number above, so each group is in queue order and groups merge by it."""

    __slots__ = ("groups", "_front", "_back", "_size")

    def __init__(self) -> None:
        self.groups: dict[Shape, deque[TaskRecord]] = {}
        self._front = 0
        self._back = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[TaskRecord]:
        """In queue order (for queries and checks, not for the pass)."""
        return iter(sorted((t for group in self.groups.values() for t in group),
                           key=lambda task: task.seq))

    def __contains__(self, task: TaskRecord) -> bool:
        group = self.groups.get(task.shape)
        return group is not None and task in group

    def push(self, task: TaskRecord, front: bool = False) -> bool:
        """Queue `task`; True if it opened a group (its shape had no task here)."""
        if not front:
            return bool(self.extend((task,)))
        group = self.groups.get(task.shape)
        opened = group is None
        if opened:
            group = self.groups[task.shape] = deque()
        self._front -= 1
        task.seq = self._front
        group.appendleft(task)
        self._size += 1
        return opened

    def extend(self, tasks: Iterable[TaskRecord]) -> list[Shape]:
        """`push` each of `tasks` at the back, in order; the shapes that opened a group."""
        groups, opened, back = self.groups, [], self._back
        for task in tasks:
            shape = task.shape
            group = groups.get(shape)
            if group is None:
                group = groups[shape] = deque()
                opened.append(shape)
            back += 1
            task.seq = back
            group.append(task)
        self._size += back - self._back
        self._back = back
        return opened

    def remove(self, task: TaskRecord) -> bool:
        """Take `task` out; True if that closed its group."""
        group = self.groups[task.shape]
        group.remove(task)
        self._size -= 1
        if group:
            return False
        del self.groups[task.shape]
        return True

    def pop_first(self, shape: Shape) -> bool:
        """Take the first task of a group out (it was placed); True if that closed the group."""
        group = self.groups[shape]
        group.popleft()
        self._size -= 1
        if group:
            return False
        del self.groups[shape]
        return True

    def take_all(self) -> list[TaskRecord]:
        """Empty the queue; its tasks in queue order."""
        tasks = list(self)
        self.groups.clear()
        self._size = 0
        return tasks
