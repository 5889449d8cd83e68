"""The LM's durable state on disk: a write-ahead log of its task events, and its last epoch.

An LM that dies with task events still in its outbox (RabbitMQ away, or simply not yet
published) used to lose them: its GMs then waited out `attempt_grace` after the new
incarnation's first heartbeat, requeued the attempts as lost and ran finished tasks again.
With this log the restarted LM publishes them instead.

The file (`<state dir>/task-events.wal`) is one record a line, each appended with one
unbuffered `write(2)`: the CRC-32 (zlib's) of the record's JSON as 8 lowercase hex digits, a
space, the JSON, a newline:

    1c2d3e4f {"id":[epoch,seq],"gm":"gm-1","event":{TaskEventWire}}   an event to publish
    5a6b7c8d {"published":[[epoch,seq],...]}                          RabbitMQ confirmed these

An id is the writing incarnation's epoch and a sequence number, so ids never repeat across
restarts. An event is pending from its record until a `published` record names it; on start
the LM reads the file, puts the pending events back into its outbox in their order (before
the core makes new ones) and rewrites the file with only those.

What a start does with a damaged file. A record is good when its line ends in a newline, its
checksum matches (the 8 digits exactly as written), its JSON is one of the two shapes above
and its event is a valid `TaskEventWire`. The records before the first bad one are kept; the
bad one and everything after it are *set aside*: their bytes, unchanged, go to a file next to
the log, `task-events.wal.corrupt-<epoch>` (fsynced before the log is rewritten without
them), and `set_aside` says where, how many bytes and lines, and why; the LM logs it in
`task_events_recovered` and starts. Nothing after a bad record is trusted, even a line that
looks intact: the records a NUL run or a torn write swallowed are gone, and keeping what
follows would deliver events with a gap before them. A bad record is what a crash or a disk
leaves: a record cut short at the end (the LM died mid-write), a run of NUL bytes (the file's
size reached the disk before its blocks, as a power cut leaves on ext4 or XFS), a flipped bit
(a single one is always caught: in the JSON by the CRC, in the digits or the space by the
exact comparison; a flipped newline runs the record into the next, whose bytes its CRC then
does not match), or a line of the wrong shape (a bug, or a file from elsewhere). What is set
aside is lost to the GMs, and their leases recover it: an attempt whose end they never hear
is requeued as lost after `attempt_grace`, so a finish set aside costs a rerun, as with a
wiped state folder. Damage in the middle (the disk itself, not a crash) can thereby cost
records that were fsynced. The set-aside files are never deleted: an operator reads them
(their good lines are records of this format) and removes them.

A log of the format before checksums (its first byte `{`, every line bare JSON) is still
read, with the same checks but the checksum, and rewritten in this format at that start;
from then on the file has checksums, and a bare JSON line in it is a bad record.

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
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from common.wire import TaskEventWire

WAL_NAME = "task-events.wal"
EPOCH_NAME = "epoch"
SET_ASIDE_INFIX = ".corrupt-"  # `<log>.corrupt-<epoch>`: a bad tail, kept for an operator
COMPACT_RECORDS = 10_000  # records in the file before it is rewritten with the pending ones
CRC_DIGITS = 8  # a record's line: CRC-32 as 8 lowercase hex digits, a space, its JSON

RecordId = tuple[int, int]  # (epoch of the incarnation that wrote it, sequence number)


class BadRecord(ValueError):
    """A line of the log that is not a good record; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """What a start moved out of the log: from its first bad record to the end."""

    path: Path  # the file that holds those bytes, unchanged
    offset: int  # where in the log they began
    size: int  # bytes
    lines: int  # lines among them, counting a last one without its newline
    intact: int  # of those, lines that are good records on their own (not trusted: see above)
    reason: str  # what is wrong with the first one, and where it was


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
        self.set_aside: SetAside | None = None  # what the last `recover` moved out, if anything

    @property
    def dropped_tail(self) -> bool:
        """The start found a bad record and set it and the rest aside."""
        return self.set_aside is not None

    # -- start -------------------------------------------------------------------------------------

    def recover(self) -> list[PendingEvent]:
        """Read what an earlier incarnation left, keep only the pending events (the file is
        rewritten with them; a damaged tail is set aside first, see the module's docstring)
        and open the log for appending. Returns them in their order."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        pending: dict[RecordId, tuple[str, dict]] = {}
        data = self.path.read_bytes() if self.path.exists() else b""
        records, bad = read_records(data)
        for record in records:
            if "published" in record:
                for published in record["published"]:
                    pending.pop(tuple(published), None)
            else:
                pending[tuple(record["id"])] = (record["gm"], record["event"])
        if bad is not None:
            offset, reason = bad
            self.set_aside = self._set_aside(data, offset, reason)
        events = [PendingEvent(record_id, gm, event)
                  for record_id, (gm, event) in pending.items()]
        self._pending = {e.id: _line({"id": list(e.id), "gm": e.gm, "event": e.event})
                         for e in events}
        self._rewrite()
        return events

    def _set_aside(self, data: bytes, offset: int, reason: str) -> SetAside:
        """The log's bytes from `offset` on, unchanged and fsynced, in a file of their own
        (never one that exists: an earlier start's is kept), before the log loses them."""
        tail = data[offset:]
        base = self.path.with_name(f"{self.path.name}{SET_ASIDE_INFIX}{self.epoch}")
        path, copy = base, 0
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                copy += 1
                path = base.with_name(f"{base.name}.{copy}")
        try:
            _write_all(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_folder(path.parent)
        lines = tail.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the tail ended with a newline: no partial last line
        legacy = data.startswith(b"{")
        intact = sum(_is_record(line, legacy) for line in lines)
        return SetAside(path, offset, len(tail), len(lines), intact, reason)

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
    """A record as its line in the log: checksum, space, JSON, newline."""
    body = json.dumps(record, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def read_records(data: bytes) -> tuple[list[dict], tuple[int, str] | None]:
    """The good records at the start of a log's bytes, and where the first bad one begins
    with what is wrong with it (None if there is none). A log whose first byte is `{` is of
    the format before checksums: its lines are bare JSON, checked for everything else."""
    legacy = data.startswith(b"{")
    records: list[dict] = []
    offset = 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        line = data[offset:] if end < 0 else data[offset:end]
        try:
            if b"\0" in line:
                raise BadRecord(f"{line.count(0)} NUL bytes, blocks a power cut left unwritten")
            if end < 0:
                raise BadRecord("cut short, no newline: a write torn by a crash")
            records.append(_parse(line, legacy))
        except BadRecord as error:
            return records, (offset, f"record {len(records) + 1} (byte {offset}): {error}")
        offset = end + 1
    return records, None


def _parse(line: bytes, legacy: bool) -> dict:
    """One line's record, its checksum (unless `legacy`) and shape checked."""
    if legacy:
        body = line
    else:
        digits, body = line[:CRC_DIGITS], line[CRC_DIGITS + 1:]
        if line[CRC_DIGITS:CRC_DIGITS + 1] != b" " or not body:
            raise BadRecord(f"not a checksum, a space and JSON: {line[:40]!r}")
        # compared as written, not as a number: `1A2B...` for `1a2b...` is damage too
        if digits != b"%08x" % zlib.crc32(body):
            raise BadRecord(f"checksum {digits.decode(errors='backslashreplace')} written, "
                            f"{zlib.crc32(body):08x} computed from the record")
    try:
        record = json.loads(body)
    except ValueError as error:  # UnicodeDecodeError is one
        raise BadRecord(f"not JSON ({error})") from None
    return _checked(record)


def _checked(record: object) -> dict:
    """`record` if it has one of the two shapes the log writes, else BadRecord saying how."""
    if not isinstance(record, dict):
        raise BadRecord(f"a JSON {type(record).__name__}, not an object")
    if record.keys() == {"published"}:
        ids = record["published"]
        if not isinstance(ids, list) or not ids or not all(map(_is_id, ids)):
            raise BadRecord("`published` is not a list of [epoch, seq] ids")
        return record
    if record.keys() != {"id", "gm", "event"}:
        raise BadRecord(f"fields {sorted(record)}: an event has id, gm and event, a "
                        "confirmation published alone")
    if not _is_id(record["id"]):
        raise BadRecord(f"id {record['id']!r} is not [epoch, seq]")
    if not isinstance(record["gm"], str) or not record["gm"]:
        raise BadRecord(f"gm {record['gm']!r} is not a GM's id")
    try:  # the LM rebuilds the wire model from it: a refusal then would stop its start
        TaskEventWire.model_validate(record["event"])
    except ValidationError as error:
        raise BadRecord(f"its event is not a TaskEventWire: {error.errors()[0]['loc']} "
                        f"{error.errors()[0]['msg']}") from None
    return record


def _is_id(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(type(part) is int for part in value))  # not isinstance: True is no id


def _is_record(line: bytes, legacy: bool) -> bool:
    try:
        _parse(line, legacy)
    except BadRecord:
        return False
    return True


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
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """A new or renamed file's name is on disk once its folder is fsynced."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
