"""The JSON event log: one object per line on stdout (docs/architecture.md, The event log).

Every record has `ts` (wall clock, seconds), `svc` (this service's id) and `event`, plus the
ids and fields the event needs. The inspection tool reads these lines from `docker compose
logs`, files or a simulation; anything else a library prints goes through `logging` and is
turned into the same shape (event `log`), so the stream stays machine-readable.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO


class EventLog:
    def __init__(self, svc: str, stream: TextIO | BackgroundWriter | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.svc = svc
        self._stream = stream or sys.stdout
        self._clock = clock
        self._held: list[str] | None = None
        self._step_ts: float | None = None  # inside `together`: the one `ts` of its lines

    def emit(self, event: str, fields: dict | None = None) -> None:
        ts = self._step_ts if self._step_ts is not None else round(self._clock(), 6)
        record = {"ts": ts, "svc": self.svc, "event": event}
        if fields:
            record.update(fields)
        try:
            line = _dumps(record)
        except ValueError:  # inf or nan somewhere: strict JSON has no word for them
            line = json.dumps(_finite(record), separators=(",", ":"), default=str)
        if self._held is not None:
            self._held.append(line)
            return
        # one write per line, flushed: lines of concurrent services must not interleave and
        # a killed container must not take its last events with it
        self._stream.write(line + "\n")
        self._stream.flush()

    @contextlib.contextmanager
    def together(self):
        """Lines emitted inside go out in one write at the end: the lines of one core event
        cost one system call (and one trip through a container's log pipe), not one each.
        They share one `ts`, taken on entry (after the core returned), as a simulation's lines
        of one step do: a log reader groups a step's lines by it."""
        if self._held is not None:  # nested: the outer block writes
            yield
            return
        self._held = []
        self._step_ts = round(self._clock(), 6)
        try:
            yield
        finally:
            held, self._held, self._step_ts = self._held, None, None
            if held:
                held.append("")
                self._stream.write("\n".join(held))
                self._stream.flush()

    def install_logging(self, level: int = logging.INFO) -> None:
        """Route `logging` (uvicorn, pika, ours) into this log as `log` events."""
        handler = _EventLogHandler(self)
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(level)
        # pika logs every refused connection attempt at ERROR with a stack; our broker
        # adapter reports connection changes as events of its own
        logging.getLogger("pika").setLevel(logging.CRITICAL)
        # one INFO line per HTTP request would drown the events that matter
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("httpcore").setLevel(logging.WARNING)
        logging.captureWarnings(True)  # warnings go through logging, so they are JSON too
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers[:] = []
            logging.getLogger(name).propagate = True


class BackgroundWriter:
    """A file descriptor that a service's event loop never waits for.

    A container's stdout is a pipe that the engine drains; on a busy host the engine falls
    behind, the pipe fills and a write blocks. Measured on the testbed at 200 tasks/s, an
    LM's event loop spent a fifth of its time blocked in such writes, and every request it
    was serving waited with it. Here the descriptor is non-blocking: a line goes straight into
    the pipe while it has room (so, as with a plain write, a line is out of the process before
    whatever the service does next: a kill takes nothing the log had already told), and only
    what does not fit waits in a buffer, which a thread writes out, in order, as the reader
    makes room; lines written meanwhile join the buffer behind it.

    The buffer is bounded (`limit` bytes): past it, a writer waits for room (`stalls`
    counts how often) rather than drop events, which are the run's record. At exit the
    thread writes out what is left; a SIGKILL loses only what was waiting for the reader.
    """

    def __init__(self, fd: int = 1, limit: int = 8 << 20) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._closed = False
        self._writing = False  # the thread holds a batch it has not written out yet
        self._ready = threading.Condition(threading.Lock())
        self.stalls = 0
        self._thread = threading.Thread(target=self._run, name="event-log-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def write(self, text: str) -> None:
        data = text.encode()
        with self._ready:
            if not self._chunks and not self._writing:  # nothing ahead of it: straight out
                try:
                    written = os.write(self._fd, data)
                except BlockingIOError:
                    written = 0
                except OSError:  # the reader is gone: nothing left to tell
                    return
                if written == len(data):
                    return
                data = data[written:]
            if self._size >= self._limit:
                self.stalls += 1
                while self._size >= self._limit and not self._closed:
                    self._ready.wait()
            self._chunks.append(data)
            self._size += len(data)
            self._ready.notify_all()

    def flush(self) -> None:
        """Nothing to do: lines leave as soon as the reader takes them (EventLog calls this
        after a direct write to a stream)."""

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until everything written so far has left (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._chunks or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ready.wait(left)
        return True

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._chunks and not self._closed:
                    self._ready.wait()
                if not self._chunks:  # closed and written out
                    return
                data = b"".join(self._chunks)
                self._chunks.clear()
                self._size = 0
                self._writing = True
                self._ready.notify_all()  # writers waiting for room, and `drain`
            self._write_out(memoryview(data))
            with self._ready:
                self._writing = False
                self._ready.notify_all()

    def _write_out(self, view: memoryview) -> None:
        """All of `view`, waiting for the reader as long as it takes (this thread only)."""
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except BlockingIOError:
                select.select([], [self._fd], [], 1.0)
            except OSError:  # the reader is gone: nothing left to tell
                return


_dumps = json.JSONEncoder(separators=(",", ":"), default=str, allow_nan=False).encode


def _finite(value):
    """Non-finite floats as the strings wire.py uses ("Infinity", "-Infinity", "NaN")."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


class _EventLogHandler(logging.Handler):
    def __init__(self, log: EventLog) -> None:
        super().__init__()
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._log.emit("log", {"level": record.levelname.lower(), "logger": record.name,
                                   "message": record.getMessage()[:2000]})
        except Exception:  # a logging failure must never take the service down
            self.handleError(record)
