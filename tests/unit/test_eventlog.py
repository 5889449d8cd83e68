"""The event log's writer thread: nothing lost, nothing reordered, bounded, and a caller never
waits for a slow reader until the bound is reached."""

from __future__ import annotations

import json
import os
import threading
import time

from services.eventlog import BackgroundWriter, EventLog


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def test_every_line_arrives_in_order_and_close_writes_out_the_rest() -> None:
    read_end, write_end = os.pipe()
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(read_all(read_end)))
    reader.start()
    writer = BackgroundWriter(write_end)
    log = EventLog("svc-1", writer)
    for i in range(5000):
        log.emit("tick", {"i": i})
    with log.together():
        log.emit("a", {})
        log.emit("b", {})
    writer.close()
    os.close(write_end)
    reader.join(timeout=10)
    lines = received[0].decode().splitlines()
    assert [json.loads(line)["event"] for line in lines[-2:]] == ["a", "b"]
    assert [json.loads(line)["i"] for line in lines[:-2]] == list(range(5000))
    os.close(read_end)


def test_a_reader_that_stops_reading_blocks_writers_only_past_the_bound() -> None:
    read_end, write_end = os.pipe()  # nobody reads yet: the pipe fills, then the buffer
    writer = BackgroundWriter(write_end, limit=256 << 10)
    line = "x" * 1023 + "\n"
    began = time.monotonic()
    for _ in range(200):  # 200 KiB beyond the pipe's own 64 KiB: within the bound
        writer.write(line)
    assert time.monotonic() - began < 1.0 and writer.stalls == 0

    done = threading.Event()

    def overfill() -> None:
        for _ in range(1000):  # a megabyte: more than pipe and buffer hold
            writer.write(line)
        done.set()

    threading.Thread(target=overfill, daemon=True).start()
    assert not done.wait(0.5), "a writer past the bound should wait for room"
    assert writer.stalls >= 1
    received = []
    reader = threading.Thread(target=lambda: received.append(read_all(read_end)))
    reader.start()
    assert done.wait(10), "room made by the reader should let the writer go on"
    writer.close()
    os.close(write_end)
    reader.join(timeout=10)
    assert received[0] == line.encode() * 1200  # nothing lost
    os.close(read_end)


def test_drain_waits_until_everything_written_has_left() -> None:
    read_end, write_end = os.pipe()
    writer = BackgroundWriter(write_end)
    writer.write("one\n")
    assert writer.drain(timeout=5)
    assert os.read(read_end, 100) == b"one\n"
    writer.close()
    os.close(write_end)
    os.close(read_end)


def test_a_line_is_in_the_pipe_when_write_returns_while_the_pipe_has_room() -> None:
    """What a killed service had logged is in its log: nothing waits in the process unless
    the reader fell behind."""
    read_end, write_end = os.pipe()
    writer = BackgroundWriter(write_end)
    writer.close()  # its thread gone: only the caller itself can put the line in the pipe
    log = EventLog("svc-1", writer)
    log.emit("launched", {"attempt": "a#1"})
    os.set_blocking(read_end, False)
    assert json.loads(os.read(read_end, 1000))["event"] == "launched"
    os.close(write_end)
    os.close(read_end)
