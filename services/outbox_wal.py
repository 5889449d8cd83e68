"""The LM's durable state on disk: a write-ahead log of its task events, and its last epoch.

An LM that dies with task events still in its outbox (RabbitMQ away, or simply not yet
published) used to lose them: its GMs then waited out `attempt_grace` after the new
incarnation's first heartbeat, requeued the attempts as lost and ran finished tasks again.
With this log the restarted LM publishes them instead.

The file (`<state dir>/task-events.wal`) is JSON lines, appended with unbuffered `write(2)`:

    {"id": [epoch, seq], "gm": "gm-1", "event": {TaskEventWire}}   an event to publish
    {"published": [[epoch, seq], ...]}                             RabbitMQ confirmed these

An id is the writing incarnation's epoch and a sequence number, so ids never repeat across
restarts. An event is pending from its record until a `published` record names it; on start
the LM reads the file, puts the pending events back into its outbox in their order (before
the core makes new ones) and rewrites the file with only those.

Durability, and what a crash can lose:

- Every record is written when it is made. A write that returned is in the kernel's page
  cache: a killed LM process (SIGKILL, a crash, the OOM killer) loses nothing.
- `fsync` is per batch, not per event: `sync()` is awaited once per worker report batch,
  before its `202` (services/lm.py). That answer is what the worker forgets its reports on,
  so once a finish is acknowledged upstream it is on disk. Concurrent batches share one fsync
  (group commit, in a thread, off the event loop).
- Not fsynced: events the LM makes on its own (a worker timed out, a dispatch failed, a
  preemption's victims) and `published` records. A machine crash (power, kernel) between
  their write and the next fsync can lose them. A lost event of the first kind is one the
  GMs' leases recover anyway (an attempt of an older LM epoch that the new incarnation does
  not list is requeued as lost after `attempt_grace`, which is what that event said); a lost
  `published` record only makes the restarted LM publish an event again, and GMs take task
  events idempotently (by attempt id and kind: a second finish or end of an attempt changes
  nothing), as they already must for RabbitMQ's at-least-once delivery.

Bounded: the pending events are the LM's outbox, which the core bounds
(`limits.lm_task_event_outbox`: it refuses new work past it). The file is truncated whenever
nothing in it is pending, and rewritten with only the pending records once it holds more
than `COMPACT_RECORDS` records and more than twice the pending ones, so it never holds much
more than the outbox.

The epoch file (`<state dir>/epoch`) keeps a restarted LM's epoch above its predecessor's
even if the wall clock stepped back: GMs ignore LM snapshots older than the newest they hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

WAL_NAME = "task-events.wal"
EPOCH_NAME = "epoch"
COMPACT_RECORDS = 10_000  # records in the file before it is rewritten with the pending ones

RecordId = tuple[int, int]  # (epoch of the incarnation that wrote it, sequence number)


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """A task event written to the log and not yet confirmed by RabbitMQ."""

    id: RecordId
    gm: str
    event: dict  # a TaskEventWire's fields, as JSON has them


def next_epoch(state_dir: Path, now_ms: int) -> int:
    """This incarnation's epoch: the wall clock in milliseconds, or one past the last epoch
    recorded in `state_dir` if the clock is behind it; recorded (fsynced) before it is used."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / EPOCH_NAME
    last = 0
    with contextlib.suppress(FileNotFoundError, ValueError):
        last = int(path.read_text().strip() or 0)
    epoch = max(now_ms, last + 1)
    _write_atomically(path, f"{epoch}\n".encode())
    return epoch


class TaskEventLog:
    """One LM's write-ahead log of task events; one writer, on the service's event loop."""

    def __init__(self, state_dir: Path, epoch: int) -> None:
        self.path = state_dir / WAL_NAME
        self.epoch = epoch
        self._seq = 0
        self._pending: dict[RecordId, bytes] = {}  # id -> its record's line, in write order
        self._records = 0  # records (events and acknowledgements) in the file
        self._fd: int | None = None
        self._written = 0  # writes so far, and how many of them an fsync has covered
        self._synced = 0
        self._sync_lock = asyncio.Lock()
        self._syncing = False  # an fsync runs in a thread on `_fd`: it must not be replaced
        self.dropped_tail = False  # the last record was cut short (a crash mid-write)

    # -- start -------------------------------------------------------------------------------------

    def recover(self) -> list[PendingEvent]:
        """Read what an earlier incarnation left, keep only the pending events (the file is
        rewritten with them) and open the log for appending. Returns them in their order."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        pending: dict[RecordId, tuple[str, dict]] = {}
        if self.path.exists():
            for record in self._read():
                if "published" in record:
                    for published in record["published"]:
                        pending.pop(tuple(published), None)
                else:
                    pending[tuple(record["id"])] = (record["gm"], record["event"])
        events = [PendingEvent(record_id, gm, event)
                  for record_id, (gm, event) in pending.items()]
        self._pending = {e.id: _line({"id": list(e.id), "gm": e.gm, "event": e.event})
                         for e in events}
        self._rewrite()
        return events

    def _read(self) -> Iterable[dict]:
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        for number, line in enumerate(lines):
            if not line:
                continue
            try:
                yield json.loads(line)
            except ValueError:
                # only the last record can be torn: it was being written when the LM died
                if number != len(lines) - 1:
                    raise ValueError(f"{self.path}: record {number + 1} is not JSON") from None
                self.dropped_tail = True

    # -- the outbox's life -----------------------------------------------------------------------

    def append(self, gm: str, event: dict) -> RecordId:
        """Write one event's record (not fsynced: see `sync`); returns its id."""
        self._seq += 1
        record_id = (self.epoch, self._seq)
        line = _line({"id": list(record_id), "gm": gm, "event": event})
        self._write(line)
        self._pending[record_id] = line
        return record_id

    def published(self, ids: Iterable[RecordId]) -> None:
        """RabbitMQ confirmed these events: recorded (not fsynced), then maybe compacted."""
        done = [record_id for record_id in ids if record_id in self._pending]
        if not done:
            return
        for record_id in done:
            del self._pending[record_id]
        if not self._pending:
            self._truncate()
        elif self._records > max(COMPACT_RECORDS, 2 * len(self._pending)) and not self._syncing:
            self._rewrite()
        else:
            self._write(_line({"published": [list(record_id) for record_id in done]}))

    async def sync(self) -> None:
        """Every record written before this call is on disk when it returns. One fsync in a
        thread serves every caller that arrives while it runs, and the next serves the rest."""
        target = self._written
        async with self._sync_lock:
            if self._synced >= target or self._fd is None:
                return
            upto = self._written
            self._syncing = True
            try:
                await asyncio.to_thread(os.fsync, self._fd)
            finally:
                self._syncing = False
            self._synced = upto

    def pending(self) -> int:
        return len(self._pending)

    def size(self) -> int:
        """Records in the file (events and acknowledgements)."""
        return self._records

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    # -- the file ----------------------------------------------------------------------------------

    def _write(self, line: bytes) -> None:
        if self._fd is None:
            raise RuntimeError(f"{self.path}: recover() first")
        _write_all(self._fd, line)
        self._records += 1
        self._written += 1

    def _truncate(self) -> None:
        """Nothing pending: the file starts over (an fsync in flight is on the same file)."""
        os.ftruncate(self._fd, 0)
        self._records = 0

    def _rewrite(self) -> None:
        """The pending records alone, in a new file that replaces the old one atomically."""
        _write_atomically(self.path, b"".join(self._pending.values()))
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._records = len(self._pending)
        self._synced = self._written  # the new file was fsynced whole


def _line(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _write_atomically(path: Path, data: bytes) -> None:
    """Write, fsync, rename over `path`, fsync the folder: the old contents or the new."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
