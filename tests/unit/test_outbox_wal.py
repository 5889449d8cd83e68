"""The LM's task-event log (services/outbox_wal.py): what a restarted LM finds, how the file
stays bounded, and the epoch that only grows."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from services import outbox_wal
from services.outbox_wal import TaskEventLog, next_epoch


def event(attempt: str, kind: str = "finished") -> dict:
    return {"kind": kind, "attempt_id": attempt, "task_id": attempt.split("#")[0],
            "job_id": "j", "gm": "gm-1", "lm": "lm-1", "node_id": "lm-1/n0",
            "runtime": 1.0, "detail": "", "at": None}


def opened(folder: Path, epoch: int = 1) -> tuple[TaskEventLog, list]:
    log = TaskEventLog(folder, epoch)
    return log, log.recover()


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


def test_a_record_torn_by_a_crash_mid_write_is_dropped_and_the_rest_kept(tmp_path):
    log, _ = opened(tmp_path)
    log.append("gm-1", event("a/0#1"))
    log.append("gm-1", event("a/1#1"))
    with open(log.path, "ab") as file:
        file.write(b'{"id":[1,3],"gm":"gm-1","ev')  # no newline: the write was cut short
    again, found = opened(tmp_path, epoch=2)
    assert again.dropped_tail
    assert [p.event["attempt_id"] for p in found] == ["a/0#1", "a/1#1"]
    again.append("gm-1", event("a/2#1"))  # appended after a clean file, not the torn line
    assert [json.loads(line)["event"]["attempt_id"]
            for line in again.path.read_text().splitlines()] == ["a/0#1", "a/1#1", "a/2#1"]


def test_a_corrupt_record_before_the_end_is_an_error_not_a_silent_loss(tmp_path):
    (tmp_path / outbox_wal.WAL_NAME).write_bytes(b"not json\n" + json.dumps(
        {"id": [1, 1], "gm": "gm-1", "event": event("a/0#1")}).encode() + b"\n")
    with pytest.raises(ValueError, match="record 1"):
        opened(tmp_path)


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
