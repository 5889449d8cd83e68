"""Event lines in, event dicts out, one at a time, whatever wrapped them.

Accepted, line by line (docs/architecture.md, The event log):

- the services' own lines: `{"ts": ..., "svc": "gm-1", "event": "task_placed", ...}`;
- `docker compose logs` output, where each line starts with `gm-1  | ` (with or without
  colour codes): the JSON starts at the first `{`;
- log files, a directory of them (`logs/*.log` of `python -m services.local`), stdin (`-`),
  and simulator output, which writes the same lines.

A line that is not a JSON object with a numeric `ts`, a `svc` and an `event` is counted as
malformed (the first few are kept to show) and skipped: a log cut off by a killed container
must not stop the report. Nothing is held beyond the current line.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from common.errors import InvalidInput

KEPT_MALFORMED = 5
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(slots=True)
class ReadCounts:
    lines: int = 0
    events: int = 0
    malformed: int = 0
    examples: list[str] = field(default_factory=list)  # `source:line: why`, the first few

    def bad(self, where: str, why: str) -> None:
        self.malformed += 1
        if len(self.examples) < KEPT_MALFORMED:
            self.examples.append(f"{where}: {why}")


def parse_event(line: str) -> dict | str:
    """The event of one line, or the reason it is not one."""
    start = line.find("{")
    if start < 0:
        return "no JSON object on the line"
    text = line[start:]
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    try:
        event = orjson.loads(text)  # about three times the standard parser's speed
    except orjson.JSONDecodeError as error:
        return f"not JSON ({error.msg})"
    if not isinstance(event, dict):
        return "not a JSON object"
    ts = event.get("ts")
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts):
        return "no numeric ts"
    if not isinstance(event.get("event"), str) or not isinstance(event.get("svc"), str):
        return "no event or svc"
    return event


def events_of_lines(lines: Iterable[str], source: str, counts: ReadCounts) -> Iterator[dict]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        counts.lines += 1
        parsed = parse_event(line)
        if isinstance(parsed, str):
            counts.bad(f"{source}:{number}", parsed)
            continue
        counts.events += 1
        yield parsed


def files_of(path: str) -> list[Path]:
    """The files one run argument names: a file, or every *.log / *.jsonl in a directory."""
    target = Path(path)
    if target.is_dir():
        found = sorted(p for p in target.iterdir() if p.suffix in (".log", ".jsonl", ".txt"))
        if not found:
            raise InvalidInput(path, "directory has no *.log, *.jsonl or *.txt file")
        return found
    if not target.exists():
        raise InvalidInput(path, "no such file or directory")
    return [target]


def read_events(paths: Iterable[str], counts: ReadCounts) -> Iterator[dict]:
    """Every event of the named files and directories (`-` is stdin), file after file."""
    for path in paths:
        if path == "-":
            yield from events_of_lines(sys.stdin, "stdin", counts)
            continue
        for file in files_of(path):
            try:
                with file.open(encoding="utf-8", errors="replace") as lines:
                    yield from events_of_lines(lines, str(file), counts)
            except OSError as error:
                raise InvalidInput(str(file), f"cannot read: {error.strerror}") from None
