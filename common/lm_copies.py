"""An LM's redundant copies: which of its running tasks get copies on its idle nodes, where
they run, who wins, and the progress (checkpoints) a task's copies share (docs/redundancy.md).

The LM (common/lm.py) tells its `CopyBook` what happens to its attempts and nodes; the book
keeps:

- the *idle* nodes: up, nothing of a GM running or queued there, while the LM takes work. It
  follows the LM state's journal (every node the LM changes is in it), so keeping the set
  costs what changed, not a scan;
- the *candidates*: originals that run, in the orders the copy policies read
  (common/policies/copies.py);
- the *groups*: each original with copies, its copies in launch order, the best progress its
  attempts reported, and how many checkpoints it went through.

`rebalance` runs after every event that changed any of it (the LM calls it when `dirty`):
it cancels the copies no longer wanted (on a node no longer idle, or past what the policy
gives their task now) and launches the missing ones, each on its own idle node. A copy holds
nothing in the LM's books: GMs see its node free, and a real launch there cancels it first
(`node_taken`).

Checkpoints: a copy starts from its group's best progress; launching it also asks the
workers of the group's other attempts for their progress (`CheckpointOnWorker`), a round.
When the round's last answer is in (or the attempts it waited for are gone), every live
attempt of the group behind the best is told to continue from it (`RestoreOnWorker`); the
progress a cancelled copy had made is shared at once, if it was ahead.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bitarray import bitarray

from common.cluster import ClusterTopology, JournaledState
from common.commands import CheckpointOnWorker, Log, RestoreOnWorker, StartOnWorker, StopOnWorker
from common.errors import InvalidInput, InvariantViolated
from common.lm_attempts import AttemptState, RunningAttempt
from common.messages import Placement
from common.policies.copies import COPY_POLICIES, Candidates, wanted_copies
from common.reasons import Reason
from common.step import Step

if TYPE_CHECKING:
    from common.lm_queues import NodeQueueBook
    from common.policies.copies import CopyOptions

CANCELLED_MEMORY = 10_000  # cancelled copies remembered, for the reports still on their way
_PROGRESS_EPSILON = 1e-9  # work-seconds: a report this close to the best is not ahead of it


@dataclass(slots=True)
class Copy:
    placement: Placement  # `copy_of` names its original
    node_index: int
    launched_at: float
    acknowledged: bool = False  # its worker started it or listed it in a heartbeat


@dataclass(slots=True)
class Group:
    """An original that has had copies, while it runs."""

    original: str
    started_at: float  # when the LM heard its start: the task's runtime counts from there
    copies: list[str] = field(default_factory=list)  # live copies, in launch order
    best_work: float = 0.0  # the most work any of its attempts reported done
    checkpoints: int = 0
    launched: int = 0  # copies launched in all
    winner: str | None = None  # the copy whose finish ended the task, and its node
    winner_node: str | None = None
    # a checkpoint round: the attempts whose progress is still awaited, and what those that
    # answered (or started since, from `best_work`) have done
    asked: set[str] = field(default_factory=set)
    heard: dict[str, float] = field(default_factory=dict)


class CopyBook:
    def __init__(self, topology: ClusterTopology, state: JournaledState,
                 running: Mapping[str, RunningAttempt], *, policy: str,
                 options: CopyOptions | None = None, max_copies: int = 4,
                 epoch: int = 0) -> None:
        if max_copies < 0:
            raise InvalidInput("max_copies", f"must be >= 0, got {max_copies}")
        self.topology = topology
        self.state = state
        self.running = running  # the LM's live attempts (read only): where originals run
        self.policy = COPY_POLICIES.make(policy, options)
        self.max_copies = max_copies
        self.epoch = epoch
        size = len(topology)
        self.idle = bitarray(size)
        self.idle.setall(0)
        self.occupied = bitarray(size)  # nodes with a copy
        self.occupied.setall(0)
        self._journal: list[int] | None = None  # the journal list read so far, and how far
        self._read = 0
        self._accepting = False  # whether the idle set was last computed for an LM taking work
        self.candidates = Candidates()
        self.started_at: dict[str, float] = {}  # candidate -> when its start was heard
        self.copies: dict[str, Copy] = {}
        self.groups: dict[str, Group] = {}
        self._copied: dict[str, Group] = {}  # the groups with live copies, scanned per decision
        self.on_node: dict[int, str] = {}
        # copy id -> (its original, when cancelled), for copies whose worker's report, or its
        # stop, may still be on the way
        self._cancelled: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._launches = 0
        self.dirty = False

    # -- what happens to the LM's attempts ----------------------------------------------------

    def original_started(self, attempt: RunningAttempt, now: float) -> None:
        placement = attempt.placement
        if placement.copy_of is None and placement.task.duration is not None:
            self.candidates.add(placement.attempt_id, placement.priority)
            self.started_at.setdefault(placement.attempt_id, now)
            self.dirty = True

    def reprioritized(self, attempt_id: str, priority: float) -> None:
        """The original's job has a new priority (estimated remaining work): the policies
        that favour the least of it may now favour another task."""
        if self.candidates.rekey(attempt_id, priority):
            self.dirty = True

    def original_stopped(self, step: Step, attempt_id: str, why: Reason | str) -> None:
        """The original ended (or left its node, suspended): its copies go with it; a finish
        names the winner in `copy_won`."""
        self.candidates.discard(attempt_id)
        started = self.started_at.pop(attempt_id, None)
        group = self.groups.pop(attempt_id, None)
        self._copied.pop(attempt_id, None)
        self.dirty = True
        if group is None:
            return
        won = why is Reason.FINISHED
        for copy_id in list(group.copies):
            self._cancel(step, group, copy_id, "sibling_won" if won else "original_ended")
        if won:
            step.emit(Log("copy_won", {
                "original": attempt_id, "winner": group.winner or attempt_id,
                "by_copy": group.winner is not None, "lm": self.topology.lm,
                "node": group.winner_node, "copies": group.launched,
                "checkpoints": group.checkpoints, "best_work": group.best_work,
                "runtime": None if started is None else step.now - started}))

    def copy_finished(self, step: Step, copy_id: str) -> str | None:
        """A copy's worker reported it finished: the original it wins for (the LM ends that
        as finished), or None for a copy already cancelled (a late end)."""
        copy = self.copies.get(copy_id)
        if copy is None:
            original, _ = self._cancelled.pop(copy_id, (None, None))
            step.emit(Log("copy_finished_late", {"attempt": copy_id, "original": original,
                                                 "lm": self.topology.lm}))
            return None
        original = copy.placement.copy_of
        group = self.groups[original]
        group.winner, group.winner_node = copy_id, copy.placement.node_id
        self._drop(step, group, copy_id)
        return original

    def runtime_of(self, original: str, now: float) -> float | None:
        """The task's wall time from its original's start to `now`."""
        started = self.started_at.get(original)
        return None if started is None else now - started

    def copy_ended(self, step: Step, copy_id: str, work: float | None, detail: str) -> None:
        """A copy's worker reported it ended without finishing: cancelled (by the LM, most
        likely; its progress is a checkpoint of its task) or refused."""
        copy = self.copies.get(copy_id)
        if copy is not None:  # refused or lost by its worker: it is simply gone
            group = self.groups[copy.placement.copy_of]
            self._drop(step, group, copy_id)
            step.emit(Log("copy_cancelled", self._fields(copy, why="worker_ended",
                                                         detail=detail)))
            self.dirty = True
            return
        original, _ = self._cancelled.pop(copy_id, (None, None))
        if original is not None and work is not None:
            self.progress(step, original, copy_id, work)

    def copy_lost(self, step: Step, copy_id: str, detail: str) -> None:
        """Never reached its worker, or its worker no longer has it."""
        copy = self.copies.get(copy_id)
        if copy is not None:
            self._drop(step, self.groups[copy.placement.copy_of], copy_id)
            step.emit(Log("copy_cancelled", self._fields(copy, why="lost", detail=detail)))
            self.dirty = True

    def checkpointed(self, step: Step, attempt_id: str, work: float) -> None:
        """An original or a copy answered a checkpoint: it has done `work`."""
        copy = self.copies.get(attempt_id)
        original = copy.placement.copy_of if copy is not None else attempt_id
        self.progress(step, original, attempt_id, work)

    def progress(self, step: Step, original: str, reporter: str, work: float) -> None:
        """An attempt of `original`'s group reported `work` done: an answer of its round
        (the attempts behind the best continue from it once the round is complete), or a
        cancelled copy's last progress (shared at once if ahead)."""
        group = self.groups.get(original)
        if group is None:
            return
        ahead = work > group.best_work + _PROGRESS_EPSILON
        if ahead:
            group.best_work = work
        if reporter in group.asked:
            group.asked.discard(reporter)
            group.heard[reporter] = work
            if not group.asked:
                self._restore_behind(step, group)
        elif ahead and not group.asked:
            self._restore_behind(step, group)

    def _restore_behind(self, step: Step, group: Group) -> None:
        """The round is over: every live attempt behind the best continues from it."""
        best = group.best_work
        for member, worker in self._members(group):
            if group.heard.get(member, -1.0) < best - _PROGRESS_EPSILON:
                step.emit(RestoreOnWorker(worker, member, best))
        group.heard.clear()

    def acknowledge(self, copy_id: str) -> bool:
        """Its worker started or listed it; False if the book does not know it."""
        copy = self.copies.get(copy_id)
        if copy is None:
            return False
        copy.acknowledged = True
        return True

    def is_copy(self, attempt_id: str) -> bool:
        return attempt_id in self.copies

    def knows(self, attempt_id: str) -> bool:
        """A copy it runs, or one it cancelled whose reports may still come."""
        return attempt_id in self.copies or attempt_id in self._cancelled

    def listed(self, copy_id: str, now: float, grace: float) -> bool:
        """A worker's heartbeat lists this copy: known, or cancelled less than `grace` ago
        (its stop is on the way). False: the LM stops it, being unknown (of an earlier
        incarnation of this LM) or cancelled longer ago (its stop was lost)."""
        if self.acknowledge(copy_id):
            return True
        entry = self._cancelled.get(copy_id)
        return entry is not None and now - entry[1] <= grace

    def node_taken(self, step: Step, i: int) -> None:
        """A GM's attempt is about to start on node i: its copy, if any, makes way first."""
        copy_id = self.on_node.get(i)
        if copy_id is not None:
            copy = self.copies[copy_id]
            self._cancel(step, self.groups[copy.placement.copy_of], copy_id, "node_taken")
            self.dirty = True

    def nodes_down(self, step: Step, nodes: Sequence[int]) -> None:
        """A worker went silent: its copies are gone with it (nothing to stop)."""
        for i in nodes:
            copy_id = self.on_node.get(i)
            if copy_id is not None:
                copy = self.copies[copy_id]
                self._drop(step, self.groups[copy.placement.copy_of], copy_id)
                step.emit(Log("copy_cancelled", self._fields(copy, why="node_down")))
        self.dirty = True

    def missing(self, nodes: Sequence[int], listed: set[str], now: float,
                overdue: Callable[[float, bool, float], bool]) -> Iterator[str]:
        """Copies on `nodes` their worker's heartbeat does not list, past the grace the LM
        gives its own attempts (`overdue`, common/lm_workers.py): a heartbeat may overtake a
        copy's launch or its end."""
        for i in nodes:
            copy_id = self.on_node.get(i)
            if copy_id is None or copy_id in listed:
                continue
            copy = self.copies[copy_id]
            if overdue(copy.launched_at, copy.acknowledged, now):
                yield copy_id

    # -- the decision --------------------------------------------------------------------------

    def rebalance(self, step: Step, queues: NodeQueueBook | None, accepting: bool) -> None:
        """Cancel the copies no longer wanted, launch the missing ones: after every event of
        the LM, at once when nothing changed its candidates, copies or nodes. `queues`: the
        LM's local queues (None: it has none), whose nodes with queued attempts are busy."""
        journal = self.state.journal
        if (not self.dirty and journal is self._journal and len(journal) == self._read
                and accepting == self._accepting):
            return
        self.dirty = False
        no_longer_idle = self._sync_idle(None if queues is None else queues.counts, accepting)
        if not self.copies and (not self.candidates or not self.idle.any()):
            return  # the common case under load: nothing idle, or nothing to copy
        for i in no_longer_idle:  # a node down, a GM's task there, the LM not taking work
            copy_id = self.on_node.get(i)
            if copy_id is not None:
                copy = self.copies[copy_id]
                why = ("node_down" if not self.state.up[i] else
                       "node_taken" if accepting else "reallocated")
                self._cancel(step, self.groups[copy.placement.copy_of], copy_id, why)
        plan = (wanted_copies(self.policy, self.candidates, self.idle.count(), self.max_copies)
                if accepting else {})
        for original, group in list(self._copied.items()):
            want = plan.get(original, 0)
            while len(group.copies) > want:  # the latest launched go first
                self._cancel(step, group, group.copies[-1], "reallocated")
        free = self.idle & ~self.occupied  # `_launch` takes the nodes it uses out
        if not free.any():
            return  # every idle node runs a copy: no need to go through the whole plan
        for original, want in plan.items():
            group = self.groups.get(original)
            have = len(group.copies) if group is not None else 0
            if have < want:
                self._launch(step, self.running[original], want - have, free)
                if not free.any():
                    return

    def _launch(self, step: Step, attempt: RunningAttempt, count: int, free: bitarray) -> None:
        placement = attempt.placement
        task = placement.task
        topology = self.topology
        group = self.groups.get(placement.attempt_id)
        if group is None:
            group = self.groups[placement.attempt_id] = Group(
                placement.attempt_id, self.started_at.get(placement.attempt_id, step.now))
        checking = list(self._members(group))  # what runs already: asked for its progress
        eligible = free & topology.task_mask(task.constraints, task.nodes)  # its placement set too
        cpu, mem = task.demand.cpu_m, task.demand.mem_mib
        launched = 0
        for i in eligible.search(1):
            if launched == count:
                break
            if topology.cap_cpu[i] < cpu or topology.cap_mem[i] < mem:
                continue
            self._launches += 1
            copy = Placement(f"{placement.attempt_id}~{self.epoch}.{self._launches}", task,
                             topology.node_ids[i], placement.gm, placement.user,
                             placement.priority, placement.pilot,
                             start_work=group.best_work, copy_of=placement.attempt_id)
            self.copies[copy.attempt_id] = Copy(copy, i, step.now)
            self.on_node[i] = copy.attempt_id
            self.occupied[i] = 1
            free[i] = 0
            group.copies.append(copy.attempt_id)
            group.launched += 1
            launched += 1
            step.emit(StartOnWorker(topology.workers[i], copy))
            step.emit(Log("copy_launched", self._fields(
                self.copies[copy.attempt_id], start_work=group.best_work,
                copies=len(group.copies))))
        if launched:
            self._copied[placement.attempt_id] = group
            group.checkpoints += 1
            for copy_id in group.copies[-launched:]:  # they start from the best known now
                group.heard[copy_id] = group.best_work
            by_worker: dict[str, list[str]] = {}
            for member, worker in checking:
                group.asked.add(member)
                by_worker.setdefault(worker, []).append(member)
            for worker, members in by_worker.items():
                step.emit(CheckpointOnWorker(worker, tuple(members)))

    # -- keeping the books ---------------------------------------------------------------------

    def _cancel(self, step: Step, group: Group, copy_id: str, why: str) -> None:
        copy = self.copies[copy_id]
        self._drop(step, group, copy_id)
        self._cancelled[copy_id] = (group.original, step.now)
        if len(self._cancelled) > CANCELLED_MEMORY:
            self._cancelled.popitem(last=False)
        if why != "sibling_won" and why != "original_ended":
            group.checkpoints += 1  # its progress is kept: the task goes on without it
        step.emit(StopOnWorker(self.topology.workers[copy.node_index], copy_id,
                               Reason.CANCELLED))
        step.emit(Log("copy_cancelled", self._fields(copy, why=why)))

    def _drop(self, step: Step, group: Group, copy_id: str) -> None:
        copy = self.copies.pop(copy_id)
        group.copies.remove(copy_id)
        del self.on_node[copy.node_index]
        self.occupied[copy.node_index] = 0
        group.heard.pop(copy_id, None)
        if not group.copies:
            self._copied.pop(group.original, None)
        if copy_id in group.asked:  # the round waits no more for it
            group.asked.discard(copy_id)
            if not group.asked and self.groups.get(group.original) is group:
                self._restore_behind(step, group)

    def _members(self, group: Group) -> Iterator[tuple[str, str]]:
        """(attempt, its worker) of every live attempt of the group: the original, then its
        copies."""
        workers = self.topology.workers
        original = self.running.get(group.original)
        if original is not None:
            yield group.original, workers[original.node_index]
        for copy_id in group.copies:
            yield copy_id, workers[self.copies[copy_id].node_index]

    def _sync_idle(self, queued: Sequence[int] | None, accepting: bool) -> list[int]:
        """Bring the idle set up to the LM's state (the nodes its journal names since the
        last call); the nodes that were idle and are no longer."""
        journal = self.state.journal
        idle = self.idle
        if not accepting:
            lost = list(self.on_node)
            idle.setall(0)
            self._journal, self._read, self._accepting = journal, len(journal), False
            return lost
        if journal is self._journal and self._accepting:
            changed = journal[self._read:]
        else:  # a new journal (the LM started one), or taking work again: look at every node
            changed = range(len(self.topology))
        state, topology = self.state, self.topology
        lost = []
        for i in changed:
            now = (state.up[i] and (queued is None or not queued[i])
                   and state.free_cpu[i] == topology.cap_cpu[i]
                   and state.free_mem[i] == topology.cap_mem[i])
            if idle[i] and not now:
                lost.append(i)
            idle[i] = now
        self._journal, self._read, self._accepting = journal, len(journal), True
        return lost

    def _fields(self, copy: Copy, **extra) -> dict:
        placement = copy.placement
        fields = {"attempt": placement.attempt_id, "original": placement.copy_of,
                  "task": placement.task.task_id, "job": placement.task.job_id,
                  "gm": placement.gm, "user": placement.user, "lm": self.topology.lm,
                  "node": placement.node_id}
        fields.update(extra)
        return fields

    # -- invariants ----------------------------------------------------------------------------

    def validate(self, queues: NodeQueueBook | None, accepting: bool) -> None:
        """Copies only on idle nodes, one a node, each in its original's group; the idle set
        as the LM's truth has it; candidates and groups only of originals that run."""
        state, topology, lm = self.state, self.topology, self.topology.lm
        for i in range(len(topology)):
            idle = (accepting and state.up[i] and (queues is None or not queues.counts[i])
                    and state.free_cpu[i] == topology.cap_cpu[i]
                    and state.free_mem[i] == topology.cap_mem[i])
            if bool(self.idle[i]) != idle:
                raise InvariantViolated(f"{lm}: idle set wrong at {topology.node_ids[i]}")
            if bool(self.occupied[i]) != (i in self.on_node):
                raise InvariantViolated(f"{lm}: copy map wrong at {topology.node_ids[i]}")
        for copy_id, copy in self.copies.items():
            group = self.groups.get(copy.placement.copy_of)
            if group is None or copy_id not in group.copies:
                raise InvariantViolated(f"{lm}: copy {copy_id} outside its original's group")
            if self.on_node.get(copy.node_index) != copy_id:
                raise InvariantViolated(f"{lm}: copy {copy_id} not where it runs")
            if not self.idle[copy.node_index]:
                raise InvariantViolated(f"{lm}: copy {copy_id} on a node that is not idle")
        if len(self.on_node) != len(self.copies) or len(self.copies) > self.idle.count():
            raise InvariantViolated(f"{lm}: {len(self.copies)} copies, "
                                    f"{self.idle.count()} idle nodes")
        if self._copied != {o: g for o, g in self.groups.items() if g.copies}:
            raise InvariantViolated(f"{lm}: the groups with copies are not those listed")
        for original, group in self.groups.items():
            if original not in self.candidates:
                raise InvariantViolated(f"{lm}: group of {original}, which does not run")
            if not group.asked <= {original, *group.copies}:
                raise InvariantViolated(f"{lm}: {original}'s round waits for attempts gone")
        if set(self.started_at) != set(self.candidates.ids()):
            raise InvariantViolated(f"{lm}: candidates and their start times differ")
        for attempt_id in self.started_at:
            attempt = self.running.get(attempt_id)
            if attempt is None or attempt.state is not AttemptState.RUNNING:
                raise InvariantViolated(f"{lm}: candidate {attempt_id} does not run")
