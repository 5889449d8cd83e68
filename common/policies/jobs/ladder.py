"""The priority-queue ladder every size-aware job policy shares, and the weighted sharing of a
GM's resources across its rungs.

A job's *level* is the queue it sits in: 0 is the highest priority. Level q holds the jobs
whose (estimated) total work, in task-seconds, is below `first_limit * growth**q`; the last
level has no bound. Within a level jobs are served in arrival order (FIFO). Across levels the
GM does not use strict priority, which starves long jobs: it shares its resources by weight,
level q having weight `weight_decay**-q`, and offers each free resource to the level with
the least running tasks per unit of weight among those with work waiting (`LevelShares`). A
level with nothing running therefore always gets the next resource it can use: no level
starves, and a busy top level still leaves the one below about a tenth as many tasks.

Defaults are the SLearn paper's: 10 levels, the first bounded at 1,000 s (10^6 ms), bounds
and weights changing by a factor of 10 from one level to the next.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.errors import InvalidInput

THIN_LIMIT = 3  # jobs of fewer tasks are "thin" (the paper's thinLimit): also how logs bin JCT


@dataclass(frozen=True, slots=True)
class QueueLadder:
    levels: int = 10
    first_limit: float = 1000.0  # task-seconds: the upper bound of level 0
    growth: float = 10.0  # each bound is this times the one before
    weight_decay: float = 10.0  # each level's weight is the one before divided by this
    limits: tuple[float, ...] = field(init=False)
    weights: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.levels, int) and 1 <= self.levels <= 30):
            raise InvalidInput("levels", f"must be an integer from 1 to 30, got {self.levels!r}")
        for name in ("first_limit", "growth", "weight_decay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > (1 if name != "first_limit" else 0)):
                bound = "> 0" if name == "first_limit" else "> 1"
                raise InvalidInput(name, f"must be finite and {bound}, got {value!r}")
        object.__setattr__(self, "limits", tuple(
            self.first_limit * self.growth ** q for q in range(self.levels - 1)))
        object.__setattr__(self, "weights", tuple(
            self.weight_decay ** -q for q in range(self.levels)))

    @property
    def sampling_level(self) -> int:
        """SLearn's sampling queue: the second highest (the highest when there is one)."""
        return min(1, self.levels - 1)

    def level_of(self, work: float) -> int:
        """The level a job of `work` task-seconds belongs to (a bound belongs to the next)."""
        return bisect_right(self.limits, work)


class LevelShares:
    """Tasks a GM runs per level (placing, launched or running), and which level the next
    free resource is offered to."""

    __slots__ = ("weights", "running")

    def __init__(self, ladder: QueueLadder) -> None:
        self.weights = ladder.weights
        self.running = [0] * ladder.levels

    def pick(self, levels: Iterable[int]) -> int:
        """Of `levels` (those with work waiting), the one furthest below its weighted share:
        the fewest running tasks per unit of weight; the higher level on a tie."""
        running, weights = self.running, self.weights
        return min(levels, key=lambda level: (running[level] / weights[level], level))

    def occupy(self, level: int, tasks: int) -> None:
        self.running[level] += tasks

    def move(self, old: int, new: int, tasks: int) -> None:
        """A job with `tasks` running changed level."""
        self.running[old] -= tasks
        self.running[new] += tasks
