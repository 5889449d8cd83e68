"""The JSON event log of DESIGN section 5: one object per line on stdout.

Every record has `ts` (wall clock, seconds), `svc` (this service's id) and `event`, plus the
ids and fields the event needs. The inspection tool reads these lines from `docker compose
logs`, files or a simulation; anything else a library prints goes through `logging` and is
turned into the same shape (event `log`), so the stream stays machine-readable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from typing import TextIO


class EventLog:
    def __init__(self, svc: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.svc = svc
        self._stream = stream or sys.stdout
        self._clock = clock
        self._held: list[str] | None = None

    def emit(self, event: str, fields: dict | None = None) -> None:
        record = {"ts": round(self._clock(), 6), "svc": self.svc, "event": event}
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
        cost one system call (and one trip through a container's log pipe), not one each."""
        if self._held is not None:  # nested: the outer block writes
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
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
