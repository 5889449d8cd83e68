"""What history-based predictors (3Sigma, Point-Est) know: the mean task runtime of recent
finished jobs, per value of each feature a job can be recognised by, and how each turns that
history into one estimate.

A job's features are its name (a recurring job's template, where the workload has one),
its user queue, and its width rounded down to a power of two. As 3Sigma does, a new job is
predicted from the feature whose recent jobs varied least (the lowest coefficient of
variation of their mean task runtimes); a feature value needs `min_history` finished jobs to
be used. "Recent" is the last `window` jobs per value, our stand-in for the paper's history
window of days (the traces here span hours).

The history starts with the jobs it is trained on (`RuntimeHistoryOptions.training`: the
SLearn paper trains 3Sigma on the first half of each trace and measures on the second), and
goes on learning from every job that finishes.

Workloads without names (the Sparrow/Eagle traces) fall back on user and width; Alibaba's job
names are unique per job, so there too.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import fmean, median, pstdev

from common.errors import InvalidInput

Feature = tuple[str, object]


def features(name: str | None, user: str, width: int) -> list[Feature]:
    found: list[Feature] = [("user", user), ("width", 1 << (width.bit_length() - 1))]
    if name:
        found.insert(0, ("name", name))
    return found


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """A job a history predictor knows before the first arrival: what it would have recorded
    had it seen the job finish."""

    name: str | None
    user: str
    width: int
    mean_task_runtime: float  # seconds

    def __post_init__(self) -> None:
        if not (isinstance(self.width, int) and self.width >= 1):
            raise InvalidInput("training.width", f"must be an integer >= 1, got {self.width!r}")
        runtime = self.mean_task_runtime
        if not (isinstance(runtime, int | float) and math.isfinite(runtime) and runtime >= 0):
            raise InvalidInput("training.mean_task_runtime",
                               f"must be a finite number >= 0, got {runtime!r}")


class RuntimeHistory:
    def __init__(self, window: int = 20, min_history: int = 2,
                 trained: Iterable[FinishedJob] = ()) -> None:
        self.window = window
        self.min_history = min_history
        self._seen: dict[Feature, deque[float]] = {}
        for job in trained:  # in the order they finished: the window keeps the latest
            self.record(features(job.name, job.user, job.width), job.mean_task_runtime)

    def samples(self, keys: list[Feature]) -> list[float] | None:
        """The recent mean task runtimes of the least varying of `keys` with enough history;
        None for a job nothing like any seen so far."""
        best, best_cov = None, float("inf")
        for key in keys:
            seen = self._seen.get(key)
            if seen is None or len(seen) < self.min_history:
                continue
            mean = fmean(seen)
            cov = pstdev(seen) / mean if mean > 0 else 0.0
            if cov < best_cov:
                best, best_cov = seen, cov
        return None if best is None else list(best)

    def record(self, keys: list[Feature], mean_task_runtime: float) -> None:
        for key in keys:
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = deque(maxlen=self.window)
            seen.append(mean_task_runtime)


def utility_estimate(samples: list[float]) -> float:
    """3Sigma's estimate as the SLearn paper sets it up: a job's value is its expected
    utility over its history's distribution of runtimes, with a utility inversely
    proportional to the square of the runtime (the paper's choice for mean JCT); the
    estimate is the runtime of that utility, (mean of t^-2)^(-1/2). Ranking jobs by it,
    shortest first, ranks them by expected utility, highest first. It leans towards the
    history's short runs: a family that sometimes runs short is placed as short."""
    if min(samples) <= 0:
        return 0.0  # a zero runtime has unbounded utility: the limit of the formula
    return fmean(1.0 / (t * t) for t in samples) ** -0.5


def history_mean(samples: list[float]) -> float:
    """The history's mean: the expected size, what this project's 3Sigma used before it
    followed the paper (the `3sigma-mean` variant)."""
    return fmean(samples)


def point(samples: list[float]) -> float:
    """Point-Est: a single point of the history, its median."""
    return median(samples)
