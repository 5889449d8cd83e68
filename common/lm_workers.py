"""An LM's watch over its workers: which nodes each hosts, when each was last heard from,
whether its nodes are up, how long an attempt may go unlisted by its worker, and the recovery
of a restarted LM.

A worker silent for longer than `timeout` has its nodes marked down; its next heartbeat marks
them up again. A restarted LM refuses launches until every worker has reported what it runs
(or `timeout` passes): it cannot over-commit a node whose running tasks it has not yet learnt.
Meanwhile its nodes show down, so GMs do not keep asking. The LM (common/lm.py) acts on what
the watch says: it ends the attempts of a silent worker's nodes, and those a worker no longer
runs, and logs the end of its recovery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.commands import Log

if TYPE_CHECKING:
    from collections.abc import Container, Mapping

    from common.cluster import ClusterTopology, JournaledState
    from common.lm_attempts import RunningAttempt
    from common.messages import Placement
    from common.step import Step


class WorkerWatch:
    """`timeout` is how long a worker may stay silent before its nodes are marked down (and
    how long a recovery waits at most); `dispatch_timeout` how long an attempt its worker
    never acknowledged may stay unlisted."""

    def __init__(self, topology: ClusterTopology, state: JournaledState, now: float,
                 timeout: float, dispatch_timeout: float, recovering: bool) -> None:
        self.topology = topology
        self.state = state
        self.timeout = timeout
        self.dispatch_timeout = dispatch_timeout
        self.nodes: dict[str, list[int]] = {}  # worker -> the indices of its nodes
        for i, worker in enumerate(topology.workers):
            self.nodes.setdefault(worker, []).append(i)
        self._seen: dict[str, float] = dict.fromkeys(self.nodes, now)
        # no `_seen` is older than this (the oldest at the last scan, or an older report
        # since): while it is within `timeout`, no worker is silent and a tick need not scan
        # them all (with the simulator's infinite timeout, none ever does)
        self._oldest_seen = now
        self._unheard: set[str] = set(self.nodes) if recovering else set()
        self._recovery_deadline = now + timeout if recovering else None
        # whether a recovery is on (`_recovery_deadline` set): a plain attribute, read for
        # every request, tick and heartbeat of the LM
        self.recovering = recovering
        if recovering:
            for i in range(len(topology)):
                state.set_up(i, False)

    @property
    def timed(self) -> bool:
        """Whether time alone can change it: silences time out, or a recovery waits for its
        deadline."""
        return self.recovering or self.timeout != float("inf")

    def heard(self, worker: str, now: float) -> list[int] | None:
        """The worker reported (a heartbeat, or an attempt's start): its nodes, or None for a
        worker that is not this LM's."""
        nodes = self.nodes.get(worker)
        if nodes is not None:
            self._seen[worker] = now
            if now < self._oldest_seen:  # a clock that went back (tests)
                self._oldest_seen = now
        return nodes

    def silent(self, now: float) -> list[str]:
        """The workers not heard from for longer than `timeout`."""
        timeout = self.timeout
        if now - self._oldest_seen <= timeout:
            return []
        seen = self._seen
        self._oldest_seen = min(seen.values(), default=now)
        return [worker for worker, at in seen.items() if now - at > timeout]

    # -- its nodes ---------------------------------------------------------------------------

    def nodes_up(self, step: Step, nodes: list[int]) -> bool:
        """A worker's heartbeat came: its nodes that were down are up again (True if any)."""
        came_up = False
        for i in nodes:
            if not self.state.up[i]:
                self.state.set_up(i, True)
                came_up = True
                step.emit(Log("node_up", {"node": self.topology.node_ids[i]}))
        return came_up

    def any_up(self, worker: str) -> bool:
        return any(self.state.up[i] for i in self.nodes[worker])

    def nodes_down(self, step: Step, worker: str) -> None:
        """The worker went silent: its nodes are down (the LM ended what ran there)."""
        for i in self.nodes[worker]:
            self.state.set_up(i, False)
            step.emit(Log("node_down", {"node": self.topology.node_ids[i], "worker": worker}))

    # -- what a heartbeat does not list ------------------------------------------------------

    def overdue(self, launched_at: float, acknowledged: bool, now: float) -> bool:
        """Whether an attempt its worker's heartbeat does not list was really dropped. A
        heartbeat may overtake the report of an attempt's end, or a launch on its way to the
        worker: only one missing for a whole `timeout` since its launch was (its worker
        restarted, say). One its worker never acknowledged gets `dispatch_timeout`: a busy LM
        can take a while to hand it over, and the driver reports a hand-over that failed for
        good (`DispatchFailed`)."""
        return now - launched_at > (self.timeout if acknowledged else self.dispatch_timeout)

    @property
    def unlisted_hold(self) -> float:
        """The longest an attempt its worker's heartbeats do not list is kept: one its worker
        never acknowledged (the call to the worker lost) waits `dispatch_timeout`."""
        return max(self.timeout, self.dispatch_timeout)

    def unlisted(self, running: Mapping[str, RunningAttempt], nodes: list[int],
                 listed: set[str], now: float) -> list[str]:
        """The attempts on `nodes` (a worker's) its heartbeat does not list, and `overdue`."""
        return [attempt_id for attempt_id, attempt in running.items()
                if attempt_id not in listed and attempt.node_index in nodes
                and self.overdue(attempt.launched_at, attempt.acknowledged, now)]

    # -- recovery ----------------------------------------------------------------------------

    def adoptable(self, worker: str, item: Placement, queued: bool,
                  ended: Container[str]) -> int:
        """Where the LM may adopt an attempt `worker` lists that it does not hold (how a
        restarted LM learns what runs): its node's index, or -1 for one to stop (it ended, it
        is not on a node of this worker's, or it runs in more than is free there)."""
        i = self.topology.index.get(item.node_id, -1)
        demand = item.task.demand
        if (item.attempt_id in ended or i < 0 or self.topology.workers[i] != worker
                or not (queued or self.state.fits(i, demand.cpu_m, demand.mem_mib))):
            return -1
        return i

    def listed(self, worker: str) -> None:
        """The worker's heartbeat listed all it runs: a recovery waits for it no more."""
        self._unheard.discard(worker)

    def end_recovery(self, now: float) -> list[str] | None:
        """If a recovery is on and over (every worker listed what it runs, or its time is up),
        end it: the workers it never heard from, sorted; None otherwise."""
        if self._recovery_deadline is None:
            return None
        if self._unheard and now < self._recovery_deadline:
            return None
        self._recovery_deadline = None
        self.recovering = False
        return sorted(self._unheard)
