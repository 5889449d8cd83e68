"""The simulator's event log: the services' line format with virtual timestamps.

Each event is one JSON object per line (`ts`, `svc`, `event`, fields), as docs/architecture.md
(The event log) describes and services/eventlog.py writes, so `megha inspect` reads a
simulation unchanged. The same dicts are also fed to an in-process `RunAnalysis`, so a run
can print its figures without reading its own file back.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import orjson

from inspection.analysis import EVENTS_READ, RunAnalysis

_dumps, _ONE_LINE = orjson.dumps, orjson.OPT_APPEND_NEWLINE  # looked up once: a line each


class SimLog:
    def __init__(self, name: str, path: Path | None = None) -> None:
        self.analysis = RunAnalysis(name)
        self.path = path
        self._file: BinaryIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("wb", buffering=1 << 20)
        self.events = 0

    def emit(self, ts: float, svc: str, event: str, fields: dict | None = None,
             handle_s: float | None = None) -> None:
        """One line; `handle_s` (the core's time on the event) goes last, as the services
        write it."""
        self.events += 1
        if self._file is None and event not in EVENTS_READ:
            return  # not written, and the analysis does not read it: no record to build
        record = {"ts": ts, "svc": svc, "event": event, **fields} if fields else {
            "ts": ts, "svc": svc, "event": event}
        if handle_s is not None:
            record["handle_s"] = handle_s
        self.analysis.feed(record)
        if self._file is not None:
            # orjson: a million lines is most of a run's cost with the standard encoder
            self._file.write(_dumps(record, default=str, option=_ONE_LINE))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def report(self) -> dict:
        return self.analysis.report()
