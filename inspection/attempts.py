"""Every attempt's numbers for `RunAnalysis` (inspection/analysis.py), a row per attempt in
typed columns.

A run of 100,000s of tasks feeds as many attempts, each a dozen numbers kept to the end (the
figures join them by id then, as events arrive in any order). An object per attempt, with
its floats boxed, took about 400 bytes; a row here takes about 100 (a float column 8 bytes a
row, NaN for a number not logged yet), plus the attempt id and the id's row number.

`AttemptTable` is also a read-only mapping, attempt id -> `AttemptView`, whose attributes
are the old per-attempt record's (None where the column holds NaN): the experiments and tests
that read attempts read them so.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping

NAN = float("nan")
# float columns that start as "not logged" (NaN, read as None), and those that start at 0.0
TIMES = ("placed", "launched", "received", "started", "lm_start", "lm_end", "own_work")
HANDLES = ("placed_h", "launched_h", "received_h")
# a simulation's (wait_s, flight_s, work_s) on the placed, launched and received lines: three
# floats each in `stamps`, a column of nine a row made at the first stamped line
LINES = ("placed", "launched", "received")
STAMPED = {line: 1 << i for i, line in enumerate(LINES)}  # flags: the line had stamps
QUEUED = 1 << 3  # launched into its node's local queue: resources from its start
FINISHED = 1 << 4  # its worker's end line was task_finished (else task_cancelled)
CHUNK = 4096  # rows the columns grow by


class AttemptTable(Mapping):
    """The columns, a row per attempt id in the order ids were first seen. A number logged
    as NaN reads as not logged. Whoever reads a column through a buffer (numpy's
    `frombuffer`) drops the view before the table is fed again: a column with a view of it
    cannot grow."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}  # attempt id -> its row
        self.capacity = 0
        self.task: list[str] = []  # "" until a line names it
        self.user: list[str] = []  # its task_launched's
        self.cpu_m = array("q")  # its task_launched's, 0 before
        self.flags = bytearray()
        self.copy_of: dict[int, str] = {}  # row -> the original attempt, for copies
        self.stamps: array | None = None  # 9 floats a row, once a line had stamps
        for name in TIMES + HANDLES:
            setattr(self, name, array("d"))

    # declared for the type checker: made in __init__
    placed: array
    launched: array
    received: array
    started: array
    lm_start: array
    lm_end: array
    own_work: array
    placed_h: array
    launched_h: array
    received_h: array

    def row(self, attempt_id: str) -> int:
        """The attempt's row, a new one (nothing logged yet) the first time."""
        row = self.ids.get(attempt_id)
        if row is None:
            row = len(self.ids)
            if row == self.capacity:
                self._grow()
            self.ids[attempt_id] = row
        return row

    def _grow(self) -> None:
        nan, zero = array("d", [NAN]) * CHUNK, array("d", [0.0]) * CHUNK
        for name in TIMES:
            getattr(self, name).extend(nan)
        for name in HANDLES:
            getattr(self, name).extend(zero)
        self.task.extend([""] * CHUNK)
        self.user.extend([""] * CHUNK)
        self.cpu_m.extend(array("q", [0]) * CHUNK)
        self.flags.extend(bytes(CHUNK))
        if self.stamps is not None:
            self.stamps.extend(array("d", [0.0]) * (9 * CHUNK))
        self.capacity += CHUNK

    def set_stamps(self, row: int, line: str, stamps: tuple[float, float, float] | None) -> None:
        """The (wait_s, flight_s, work_s) of the attempt's `line`, or None (the services')."""
        bit = STAMPED[line]
        if stamps is None:
            self.flags[row] &= ~bit
            return
        if self.stamps is None:
            self.stamps = array("d", [0.0]) * (9 * self.capacity)
        at = 9 * row + 3 * LINES.index(line)
        self.stamps[at:at + 3] = array("d", stamps)
        self.flags[row] |= bit

    def stamps_of(self, row: int, line: str) -> tuple[float, float, float] | None:
        if not self.flags[row] & STAMPED[line]:
            return None
        at = 9 * row + 3 * LINES.index(line)
        return tuple(self.stamps[at:at + 3])

    def flag(self, row: int, bit: int, on: bool) -> None:
        if on:
            self.flags[row] |= bit
        else:
            self.flags[row] &= ~bit

    # -- the mapping: attempt id -> a view of its row ----------------------------------------

    def __getitem__(self, attempt_id: str) -> AttemptView:
        return AttemptView(self, self.ids[attempt_id])

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self.ids

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def view(self, row: int) -> AttemptView:
        return AttemptView(self, row)


def _time(name: str) -> property:
    def read(view: AttemptView) -> float | None:
        value = getattr(view.table, name)[view.row]
        return None if value != value else value
    return property(read)


def _handle(name: str) -> property:
    return property(lambda view: getattr(view.table, name)[view.row])


def _stamps(line: str) -> property:
    return property(lambda view: view.table.stamps_of(view.row, line))


class AttemptView:
    """One row, read as the per-attempt record `RunAnalysis` kept before its table."""

    __slots__ = ("table", "row")

    def __init__(self, table: AttemptTable, row: int) -> None:
        self.table = table
        self.row = row

    placed = _time("placed")
    launched = _time("launched")
    received = _time("received")
    started = _time("started")
    lm_start = _time("lm_start")
    lm_end = _time("lm_end")
    own_work = _time("own_work")
    placed_h = _handle("placed_h")
    launched_h = _handle("launched_h")
    received_h = _handle("received_h")
    placed_stamps = _stamps("placed")
    launched_stamps = _stamps("launched")
    received_stamps = _stamps("received")

    @property
    def task(self) -> str:
        return self.table.task[self.row]

    @property
    def user(self) -> str:
        return self.table.user[self.row]

    @property
    def cpu_m(self) -> int:
        return self.table.cpu_m[self.row]

    @property
    def queued(self) -> bool:
        return bool(self.table.flags[self.row] & QUEUED)

    @property
    def finished(self) -> bool:
        return bool(self.table.flags[self.row] & FINISHED)

    @property
    def copy_of(self) -> str | None:
        return self.table.copy_of.get(self.row)

    def __repr__(self) -> str:
        fields = ("task", "placed", "launched", "received", "started", "cpu_m", "user",
                  "lm_start", "lm_end", "queued", "copy_of", "own_work", "finished")
        return "Attempt(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in fields) + ")"
