"""The simulator's event log: the services' line format with virtual timestamps.

Each event is one JSON object per line (`ts`, `svc`, `event`, fields), as DESIGN section 5
says and services/eventlog.py writes, so `megha inspect` reads a simulation unchanged. The
same dicts are also fed to an in-process `RunAnalysis`, so a run can print its figures
without reading its own file back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from inspection.analysis import RunAnalysis


class SimLog:
    def __init__(self, name: str, path: Path | None = None) -> None:
        self.analysis = RunAnalysis(name)
        self.path = path
        self._file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8", buffering=1 << 20)
        self._encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
        self.events = 0

    def emit(self, ts: float, svc: str, event: str, fields: dict | None = None) -> None:
        record = {"ts": round(ts, 9), "svc": svc, "event": event}
        if fields:
            record.update(fields)
        self.events += 1
        self.analysis.feed(record)
        if self._file is not None:
            self._file.write(self._encode(record) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def report(self) -> dict:
        return self.analysis.report()
