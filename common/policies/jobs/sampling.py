"""SLearn's adaptive sampling ratio: which share of a wide job's tasks run first as pilots.

More pilots give a better estimate but spend more of the cluster on jobs whose size is not
known yet, and the best ratio differs between workloads. So the ratio is learnt online
(the SLearn paper's Figure 4): each ratio keeps a score, the mean normalized JCT (JCT over
the job's longest task) of the last `window` (T) finished jobs that used it.

- The first T jobs use 3%, the next T 2%, the next T 4%.
- Then each new job uses the ratio with the lowest score, except that when that is 2% and it
  beats 3% by more than 10%, the job tries 1% (going down paid, so try further down); and
  when it is 4% and beats 3% by more than 10%, the job tries 5%.

Ratios are fractions here (0.03, not 3).
"""

from __future__ import annotations

from collections import deque

WARM_UP = (0.03, 0.02, 0.04)  # the ratios of the first three windows of jobs
BELOW, MIDDLE, ABOVE = 0.02, 0.03, 0.04
FURTHER = {BELOW: 0.01, ABOVE: 0.05}  # tried when leaving 3% for a neighbour pays
MARGIN = 1.1  # "pays": the neighbour's score is more than 10% lower than 3%'s


class AdaptiveSampling:
    def __init__(self, window: int = 100) -> None:
        self.window = window
        self.assigned = 0  # jobs given a ratio so far
        self._recent: dict[float, deque[float]] = {}

    def scores(self) -> dict[float, float]:
        """Each tried ratio's mean normalized JCT over its last `window` finished jobs."""
        return {ratio: sum(jcts) / len(jcts) for ratio, jcts in self._recent.items() if jcts}

    def next_ratio(self) -> float:
        """The ratio for a new wide job."""
        warm = self.assigned // self.window
        self.assigned += 1
        if warm < len(WARM_UP):
            return WARM_UP[warm]
        scores = self.scores()
        if not scores:
            return MIDDLE  # none of the warm-up jobs has finished yet
        best = min(sorted(scores), key=scores.__getitem__)
        middle = scores.get(MIDDLE)
        if best in FURTHER and middle is not None and MARGIN * scores[best] < middle:
            return FURTHER[best]
        return best

    def record(self, ratio: float, normalized_jct: float) -> None:
        """A job that used `ratio` finished."""
        recent = self._recent.get(ratio)
        if recent is None:
            recent = self._recent[ratio] = deque(maxlen=self.window)
        recent.append(normalized_jct)
