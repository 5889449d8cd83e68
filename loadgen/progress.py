"""Progress of a replay: a rich progress bar on a terminal, a line every few seconds in a log.

The replayer calls `progress(phase, done, total)` (phase "submit", then "complete"); it does
not know which of the two it talks to. In `docker compose logs` a bar would be noise, so the
choice follows whether stderr is a terminal.

rich is imported by the bar only: the workload tools (and `megha simulate`, which builds its
workload with them) import this module for `Progress` and `quiet`, and a run whose stderr is
no terminal never draws a bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import TaskID

Progress = Callable[[str, int, int], None]  # (phase, done, total)


def quiet(phase: str, done: int, total: int) -> None:
    """Progress nobody watches (library use, tests)."""


class _Closing:
    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class LineProgress(_Closing):
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


class BarProgress(_Closing):
    """One bar per phase, drawn by rich on the terminal."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        from rich import progress as bars
        from rich.console import Console

        self.bars = bars.Progress(bars.TextColumn("{task.description:>8}"), bars.BarColumn(),
                                  bars.MofNCompleteColumn(), bars.TextColumn("jobs"),
                                  bars.TimeElapsedColumn(), console=Console(file=stream))
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
