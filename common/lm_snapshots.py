"""What an LM shows the GMs: the snapshots its replies and heartbeats carry.

A snapshot shows the truth as GMs should plan on it, which is not always the truth itself:

- a node with queued attempts shows no free resources: what it frees goes to its local queue
  (common/lm_queues.py);
- a backlogged LM (its task events cannot leave) shows every node down, so that GMs stop
  asking; one that takes no work (backlogged or recovering) shows no queue room.

With `report_ends`, an LM also publishes its full snapshot after every step that ended an
attempt, as the published Megha simulator's LM reports each task's end to the GMs at once
(`[timing] report_ends`); otherwise a GM learns of the room an end freed at the next
heartbeat.

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
    from common.cluster import ChangeMark, ClusterTopology, JournaledState
    from common.lm_attempts import LMAttemptBook
    from common.lm_queues import NodeQueueBook


class SnapshotMaker:
    """The snapshots of one LM. `queues` is its local-queue book (None: no queues),
    `backlogged` and `accepting` whether it is backlogged, and takes work, now."""

    def __init__(self, topology: ClusterTopology, state: JournaledState,
                 attempts: LMAttemptBook, epoch: int, interval: float, now: float,
                 keepalive: float | None = None, report_ends: bool = False) -> None:
        self.topology = topology
        self.state = state
        self.attempts = attempts
        self.epoch = epoch
        self.interval = interval  # between heartbeats
        self.next_beat_at = now
        self.keepalive = keepalive
        self.seq = 0
        self._full: LMSnapshot | None = None
        self._none_up = frozenbitarray(len(topology))
        # the state's journal mark at the last snapshot, and that snapshot's copies of the
        # shown free resources and liveness (`_shown`)
        self._copied_at: ChangeMark | None = None
        self._copies: tuple[tuple[int, ...], tuple[int, ...], frozenbitarray] | None = None
        self._last_heartbeat: tuple[LMSnapshot, float] | None = None  # published, and when
        self.report_ends = report_ends
        self.ends_unreported = False  # with report_ends: an attempt ended in this step

    def beat_due(self, now: float) -> bool:
        """Whether a heartbeat is due now: on the interval's own beat, not a tick late each
        time; after a stall, anew."""
        if now < self.next_beat_at:
            return False
        self.next_beat_at += self.interval
        if self.next_beat_at <= now:
            self.next_beat_at = now + self.interval
        return True

    @property
    def shown(self) -> bool:
        """Whether the last heartbeat published shows the state now: one due would repeat it,
        until something changes or a reply takes a `seq`."""
        last, full = self._last_heartbeat, self._full
        return full is not None and last is not None and last[0] is full and full.seq == self.seq

    def changed(self, *, ended: bool = False) -> None:
        """Something a snapshot shows changed: the next full one is made anew. `ended`: an
        attempt ended, which `report_ends` publishes at the end of the step."""
        self._full = None
        if ended and self.report_ends:
            self.ends_unreported = True

    def reply(self, queues: NodeQueueBook | None, backlogged: bool,
              accepting: bool) -> LMSnapshot:
        """The state a reply carries: resources and liveness, not the running list."""
        self.seq += 1
        changes, (free_cpu, free_mem, up) = self._shown(queues)
        return LMSnapshot(self.topology.lm, self.epoch, self.seq, self.topology, free_cpu,
                          free_mem, self._none_up if backlogged else up, None, changes,
                          queue_room=self._shown_room(queues, accepting))

    def full(self, queues: NodeQueueBook | None, backlogged: bool,
             accepting: bool) -> LMSnapshot:
        """The full partition state; the same object while nothing changes."""
        if self._full is None or self._full.seq != self.seq:
            self.seq += 1
            changes, (free_cpu, free_mem, up) = self._shown(queues)
            self._full = LMSnapshot(
                lm=self.topology.lm,
                epoch=self.epoch,
                seq=self.seq,
                topology=self.topology,
                free_cpu=free_cpu,
                free_mem=free_mem,
                up=self._none_up if backlogged else up,
                running=tuple(self.attempts.infos.values()),
                changes=changes,
                queue_room=self._shown_room(queues, accepting),
            )
        return self._full

    def heartbeat(self, now: float, queues: NodeQueueBook | None, backlogged: bool,
                  accepting: bool) -> LMSnapshot | None:
        """The full snapshot a heartbeat due now publishes; None: it would repeat the last
        one within `keepalive`."""
        self.ends_unreported = False
        snapshot = self.full(queues, backlogged, accepting)  # the same object while unchanged
        last = self._last_heartbeat
        if (last is None or snapshot is not last[0] or self.keepalive is None
                or now - last[1] >= self.keepalive):
            self._last_heartbeat = (snapshot, now)
            return snapshot
        return None

    def _shown(self, queues: NodeQueueBook | None) -> tuple[
            ChangeMark, tuple[tuple[int, ...], tuple[int, ...], frozenbitarray]]:
        """The journal's mark now, and the free resources shown and the nodes up, as copies
        made anew only when the journal noted a change since the last snapshot's (every
        change of free resources, liveness or of the nodes with queued attempts is noted
        there, and `mark` is then another). A heartbeat after a reply that changed nothing
        since shows the reply's own copies: over a third of the heartbeats' copies, each of
        every node, were of an unchanged state (`megha simulate`, 10,000 nodes)."""
        changes = self.state.mark()
        if changes is not self._copied_at:
            state = self.state
            if queues is None:
                free_cpu, free_mem = tuple(state.free_cpu), tuple(state.free_mem)
            else:
                free_cpu, free_mem = queues.shown_free()
            self._copies = (free_cpu, free_mem, frozenbitarray(state.up))
            self._copied_at = changes
        return changes, self._copies

    @staticmethod
    def _shown_room(queues: NodeQueueBook | None, accepting: bool) -> frozenbitarray | None:
        return None if queues is None else queues.shown_room(accepting)
