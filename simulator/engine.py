"""The discrete-event engine every simulated scheduler runs on: a virtual clock and a heap of
things to do at a time, plus the delay model of the network between services.

Entries are `(time, seq, action, argument)`: `seq` breaks ties in the order entries were
scheduled, so a run is a pure function of its inputs and seed.

Most entries of a federated run are messages one constant network delay away: scheduled in
time order, they need no heap. `at_fifo` keeps such entries in a FIFO lane beside the heap,
and `run` takes whichever lane's head comes first in (time, seq) order, so the order of the
steps is exactly that of one heap. Four in five of the 1.1 million steps of a 10,000-node run
skip the heap's O(log n) push and pop (benchmarks/bench_sim.py).

Same-instant entries coalesce (`at_fifo`): an entry for the time of the FIFO lane's last
entry, with nothing scheduled in between for that time, joins it, and the one step makes each
joined call in turn. With one constant delay, what the cores send in one instant arrives in
one instant: an LM's heartbeat to every GM, its task starts, the launches of a GM's pass
(issue 38). See `at_fifo` for why the order of the calls is exactly that of one heap.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import InvalidInput
from loadgen.distributions import Distribution, parse_distribution

DEFAULT_DELAY_S = 0.0005  # one way, as the Megha and Sparrow simulators used
# engine steps between garbage collections in `run`: at 1,000,000 the one collection of a
# 10,000-node run (benchmarks/bench_sim.py) found no garbage at all and took 1-2 s of 35
COLLECT_EVERY = 10_000_000


@dataclass(frozen=True, slots=True)
class DelayModel:
    """One-way network delay in seconds: a constant, or draws from a distribution."""

    distribution: Distribution

    @classmethod
    def parse(cls, text: str | None) -> DelayModel:
        if text is None:
            return cls(Distribution("const", (DEFAULT_DELAY_S,)))
        return cls(parse_distribution(text, "--delay"))

    def sampler(self, rng: random.Random) -> Callable[[], float]:
        if self.distribution.kind == "const":
            value = self.distribution.params[0]
            return lambda: value
        return lambda: self.distribution.sample(rng)

    def __str__(self) -> str:
        return str(self.distribution)


class Engine:
    """The clock and the agenda. `run` pops entries in time order and calls them."""

    def __init__(self, coalesce: bool = True) -> None:
        self.now = 0.0
        self.coalesce = coalesce  # whether `at_fifo` joins same-instant entries
        self._agenda: list[tuple[float, int, Callable, object]] = []  # a heap
        self._fifo: deque[tuple[float, int, Callable, object]] = deque()  # in (time, seq) order
        self._fifo_last = 0.0  # the time of the last entry put in `_fifo`
        # whether an entry for the time of the FIFO lane's last entry may join it (`at_fifo`)
        self._joinable = False
        self._tail_batch: list | None = None  # that entry's batch, once it has one
        self._seq = itertools.count(1)
        # the seqs of heap entries called off (`cancel`): skipped when they come up
        self._cancelled: set[int] = set()
        self.steps = 0
        self.stopped = False  # set by whoever knows the run is over

    def at(self, time: float, action: Callable[[object], None], argument: object = None) -> int:
        """Call `action(argument)` at `time`; returns the entry's seq, for `cancel`."""
        if time < self.now:
            raise InvalidInput("time", f"cannot schedule at {time} before now ({self.now})")
        if time == self._fifo_last:
            # it steps between the FIFO lane's last entry and anything that would join it
            self._joinable = False
        seq = next(self._seq)
        heapq.heappush(self._agenda, (time, seq, action, argument))
        return seq

    def cancel(self, seq: int) -> None:
        """Call off the entry `at` scheduled with this seq, if it has not come up: a timer
        whose cause went away (a killed task's end). It stays in the heap, and when it comes
        up it is skipped: no call, no step, the clock not moved. Before, such an entry stepped
        to an action that found nothing to do: 3,154 of a saturated run's steps (issue 38)."""
        self._cancelled.add(seq)

    def at_fifo(self, time: float, action: Callable[[object], None],
                argument: object = None) -> None:
        """`at`, for an entry usually no earlier than the last one given here (a message one
        constant delay away): it goes to the FIFO lane, or, if earlier, to the heap.

        An entry for the same time as the lane's last entry joins that entry instead, as long
        as no entry for that time has gone to the heap since: the step that takes the lane's
        last entry then calls each joined action on its argument, in the order they were
        given. That is exactly the order of one heap. Entries step in (time, seq) order, and
        seq is the order of scheduling; the joined entry, had it had a seq of its own, would
        have come after the last entry's and before that of any entry scheduled later.
        Between the two in that order could only be an entry scheduled in between for the
        same time: none went to the FIFO lane (the last entry is still its last) and none to
        the heap (`at` stops the joining). Anything scheduled later, while or after the last
        entry steps (a message to self, a timer, a zero delay), has a higher seq than the
        joined one, so it steps after it either way. The calls were adjacent steps, and still
        are, in the same order: nothing else can run between them, whatever the receivers,
        the delays or the processing times. Only the engine's step count changes; and if a
        call sets `stopped`, the rest of the batch goes back to the lane's head, where it
        stood, for a later `run` (`_run_batch`)."""
        if time == self._fifo_last and self._joinable and self._fifo:
            batch = self._tail_batch
            if batch is None:  # the second of a batch: the entry becomes a batch
                fifo = self._fifo
                _, seq, first_action, first = fifo[-1]
                batch = self._tail_batch = [seq, first_action, first, action, argument]
                fifo[-1] = (time, seq, self._run_batch, batch)
            else:
                batch += (action, argument)
            return
        if time < self._fifo_last:
            self.at(time, action, argument)
            return
        if time < self.now:
            raise InvalidInput("time", f"cannot schedule at {time} before now ({self.now})")
        self._fifo_last = time
        self._joinable, self._tail_batch = self.coalesce, None
        self._fifo.append((time, next(self._seq), action, argument))

    def _run_batch(self, batch: list) -> None:
        """One step of coalesced entries (`at_fifo`): [seq, action, argument, ...], in order."""
        for index in range(1, len(batch), 2):
            if index > 1 and self.stopped:  # the run stops where it would have: the rest
                # waits at the lane's head, where it stood
                self._fifo.appendleft((self.now, batch[0], self._run_batch,
                                       [batch[0], *batch[index:]]))
                if len(self._fifo) == 1:  # it is also the lane's last: nothing joins it
                    self._joinable = False
                return
            batch[index](batch[index + 1])

    def run(self, progress: Callable[[float], None] | None = None,
            progress_every: int = 50_000, collect_every: int = COLLECT_EVERY) -> None:
        """Step until an action sets `stopped`, or nothing is left to do.

        CPython's cyclic garbage collector is paused while stepping and run every
        `collect_every` steps instead. A run keeps millions of objects alive (agenda entries,
        task records, the analysis's per-attempt figures) and the collector's full passes
        traverse them all, again and again as the heap grows: 3 of a 26 s run at 10,000 nodes
        (benchmarks/bench_sim.py). What a run leaves as cyclic garbage (a finished job and
        its tasks) is small, so collecting it at intervals keeps memory bounded.
        """
        agenda, pop = self._agenda, heapq.heappop
        fifo, popleft = self._fifo, self._fifo.popleft
        cancelled = self._cancelled
        steps = self.steps
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            while not self.stopped:
                # the earlier of the two lanes' heads: their (time, seq) never tie
                if fifo and (not agenda or fifo[0] < agenda[0]):
                    time, _, action, argument = popleft()
                elif agenda:
                    time, seq, action, argument = pop(agenda)
                    if cancelled and seq in cancelled:
                        cancelled.remove(seq)
                        continue
                else:
                    break
                self.now = time
                action(argument)
                steps += 1
                if progress is not None and steps % progress_every == 0:
                    self.steps = steps
                    progress(self.now)
                if steps % collect_every == 0:
                    gc.collect()
        finally:
            self.steps = steps
            if was_enabled:
                gc.enable()

    @property
    def pending(self) -> int:
        """Entries still to step (those called off not counted)."""
        return len(self._agenda) - len(self._cancelled) + len(self._fifo)
