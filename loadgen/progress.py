"""Progress of a replay: a rich progress bar on a terminal, a line every few seconds in a log.

The replayer calls `progress(phase, done, total)` (phase "submit", then "complete"); it does
not know which of the two it talks to. In `docker compose logs` a bar would be noise, so the
choice follows whether stderr is a terminal.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


class LineProgress:
    """A line per phase every `every` seconds, and one when the phase ends."""

    def __init__(self, stream: TextIO = sys.stderr, every: float = 5.0) -> None:
        self.stream = stream
        self.every = every
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= self.every:
            self.last = now
            self.stream.write(f"{phase}: {done}/{total} jobs\n")
            self.stream.flush()

    def close(self) -> None:
        pass


class BarProgress:
    """One bar per phase, drawn by rich on the terminal."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.bars = Progress(TextColumn("{task.description:>8}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("jobs"), TimeElapsedColumn(),
                             console=Console(file=stream))
        self.tasks: dict[str, TaskID] = {}
        self.bars.start()

    def __call__(self, phase: str, done: int, total: int) -> None:
        if phase not in self.tasks:
            self.tasks[phase] = self.bars.add_task(phase, total=total)
        self.bars.update(self.tasks[phase], completed=done, total=total)

    def close(self) -> None:
        self.bars.stop()


def progress_for(stream: TextIO = sys.stderr) -> LineProgress | BarProgress:
    return BarProgress(stream) if stream.isatty() else LineProgress(stream)
