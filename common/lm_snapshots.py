"""What an LM shows the GMs: the snapshots its replies and heartbeats carry.

A snapshot shows the truth as GMs should plan on it, which is not always the truth itself:

- a node with queued attempts shows no free resources: what it frees goes to its local queue
  (common/lm_queues.py);
- a backlogged LM (its task events cannot leave) shows every node down, so that GMs stop
  asking; one that takes no work (backlogged or recovering) shows no queue room.

Each snapshot has the next `seq`. The full one (a heartbeat's, with the running list) is made
again only when something it shows changed (the LM says so: `changed`) or a reply took a
`seq` since, so an idle LM's heartbeats cost nothing; with a `keepalive`, a heartbeat that
would repeat the last one is published only that long after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bitarray import frozenbitarray

from common.cluster import LMSnapshot

if TYPE_CHECKING:
    from common.cluster import ClusterTopology, JournaledState
    from common.lm_attempts import LMAttemptBook
    from common.lm_queues import NodeQueueBook


class SnapshotMaker:
    """The snapshots of one LM. `queues` is its local-queue book (None: no queues),
    `backlogged` and `accepting` whether it is backlogged, and takes work, now."""

    def __init__(self, topology: ClusterTopology, state: JournaledState,
                 attempts: LMAttemptBook, epoch: int, keepalive: float | None = None) -> None:
        self.topology = topology
        self.state = state
        self.attempts = attempts
        self.epoch = epoch
        self.keepalive = keepalive
        self.seq = 0
        self._full: LMSnapshot | None = None
        self._none_up = frozenbitarray(len(topology))
        self._last_heartbeat: tuple[LMSnapshot, float] | None = None  # published, and when

    def changed(self) -> None:
        """Something a snapshot shows changed: the next full one is made anew."""
        self._full = None

    def reply(self, queues: NodeQueueBook | None, backlogged: bool,
              accepting: bool) -> LMSnapshot:
        """The state a reply carries: resources and liveness, not the running list."""
        self.seq += 1
        free_cpu, free_mem = self._shown_free(queues)
        return LMSnapshot(self.topology.lm, self.epoch, self.seq, self.topology, free_cpu,
                          free_mem, self._shown_up(backlogged), None, self.state.mark(),
                          queue_room=self._shown_room(queues, accepting))

    def full(self, queues: NodeQueueBook | None, backlogged: bool,
             accepting: bool) -> LMSnapshot:
        """The full partition state; the same object while nothing changes."""
        if self._full is None or self._full.seq != self.seq:
            self.seq += 1
            free_cpu, free_mem = self._shown_free(queues)
            self._full = LMSnapshot(
                lm=self.topology.lm,
                epoch=self.epoch,
                seq=self.seq,
                topology=self.topology,
                free_cpu=free_cpu,
                free_mem=free_mem,
                up=self._shown_up(backlogged),
                running=tuple(self.attempts.infos.values()),
                changes=self.state.mark(),
                attempts_by_gm=self.attempts.ids_of_gms(),
                queue_room=self._shown_room(queues, accepting),
            )
        return self._full

    def heartbeat(self, now: float, queues: NodeQueueBook | None, backlogged: bool,
                  accepting: bool) -> LMSnapshot | None:
        """The full snapshot a heartbeat due now publishes; None: it would repeat the last
        one within `keepalive`."""
        snapshot = self.full(queues, backlogged, accepting)  # the same object while unchanged
        last = self._last_heartbeat
        if (last is None or snapshot is not last[0] or self.keepalive is None
                or now - last[1] >= self.keepalive):
            self._last_heartbeat = (snapshot, now)
            return snapshot
        return None

    def _shown_free(self, queues: NodeQueueBook | None
                    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        if queues is None:
            return tuple(self.state.free_cpu), tuple(self.state.free_mem)
        return queues.shown_free()

    def _shown_up(self, backlogged: bool) -> frozenbitarray:
        return self._none_up if backlogged else frozenbitarray(self.state.up)

    @staticmethod
    def _shown_room(queues: NodeQueueBook | None, accepting: bool) -> frozenbitarray | None:
        return None if queues is None else queues.shown_room(accepting)
