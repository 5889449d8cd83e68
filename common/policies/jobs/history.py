"""What history-based predictors (3Sigma, Point-Est) know: the mean task runtime of recent
finished jobs, per value of each feature a job can be recognised by.

A job's features are its name (a recurring job's template, where the workload has one),
its user queue, and its width rounded down to a power of two. As 3Sigma does, a new job is
predicted from the feature whose recent jobs varied least (the lowest coefficient of
variation of their mean task runtimes); a feature value needs `min_history` finished jobs to
be used. "Recent" is the last `window` jobs per value, our stand-in for the paper's history
window of days (the traces here span hours).

Workloads without names (the Sparrow/Eagle traces) fall back on user and width; Alibaba's job
names are unique per job, so there too.
"""

from __future__ import annotations

from collections import deque
from statistics import fmean, median, pstdev

Feature = tuple[str, object]


def features(name: str | None, user: str, width: int) -> list[Feature]:
    found: list[Feature] = [("user", user), ("width", 1 << (width.bit_length() - 1))]
    if name:
        found.insert(0, ("name", name))
    return found


class RuntimeHistory:
    def __init__(self, window: int = 20, min_history: int = 2) -> None:
        self.window = window
        self.min_history = min_history
        self._seen: dict[Feature, deque[float]] = {}

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


def expected(samples: list[float]) -> float:
    """3Sigma's estimate: the one that minimises the expected cost over the whole history.
    For ordering jobs to minimise mean completion time under uncertain sizes that is the
    expected size (ordering by expected processing time is optimal on one machine), so the
    history's mean."""
    return fmean(samples)


def point(samples: list[float]) -> float:
    """Point-Est: a single point of the history, its median."""
    return median(samples)
