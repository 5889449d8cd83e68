"""Reading job traces in the Sparrow/Eagle format (the traces those simulators replay).

One job per line, fields separated by white space:

    arrival_time  num_tasks  mean_task_duration  duration_1 ... duration_num_tasks

Times are seconds. Field 3 is the scheduler's *estimate* (what the Eagle and Megha simulators
give the scheduler); the per-task durations are the truth. Jobs with equal arrival times keep
their file order: jobs are sorted by (arrival, line number), never nudged apart.

A malformed line is an `InvalidInput` naming `file:line` and what is wrong. By default the
first one stops the read, so nothing from a broken file is replayed; with `skip_bad=True` bad
lines are skipped and counted, and the first few errors are kept for the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from common.errors import InvalidInput

KEPT_ERRORS = 10  # how many skipped lines' errors a TraceRead keeps to show the user


@dataclass(frozen=True, slots=True)
class TraceJob:
    line: int  # 1-based line in its file: jobs with equal arrivals keep this order
    arrival: float  # seconds since the trace's origin
    estimate: float  # the trace's mean task duration: the scheduler's estimate
    durations: tuple[float, ...]  # the truth, one per task

    @property
    def width(self) -> int:
        return len(self.durations)


@dataclass(slots=True)
class TraceRead:
    jobs: list[TraceJob]
    source: str
    skipped: int = 0
    errors: list[str] = field(default_factory=list)  # the first KEPT_ERRORS skipped lines


def number_field(text: str, where: str, name: str) -> float:
    """A finite number >= 0, or an `InvalidInput` naming `where` and the field."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(where, f"{name} is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(where, f"{name} must be a finite number >= 0, got {text!r}")
    return value


def integer_field(text: str, where: str, name: str, minimum: int) -> int:
    """An integer >= `minimum`, or an `InvalidInput` naming `where` and the field."""
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(where, f"{name} is not an integer: {text!r}") from None
    if value < minimum:
        raise InvalidInput(where, f"{name} must be at least {minimum}, got {value}")
    return value


def parse_line(text: str, where: str, line: int) -> TraceJob:
    """One trace line as a job; `where` (`file:line`) names it in errors."""
    fields = text.split()
    if len(fields) < 3:
        raise InvalidInput(where, f"expected arrival, num_tasks, mean duration and one duration "
                                  f"per task; got {len(fields)} field(s)")
    arrival = number_field(fields[0], where, "arrival_time")
    width = integer_field(fields[1], where, "num_tasks", 1)
    estimate = number_field(fields[2], where, "mean_task_duration")
    if len(fields) != 3 + width:
        raise InvalidInput(where, f"num_tasks says {width} but the line has "
                                  f"{len(fields) - 3} task duration(s)")
    durations = tuple(number_field(f, where, f"duration {k + 1}") for k, f in enumerate(fields[3:]))
    return TraceJob(line=line, arrival=arrival, estimate=estimate, durations=durations)


def parse_lines(lines: Iterable[str], source: str, skip_bad: bool = False) -> TraceRead:
    read = TraceRead(jobs=[], source=source)
    for number, text in enumerate(lines, start=1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        try:
            read.jobs.append(parse_line(text, f"{source}:{number}", number))
        except InvalidInput as error:
            if not skip_bad:
                raise
            read.skipped += 1
            if len(read.errors) < KEPT_ERRORS:
                read.errors.append(str(error))
    read.jobs.sort(key=lambda job: (job.arrival, job.line))
    return read


Parsed = TypeVar("Parsed")


def parse_file(path: str | Path, what: str,
               parse: Callable[[Iterable[str], str], Parsed]) -> Parsed:
    """`parse(lines, source)` over a text file, line by line; a file that cannot be read is an
    `InvalidInput` naming it (`what` says what it should have been)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as file:
            return parse(file, str(path))
    except OSError as error:
        raise InvalidInput(str(path), f"cannot read the {what}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InvalidInput(str(path), f"not a text file ({error.reason})") from None


def read_trace(path: str | Path, skip_bad: bool = False) -> TraceRead:
    """Every job of a Sparrow/Eagle trace file, in arrival order."""
    return parse_file(path, "trace", lambda lines, source: parse_lines(lines, source, skip_bad))
