"""An LM's local queues: how many attempts wait at each node's worker, and how they take the
node's resources when they start (docs/local-queues.md).

The LM (common/lm.py) keeps a `NodeQueueBook` when `[policies.local_queues] depth` is above 0,
and opens one of depth 0 if a worker's own queue holds an attempt anyway. A queued attempt
holds no resources at the LM until its worker reports its start. Meanwhile the LM starts
nothing else on its node at once, and shows the node with no free resources, so what the
node's running tasks free goes to its queue in the worker's order. While fewer than `depth`
attempts wait there, the node shows room in its queue.

A worker starts a queued attempt only in what its own running tasks freed, and the LM hears
of those ends and of the start from that worker's reports, in order. When a start overtakes
the end that made room for it anyway (a harness reorders, a batch is retried), the attempt
waits here for that room (`awaiting_room`) and takes it when the end comes. Either way the
LM's truth never exceeds a node's capacity.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bitarray import bitarray, frozenbitarray

from common.errors import InvariantViolated
from common.reasons import Reason

if TYPE_CHECKING:
    from collections.abc import Iterable

    from common.cluster import ClusterTopology, JournaledState
    from common.lm_attempts import LMAttemptBook, RunningAttempt
    from common.resources import Resources


class NodeQueueBook:
    """The attempts waiting in each node's local queue, as the LM counts them.

    It changes the LM's free resources (`state`) and the attempts' `queued` flag (through
    `attempts`) only as the rules above say; the LM tells it what happens to queued attempts.
    """

    def __init__(self, topology: ClusterTopology, state: JournaledState,
                 attempts: LMAttemptBook, depth: int) -> None:
        self.topology = topology
        self.state = state
        self.attempts = attempts
        self.depth = depth
        size = len(topology)
        self.counts = [0] * size  # attempts waiting in each node's local queue
        self.queuing: set[int] = set()  # the nodes with any
        self.room = bitarray(size)  # the nodes whose queue has room (depth > 0)
        self.room.setall(depth > 0)
        self._no_room = frozenbitarray(size)
        # queued attempts whose start was reported before the end that made room for them
        # (reports of one worker may reorder on the way): they take it when it comes
        self.awaiting_room: dict[int, list[RunningAttempt]] = {}

    def verdict(self, i: int, demand: Resources) -> Reason:
        """Whether an item of node i's own GM that cannot start there now may wait in its
        queue: QUEUED, or why not."""
        if not self.depth:
            return Reason.STALE_VIEW  # no queues here (a book opened for a worker's own queue)
        if self.counts[i] >= self.depth:
            return Reason.QUEUE_FULL
        if not (demand.cpu_m <= self.topology.cap_cpu[i]
                and demand.mem_mib <= self.topology.cap_mem[i]):
            return Reason.STALE_VIEW  # could never start there (a GM's view has capacities)
        return Reason.QUEUED

    # -- what happens to queued attempts -------------------------------------------------------

    def enqueue(self, i: int) -> None:
        """An attempt joins node i's queue: launched there, adopted queued, or suspended (past
        the depth, maybe: it was accepted before)."""
        count = self.counts[i] = self.counts[i] + 1
        if count == 1:
            self.queuing.add(i)
            self.state.journal.append(i)  # its shown free resources change
        if count >= self.depth:
            self.room[i] = 0

    def _dequeue(self, i: int) -> None:
        count = self.counts[i] = self.counts[i] - 1
        if count == 0:
            self.queuing.discard(i)
            self.state.journal.append(i)
        if count < self.depth:
            self.room[i] = 1

    def started(self, attempt: RunningAttempt) -> bool:
        """A queued attempt started: it takes its resources now (True). Its worker started it
        in what its running tasks freed; if the LM has not yet heard those ends (reports
        reordered), it takes them when they come (`freed`)."""
        i = attempt.node_index
        waiting = self.awaiting_room.get(i)
        if waiting and attempt in waiting:
            return False  # its start was reported before, and waits for room already
        demand = attempt.placement.task.demand
        if self.state.fits(i, demand.cpu_m, demand.mem_mib) and i not in self.awaiting_room:
            self._take(attempt)
            return True
        self.awaiting_room.setdefault(i, []).append(attempt)
        return False

    def unstarted(self, attempt: RunningAttempt) -> bool:
        """Its worker suspended it: if its start still waits for room, it waits no more (True);
        otherwise it held resources, and the LM gives them back (`requeue`)."""
        waiting = self.awaiting_room.get(attempt.node_index)
        if waiting and attempt in waiting:
            waiting.remove(attempt)
            return True
        return False

    def requeue(self, attempt: RunningAttempt) -> None:
        """A started attempt went back to its node's queue (suspended): what it held goes to
        the starts waiting for it first."""
        i = attempt.node_index
        demand = attempt.placement.task.demand
        self.state.give(i, demand.cpu_m, demand.mem_mib)
        self.enqueue(i)
        self.attempts.set_queued(attempt, True)
        self.freed(i)

    def ended(self, attempt: RunningAttempt) -> None:
        """The attempt ended: a queued one (it never held resources, or gave them back when
        suspended) leaves its queue; a started one's go back, to the starts waiting first."""
        i = attempt.node_index
        if attempt.queued:
            self._dequeue(i)
            waiting = self.awaiting_room.get(i)
            if waiting and attempt in waiting:
                waiting.remove(attempt)
        else:
            demand = attempt.placement.task.demand
            self.state.give(i, demand.cpu_m, demand.mem_mib)
            self.freed(i)

    def freed(self, i: int) -> None:
        """Resources came back on node i: started attempts waiting for them take them."""
        waiting = self.awaiting_room.pop(i, None)
        while waiting:
            attempt = waiting[0]
            demand = attempt.placement.task.demand
            if not self.state.fits(i, demand.cpu_m, demand.mem_mib):
                self.awaiting_room[i] = waiting
                return
            waiting.pop(0)
            self._take(attempt)

    def _take(self, attempt: RunningAttempt) -> None:
        i = attempt.node_index
        demand = attempt.placement.task.demand
        self._dequeue(i)
        self.state.take(i, demand.cpu_m, demand.mem_mib)
        self.attempts.set_queued(attempt, False)

    # -- what GMs are shown ------------------------------------------------------------------

    def shown_free(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Free resources as GMs see them: none on a node with queued attempts."""
        if not self.queuing:
            return tuple(self.state.free_cpu), tuple(self.state.free_mem)
        free_cpu, free_mem = list(self.state.free_cpu), list(self.state.free_mem)
        for i in self.queuing:
            free_cpu[i] = free_mem[i] = 0
        return tuple(free_cpu), tuple(free_mem)

    def shown_room(self, accepting: bool) -> frozenbitarray | None:
        """The nodes whose queue has room, as GMs see them: none while the LM takes no work;
        None without queues."""
        if not self.depth:
            return None
        return frozenbitarray(self.room & self.state.up) if accepting else self._no_room

    # -- invariants ----------------------------------------------------------------------------

    def validate(self, running: Iterable[RunningAttempt]) -> None:
        """The counts are the queued attempts on each node; room where fewer than `depth`."""
        lm = self.topology.lm
        queued = [0] * len(self.topology)
        for attempt in running:
            if attempt.queued:
                queued[attempt.node_index] += 1
        if queued != self.counts or self.queuing != {i for i, n in enumerate(queued) if n}:
            raise InvariantViolated(f"{lm}: queued counts drifted")
        if self.depth and any(self.room[i] != (n < self.depth) for i, n in enumerate(queued)):
            raise InvariantViolated(f"{lm}: queue room drifted")
