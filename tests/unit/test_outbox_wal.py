"""The LM's task-event log (services/outbox_wal.py): what a restarted LM finds, what it does
with a damaged file, how the file stays bounded, and the epoch that only grows.

Every damage test works on a real file: it writes a log through `TaskEventLog`, damages its
bytes as a crash would, starts a new incarnation on it, and checks three things: the records
before the damage are recovered, the damaged tail is in the set-aside file byte for byte, and
the log goes on (an append, then another start that finds it and sets nothing aside).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services import outbox_wal
from services.outbox_wal import TaskEventLog, next_epoch, read_records


def event(attempt: str, kind: str = "finished") -> dict:
    return {"kind": kind, "attempt_id": attempt, "task_id": attempt.split("#")[0],
            "job_id": "j", "gm": "gm-1", "lm": "lm-1", "node_id": "lm-1/n0",
            "runtime": 1.0, "detail": "", "at": None}


def opened(folder: Path, epoch: int = 1) -> tuple[TaskEventLog, list]:
    log = TaskEventLog(folder, epoch)
    return log, log.recover()


def attempts(found: list) -> list[str]:
    return [p.event["attempt_id"] for p in found]


def framed(record: dict) -> bytes:
    """A record as the log writes it (checksum, space, JSON, newline), built here
    independently of the module so a change of format shows."""
    body = json.dumps(record, separators=(",", ":")).encode()
    return f"{zlib.crc32(body):08x} ".encode() + body + b"\n"


def written(folder: Path, count: int) -> bytes:
    """A log of `count` events a/0#1 ... (none published) written by epoch 1; its bytes."""
    log, _ = opened(folder)
    for k in range(count):
        log.append("gm-1", event(f"a/{k}#1"))
    return log.path.read_bytes()


def restarted_on(folder: Path, data: bytes, epoch: int = 2) -> tuple[TaskEventLog, list]:
    """A new incarnation started on a log holding exactly `data`."""
    (folder / outbox_wal.WAL_NAME).write_bytes(data)
    return opened(folder, epoch)


def set_aside_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(outbox_wal.WAL_NAME + outbox_wal.SET_ASIDE_INFIX + "*"))


def assert_goes_on(log: TaskEventLog, kept: list[str]) -> None:
    """After a start that set something aside: the log appends, and the next start finds
    what was kept and the new event, and sets nothing more aside."""
    log.append("gm-1", event("after#2"))
    again, found = opened(log.path.parent, epoch=log.epoch + 1)
    assert attempts(found) == [*kept, "after#2"]
    assert again.set_aside is None and not again.dropped_tail
    assert len(set_aside_files(log.path.parent)) == 1  # nothing new set aside
    data = again.path.read_bytes()
    assert read_records(data) == ([json.loads(line.split(b" ", 1)[1])
                                   for line in data.splitlines()], None)


def test_a_restart_finds_exactly_the_events_not_yet_published_in_their_order(tmp_path):
    log, found = opened(tmp_path)
    assert found == []
    ids = [log.append("gm-1" if k % 2 else "gm-2", event(f"a/{k}#1")) for k in range(5)]
    log.published([ids[1], ids[3]])
    asyncio.run(log.sync())
    # the process dies here: nothing closed, nothing flushed beyond write(2)
    again, found = opened(tmp_path, epoch=2)
    assert [p.id for p in found] == [ids[0], ids[2], ids[4]]
    assert [p.event["attempt_id"] for p in found] == ["a/0#1", "a/2#1", "a/4#1"]
    assert [p.gm for p in found] == ["gm-2", "gm-2", "gm-2"]
    # the file now holds only those; new ids carry the new epoch and never collide
    assert again.size() == 3
    fresh = again.append("gm-1", event("b/0#1"))
    assert fresh == (2, 1) and fresh not in ids
    again.published([p.id for p in found])
    _, found = opened(tmp_path, epoch=3)
    assert [p.event["attempt_id"] for p in found] == ["b/0#1"]


def test_a_record_torn_by_a_crash_mid_write_is_set_aside_and_the_rest_kept(tmp_path):
    data = written(tmp_path, 3)
    torn = data[:len(data) - 60]  # the LM died in the middle of the third record's write
    log, found = restarted_on(tmp_path, torn)
    assert attempts(found) == ["a/0#1", "a/1#1"]
    (aside,) = set_aside_files(tmp_path)
    third = data.splitlines(keepends=True)[2]
    assert aside.read_bytes() == third[:len(third) - 60]
    assert log.set_aside.path == aside and log.set_aside.size == len(third) - 60
    assert log.set_aside.lines == 1 and log.set_aside.intact == 0
    assert "record 3" in log.set_aside.reason and "cut short" in log.set_aside.reason
    assert log.dropped_tail
    assert_goes_on(log, ["a/0#1", "a/1#1"])


def test_a_nul_run_then_a_record_is_set_aside_whole(tmp_path):
    """A power cut on ext4 or XFS can leave the file's new size with blocks never written
    (zeros) before blocks that were: the record after the run looks intact, yet is set
    aside with the run, since the records in the run are gone."""
    data = written(tmp_path, 2)
    after = framed({"id": [1, 9], "gm": "gm-1", "event": event("a/9#1")})
    damaged = data + b"\0" * 4096 + after
    log, found = restarted_on(tmp_path, damaged)
    assert attempts(found) == ["a/0#1", "a/1#1"]
    (aside,) = set_aside_files(tmp_path)
    assert aside.read_bytes() == b"\0" * 4096 + after
    assert (log.set_aside.offset, log.set_aside.size) == (len(data), 4096 + len(after))
    assert (log.set_aside.lines, log.set_aside.intact) == (1, 0)  # the run ate its newline
    assert "4096 NUL bytes" in log.set_aside.reason and "record 3" in log.set_aside.reason
    assert_goes_on(log, ["a/0#1", "a/1#1"])


def test_a_nul_run_ending_in_a_newline_leaves_the_next_record_counted_intact(tmp_path):
    data = written(tmp_path, 1)
    after = framed({"id": [1, 9], "gm": "gm-1", "event": event("a/9#1")})
    log, found = restarted_on(tmp_path, data + b"\0" * 100 + b"\n" + after)
    assert attempts(found) == ["a/0#1"]
    assert (log.set_aside.lines, log.set_aside.intact) == (2, 1)
    assert set_aside_files(tmp_path)[0].read_bytes() == b"\0" * 100 + b"\n" + after
    assert "NUL" in log.set_aside.reason and log.set_aside.size == 101 + len(after)


def test_a_bad_record_in_the_middle_sets_aside_it_and_everything_after(tmp_path):
    lines = written(tmp_path, 4).splitlines(keepends=True)
    damaged = lines[0] + b"this is not a record\n" + b"".join(lines[2:])
    log, found = restarted_on(tmp_path, damaged)
    assert attempts(found) == ["a/0#1"]
    (aside,) = set_aside_files(tmp_path)
    assert aside.read_bytes() == b"this is not a record\n" + b"".join(lines[2:])
    assert (log.set_aside.lines, log.set_aside.intact) == (3, 2)
    assert "record 2" in log.set_aside.reason and "checksum" in log.set_aside.reason
    assert_goes_on(log, ["a/0#1"])


WRONG_SHAPES = {
    "a field misnamed": {"id": [1, 2], "gm": "gm-1", "evnt": event("a/1#1")},
    "a field missing": {"id": [1, 2], "event": event("a/1#1")},
    "an id of text": {"id": "1.2", "gm": "gm-1", "event": event("a/1#1")},
    "an id of booleans": {"id": [True, False], "gm": "gm-1", "event": event("a/1#1")},
    "an event without its attempt": {"id": [1, 2], "gm": "gm-1",
                                     "event": {k: v for k, v in event("a/1#1").items()
                                               if k != "attempt_id"}},
    "an event of an unknown kind": {"id": [1, 2], "gm": "gm-1",
                                    "event": event("a/1#1", kind="exploded")},
    "published, not a list": {"published": [1, 1]},
    "published and more": {"published": [[1, 1]], "gm": "gm-1"},
    "not an object": [[1, 2], "gm-1"],
}


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_record_of_the_wrong_shape_is_set_aside_with_what_follows(tmp_path, shape):
    """Valid JSON under a valid checksum, but not a record the log writes (a bug, or a file
    from elsewhere): set aside like damage, never a crash of the start."""
    lines = written(tmp_path, 1).splitlines(keepends=True)
    last = framed({"id": [1, 3], "gm": "gm-1", "event": event("a/2#1")})
    wrong = framed(WRONG_SHAPES[shape])
    log, found = restarted_on(tmp_path, lines[0] + wrong + last)
    assert attempts(found) == ["a/0#1"]
    assert set_aside_files(tmp_path)[0].read_bytes() == wrong + last
    assert "record 2" in log.set_aside.reason
    assert "checksum" not in log.set_aside.reason  # the shape was at fault, and it says so
    assert_goes_on(log, ["a/0#1"])


def flip_model() -> tuple[bytes, list[list[str]]]:
    """A log of events and confirmations, and the attempts pending after each prefix of its
    lines (prefix k: the first k lines kept)."""
    with tempfile.TemporaryDirectory() as folder:
        log, _ = opened(Path(folder))
        ids = [log.append("gm-1" if k % 2 else "gm-2", event(f"a/{k}#1")) for k in range(4)]
        log.published([ids[1]])
        ids.append(log.append("gm-1", event("a/4#1")))
        log.published([ids[0], ids[3]])
        data = log.path.read_bytes()
    ops = [("add", "a/0#1"), ("add", "a/1#1"), ("add", "a/2#1"), ("add", "a/3#1"),
           ("done", ["a/1#1"]), ("add", "a/4#1"), ("done", ["a/0#1", "a/3#1"])]
    assert len(data.splitlines()) == len(ops)
    pending: list[str] = []
    after = [[]]
    for op, what in ops:
        pending = [*pending, what] if op == "add" else [a for a in pending if a not in what]
        after.append(pending)
    return data, after


FLIP_DATA, FLIP_PENDING = flip_model()


def flipped(position: int, bit: int) -> bytes:
    damaged = bytearray(FLIP_DATA)
    damaged[position] ^= 1 << bit
    return bytes(damaged)


def test_every_single_bit_flip_anywhere_is_caught_at_its_record():
    """Exhaustively, on the reader alone: whichever bit of whichever byte flips (a checksum
    digit, the space, the JSON, a newline), the records before the flipped one are read and
    reading stops at the start of the flipped one's line."""
    starts = [0] + [i + 1 for i, byte in enumerate(FLIP_DATA) if byte == ord("\n")]
    good, _ = read_records(FLIP_DATA)
    for position in range(len(FLIP_DATA)):
        line = FLIP_DATA.count(b"\n", 0, position)  # the newline ending a line is its own
        for bit in range(8):
            records, bad = read_records(flipped(position, bit))
            assert records == good[:line], (position, bit)
            assert bad is not None and bad[0] == starts[line], (position, bit)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(position=st.integers(0, len(FLIP_DATA) - 1), bit=st.integers(0, 7))
def test_a_bit_flipped_anywhere_in_the_file_loses_only_its_record_and_after(position, bit):
    """The same, through the file: the restart keeps the events the records before the flip
    leave pending, sets the rest aside as it was, and the log goes on."""
    line = FLIP_DATA.count(b"\n", 0, position)
    offset = sum(len(x) for x in FLIP_DATA.splitlines(keepends=True)[:line])
    damaged = flipped(position, bit)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        log, found = restarted_on(folder, damaged)
        assert attempts(found) == FLIP_PENDING[line]
        (aside,) = set_aside_files(folder)
        assert aside.read_bytes() == damaged[offset:]
        assert log.set_aside.offset == offset and f"record {line + 1} " in log.set_aside.reason
        assert_goes_on(log, FLIP_PENDING[line])


def test_a_log_of_the_format_before_checksums_is_read_and_rewritten_with_them(tmp_path):
    old = [json.dumps({"id": [1, k], "gm": "gm-1", "event": event(f"a/{k}#1")}).encode()
           for k in range(3)]
    old.append(json.dumps({"published": [[1, 1]]}).encode())
    log, found = restarted_on(tmp_path, b"\n".join(old) + b"\n")
    assert attempts(found) == ["a/0#1", "a/2#1"] and log.set_aside is None
    assert log.path.read_bytes() == b"".join(
        framed({"id": [1, k], "gm": "gm-1", "event": event(f"a/{k}#1")}) for k in (0, 2))
    # an old log's torn tail is set aside like a new one's
    log, found = restarted_on(tmp_path, b"\n".join(old[:2]) + b"\n" + old[2][:30], epoch=3)
    assert attempts(found) == ["a/0#1", "a/1#1"] and "cut short" in log.set_aside.reason


def test_a_bare_json_line_in_a_log_with_checksums_is_a_bad_record(tmp_path):
    data = written(tmp_path, 1)
    bare = json.dumps({"id": [1, 2], "gm": "gm-1", "event": event("a/1#1")}).encode() + b"\n"
    log, found = restarted_on(tmp_path, data + bare)
    assert attempts(found) == ["a/0#1"] and "record 2" in log.set_aside.reason


def test_a_set_aside_file_is_never_overwritten(tmp_path):
    """Two starts under the same epoch (a test's, or a clock and epoch file both reset) each
    keep their own tail."""
    data = written(tmp_path, 1)
    restarted_on(tmp_path, data + b"first damage", epoch=5)
    restarted_on(tmp_path, data + b"second damage", epoch=5)
    assert [p.read_bytes() for p in set_aside_files(tmp_path)] == [b"first damage",
                                                                    b"second damage"]


def test_the_file_is_emptied_when_everything_is_published(tmp_path):
    log, _ = opened(tmp_path)
    ids = [log.append("gm-1", event(f"a/{k}#1")) for k in range(3)]
    log.published(ids[:2])
    assert log.path.stat().st_size > 0 and log.pending() == 1
    log.published(ids[2:])
    assert log.path.stat().st_size == 0 and log.size() == 0
    log.append("gm-1", event("b/0#1"))  # appending goes on in the emptied file
    assert len(log.path.read_text().splitlines()) == 1


def test_a_log_that_never_empties_is_rewritten_with_what_is_pending(tmp_path, monkeypatch):
    """Under steady load something is always pending: past COMPACT_RECORDS records (and
    twice the pending ones) the file is rewritten, so it stays near the outbox's size."""
    monkeypatch.setattr(outbox_wal, "COMPACT_RECORDS", 10)
    log, _ = opened(tmp_path)
    held = log.append("gm-1", event("held#1"))  # never confirmed
    for k in range(40):
        log.published([log.append("gm-1", event(f"a/{k}#1"))])
        assert log.size() <= 12
    assert len(log.path.read_text().splitlines()) == log.size()
    _, found = opened(tmp_path, epoch=2)
    assert [p.id for p in found] == [held]


def test_sync_fsyncs_once_for_every_caller_waiting_meanwhile(tmp_path, monkeypatch):
    log, _ = opened(tmp_path)
    calls = []
    real_fsync = outbox_wal.os.fsync
    monkeypatch.setattr(outbox_wal.os, "fsync", lambda fd: calls.append(fd) or real_fsync(fd))

    async def scenario() -> None:
        log.append("gm-1", event("a/0#1"))
        await asyncio.gather(*(log.sync() for _ in range(5)))
        await log.sync()  # nothing new written: no fsync

    asyncio.run(scenario())
    assert len(calls) == 1


def test_the_epoch_grows_across_restarts_even_if_the_clock_steps_back(tmp_path):
    first = next_epoch(tmp_path, 5_000)
    assert first == 5_000
    assert next_epoch(tmp_path, 4_000) == 5_001  # the clock went back: still newer
    assert next_epoch(tmp_path, 9_000) == 9_000
    (tmp_path / outbox_wal.EPOCH_NAME).write_text("")  # a torn epoch file: the clock decides
    assert next_epoch(tmp_path, 7_000) == 7_000
