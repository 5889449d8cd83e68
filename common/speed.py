"""Machine service variability: how fast each machine works over time, as seeded processes.

A machine's *rate* is the work it does per unit of time (1 is nominal). Both models have a
long-run mean rate of 1, so variability slows nothing on average; what it costs is the spread,
which redundant copies can hedge (common/policies/copies.py). Rates are piecewise constant over
slots of one time unit, as the SRPT+R paper's simulations (its section 6) make decisions at the
start of each slot.

- `gamma`: each interval of `interval` slots draws the machine's rate from a Gamma
  distribution of shape `shape` and mean 1 (coefficient of variation 1/sqrt(shape)).
- `two-state`: the paper's model. A machine alternates available periods (AP) and unavailable
  ones (UP), each of a Gamma-distributed length; its rate is uniform in `ap_rate` during an AP
  and in `up_rate` during an UP; every rate is then divided by the long-run mean, making it 1.
  The paper's parameter values did not survive in our copy; ours (APs of mean 40 slots, UPs
  of mean 10, rates 0.5-1.5 and 0-0.2) are stated in the docs and chosen so that a machine
  spends about a fifth of its time nearly stopped, as the computational-grid traces the paper
  cites describe.

`SpeedModel.sample(machines, slots, seed)` gives the (slots x machines) array of rates; the
same seed gives the same rates, whatever the scheduler does with them. `NodeSpeed` is one
node's process in continuous time, for the worker agents of the federated cluster (the
federation file's `[variability]`): a task's wall runtime is the time its node takes to do its
nominal duration of work.
"""

from __future__ import annotations

import math
import random
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from functools import reduce
from itertools import accumulate
from operator import mul, sub
from typing import TYPE_CHECKING

from common.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class SpeedModel:
    kind: str = "two-state"  # "two-state", "gamma" or "constant"
    shape: float = 2.0  # gamma: the rate's shape
    interval: float = 10  # gamma: slots (seconds, for a node) a rate lasts
    ap_length: tuple[float, float] = (2.0, 20.0)  # two-state: AP length, Gamma (shape, scale)
    up_length: tuple[float, float] = (2.0, 5.0)  # UP length, Gamma (shape, scale)
    ap_rate: tuple[float, float] = (0.5, 1.5)  # uniform rate bounds in an AP
    up_rate: tuple[float, float] = (0.0, 0.2)  # ... and in an UP

    def __post_init__(self) -> None:
        if self.kind not in ("two-state", "gamma", "constant"):
            raise InvalidInput("speed", f'must be "two-state", "gamma" or "constant", got '
                                        f"{self.kind!r}")
        if not self.shape > 0:
            raise InvalidInput("speed.shape", f"must be > 0, got {self.shape}")
        if not self.interval > 0:
            raise InvalidInput("speed.interval", f"must be > 0, got {self.interval}")
        for name in ("ap_length", "up_length"):
            shape, scale = getattr(self, name)
            if not (shape > 0 and scale > 0):
                raise InvalidInput(f"speed.{name}", f"needs shape and scale > 0, got "
                                                    f"{(shape, scale)}")
        for name in ("ap_rate", "up_rate"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise InvalidInput(f"speed.{name}", f"needs 0 <= low <= high, got {(low, high)}")
        if self.kind == "two-state" and self.ap_rate[1] <= 0:
            raise InvalidInput("speed.ap_rate", "an available period must do some work")

    def describe(self) -> str:
        if self.kind == "gamma":
            return f"gamma rates (shape {self.shape:g}, every {self.interval:g} time units), mean 1"
        if self.kind == "constant":
            return "constant rate 1"
        return (f"two-state: available {self.ap_length[0] * self.ap_length[1]:g} time units at "
                f"{self.ap_rate[0]:g}-{self.ap_rate[1]:g}, unavailable "
                f"{self.up_length[0] * self.up_length[1]:g} at {self.up_rate[0]:g}-"
                f"{self.up_rate[1]:g}, normalized to mean 1")

    def mean_raw_rate(self) -> float:
        """The long-run mean of the two-state rates before normalizing."""
        ap = self.ap_length[0] * self.ap_length[1]
        up = self.up_length[0] * self.up_length[1]
        return (ap * sum(self.ap_rate) / 2 + up * sum(self.up_rate) / 2) / (ap + up)

    def sample(self, machines: int, slots: int, seed: int | list[int]) -> np.ndarray:
        """Rates of `machines` machines over `slots` slots: shape (slots, machines)."""
        import numpy as np  # the simulator's; the services' images carry no numpy

        rng = np.random.default_rng(seed)
        if self.kind == "constant":
            return np.ones((slots, machines))
        if self.kind == "gamma":
            interval = max(1, round(self.interval))
            intervals = -(-slots // interval)
            rates = rng.gamma(self.shape, 1.0 / self.shape, size=(intervals, machines))
            return np.repeat(rates, interval, axis=0)[:slots]
        rates = np.empty((slots, machines))
        for machine in range(machines):
            rates[:, machine] = self._two_state(rng, slots)
        return rates / self.mean_raw_rate()

    def _two_state(self, rng: np.random.Generator, slots: int) -> np.ndarray:
        """One machine's rates: alternating periods, drawn a batch of cycles at a time."""
        import numpy as np

        cycle = self.ap_length[0] * self.ap_length[1] + self.up_length[0] * self.up_length[1]
        pieces, filled = [], 0
        available_first = rng.random() < self._ap_share()
        while filled < slots:
            cycles = int((slots - filled) / cycle * 1.3) + 4
            ap = rng.gamma(*self.ap_length, size=cycles)
            up = rng.gamma(*self.up_length, size=cycles)
            lengths = np.empty(2 * cycles)
            rates = np.empty(2 * cycles)
            first, second = (0, 1) if available_first else (1, 0)
            lengths[first::2], lengths[second::2] = ap, up
            rates[first::2] = rng.uniform(*self.ap_rate, size=cycles)
            rates[second::2] = rng.uniform(*self.up_rate, size=cycles)
            counts = np.maximum(1, np.rint(lengths)).astype(np.int64)
            pieces.append(np.repeat(rates, counts))
            filled += int(counts.sum())
        return np.concatenate(pieces)[:slots]

    def _ap_share(self) -> float:
        ap = self.ap_length[0] * self.ap_length[1]
        return ap / (ap + self.up_length[0] * self.up_length[1])


DRAWN_AT_ONCE = 16  # a node's periods drawn in one go (`NodeSpeed._draw`), even


class NodeSpeed:
    """One node's rate over continuous time (seconds in the federated cluster), drawn period
    by period as time goes on, from its own seeded stream: `time_to_do(start, work)` is how
    long `work` seconds of nominal work take when started at `start`, and `work_until(t)` the
    work the node has done from its origin (the first time it was asked about) to `t`, so the
    work a run did between two instants is a difference of two readings (a worker's
    checkpoint: exact, never extrapolated). Times must not go back before the latest start (a
    node's clock only moves forward); periods before it are dropped.

    Periods are five parallel arrays: a period's start, end, rate, the work done from the
    origin to its start (`_done`, a running total) and the work it holds (`_works`). A long
    task on a node with short periods spans hundreds of them: `time_to_do` finds its last one
    by binary search on `_done` instead of walking there."""

    __slots__ = ("model", "rng", "available", "norm", "_ends", "_rates", "_starts", "_done",
                 "_works", "_first", "_origin")

    def __init__(self, model: SpeedModel, seed: str) -> None:
        self.model = model
        self.rng = random.Random(seed)  # a str seed hashes the same in every process
        self.norm = model.mean_raw_rate() if model.kind == "two-state" else 1.0
        self.available = self.rng.random() < model._ap_share()
        # arrays of doubles, 8 bytes a period each where a list holds 32 (pointer and float
        # object): a simulation keeps every node's periods over its span, millions of them
        self._ends = array("d")
        self._rates = array("d")
        self._starts = array("d")
        self._done = array("d")  # the work done from the origin to each period's start
        # the work each period holds, rate * (end - start): what a run that crosses the whole
        # period subtracts from the work it has left, the same product `_walk` computes
        self._works = array("d")
        self._first = 0  # periods before this index ended before the latest start
        # where its first period begins: the first time it is asked about. A service's clock
        # is the wall clock (1.7e9 s), and periods drawn from 0 would never reach it
        self._origin: float | None = None

    def _draw(self) -> None:
        """The next periods: `DRAWN_AT_ONCE` of them (the one endless period of a constant
        model). A simulation draws every node's periods over its whole span, millions, so
        only the random draws go one by one; the running sums are C-level `accumulate`s,
        the same additions in the same order as one period at a time. Drawing ahead changes
        nothing: the node's stream is its own and gives the same periods in the same order
        whenever they are drawn."""
        model, rng = self.model, self.rng
        if self._ends:
            start, total = self._ends[-1], self._done[-1] + self._works[-1]
        else:
            start, total = self._origin, 0.0
        if model.kind == "constant":
            lengths, rates = [math.inf], [1.0]
        elif model.kind == "gamma":
            gamma, shape, scale = rng.gammavariate, model.shape, 1 / model.shape
            lengths = [float(model.interval)] * DRAWN_AT_ONCE
            rates = [gamma(shape, scale) for _ in range(DRAWN_AT_ONCE)]
        else:
            lengths, rates = [], []
            gamma, uniform, norm = rng.gammavariate, rng.uniform, self.norm
            # pairs of periods, the node's state first, then the other: an even count ends
            # the batch in the state it began, the next batch's first
            now, then = ((model.ap_length, model.ap_rate), (model.up_length, model.up_rate))
            if not self.available:
                now, then = then, now
            ((shape1, scale1), (low1, high1)), ((shape2, scale2), (low2, high2)) = now, then
            for _ in range(DRAWN_AT_ONCE // 2):
                lengths.append(max(1e-3, gamma(shape1, scale1)))
                rates.append(uniform(low1, high1) / norm)
                lengths.append(max(1e-3, gamma(shape2, scale2)))
                rates.append(uniform(low2, high2) / norm)
        ends = list(accumulate(lengths, initial=start))
        works = list(map(mul, rates, map(sub, ends[1:], ends)))
        self._starts.extend(ends[:-1])
        self._ends.extend(ends[1:])
        self._rates.extend(rates)
        self._works.extend(works)
        self._done.extend(accumulate(works[:-1], initial=total))

    def _period_of(self, t: float) -> int:
        """The index of the period `t` falls in, drawing periods as needed."""
        ends = self._ends
        if self._origin is None:
            self._origin = t
        # the first period from `_first` on that ends after `t` (ends only grow)
        i = bisect_right(ends, t, self._first)
        while i == len(ends):
            self._draw()
            i = bisect_right(ends, t, i)
        return i

    def work_until(self, t: float) -> float:
        """The work done from its origin to `t` (`t` not before the latest start)."""
        if self.model.kind == "constant":
            return t
        i = self._period_of(t)
        return self._done[i] + self._rates[i] * (t - self._starts[i])

    def time_to_do(self, start: float, work: float) -> float:
        i = self._period_of(start)
        if i > 1000:  # forget the periods before this start now and then
            del self._ends[:i], self._rates[:i], self._starts[:i], self._done[:i]
            del self._works[:i]
            i = 0
        self._first = i
        rate, end = self._rates[i], self._ends[i]
        if rate > 0 and work <= rate * (end - start):
            return start + work / rate - start
        left = work - rate * (end - start)  # what is left after the start's own period
        if left > 0:
            i, left = self._skip(i, start, work, left)
        return self._walk(i + 1, left, start)

    def _skip(self, i: int, start: float, work: float, left: float) -> tuple[int, float]:
        """Jump over the periods a run started at `start` in period `i`, with `left` of its
        `work` left at that period's end, crosses whole: (the last period jumped, what is
        left after it), as `_walk` would have reached them, to the bit.

        The running totals find the period where the work would be done (binary search).
        They round differently from a walk's subtractions, so they only choose where to land,
        a little short of that period; what is left there is then the walk's own sequence of
        subtractions, done by `reduce` over the periods' works. That walk would have stopped
        before landing only if its `left` had reached 0 on the way (crossing period m leaves
        `left - works[m]`, which is <= 0 exactly when `left <= works[m]`, its test), and
        `left` never grows: a positive `left` at the landing proves it ran on."""
        done, works = self._done, self._works
        target = done[i] + self._rates[i] * (start - self._starts[i]) + work
        while done[-1] + works[-1] < target:  # the periods the work reaches, drawn
            self._draw()
        # land short of the period the totals name by far more than their rounding error
        land = bisect_right(done, target - 1e-9 * abs(target), i + 1) - 1
        if land <= i + 1:
            return i, left
        landed = reduce(sub, works[i + 1:land], left)
        if landed <= 0:  # the totals' rounding misled it: no jump (never seen)
            return i, left
        return land - 1, landed

    def _walk(self, i: int, left: float, start: float) -> float:
        """From the start of period `i` with `left` work to do: the time from `start` to when
        it is done, period by period."""
        ends, rates = self._ends, self._rates
        t = ends[i - 1]
        while True:
            if i == len(ends):
                self._draw()
            rate, end = rates[i], ends[i]
            if rate > 0 and left <= rate * (end - t):
                return t + left / rate - start
            left -= rate * (end - t)
            t = end
            i += 1
