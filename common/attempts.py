"""A GM's book of attempts: which attempt ids are its, where its launched ones run, and what
it must take back after a restart.

Every launch of a task is a new attempt `task#epoch.n` (`issue`). A task completes at most
once: the first attempt to finish wins, so the book keeps every attempt of an unfinished task
(`get`) until the task ends (`forget`), and the GM cancels the others.

Leases: an attempt launched by an LM incarnation that then restarted is never reported ended by
the new one unless it adopts it from its worker. The book lists launched attempts per LM
(`list_launched` / `unlist`), notes the oldest LM epoch it launched under, and `expired` names
those a newer incarnation's heartbeats have not listed for a grace period.

Orphans: after the GM itself restarts, heartbeats list attempts of its earlier incarnation that
it no longer tracks; `find_orphans` keeps them until their job is submitted again, when the GM
adopts them (`take_orphan`) instead of launching the task a second time.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.cluster import LMSnapshot
from common.errors import InvariantViolated
from common.gm_records import LAUNCHED_STATES, TaskRecord
from common.lifecycle import TaskState
from common.view import LMSlot


class AttemptBook:
    def __init__(self, gm: str, epoch: int, earlier_incarnations: bool = True) -> None:
        self.gm = gm
        self.epoch = epoch  # this GM's incarnation: its attempt ids never collide with older
        # whether orphans can exist: without an earlier incarnation every attempt of this GM
        # that a heartbeat lists is one the book issued (or one of a task that has ended)
        self.seeks_orphans = earlier_incarnations
        self._sep = f"#{epoch}."  # task id + this + n: an attempt id
        self._attempts: dict[str, TaskRecord] = {}  # every attempt of every unfinished task
        self._live_on: dict[str, dict[str, TaskRecord]] = {}  # lm -> launched attempts there
        self._oldest_launch: dict[str, int] = {}  # lm -> the oldest LM epoch launched under
        self._orphans: dict[str, tuple[str, str, str]] = {}  # task id -> (attempt, lm, node)

    # -- attempt ids ---------------------------------------------------------------------------

    def issue(self, task: TaskRecord) -> str:
        """A new attempt of `task`, which becomes its live one."""
        task.attempts += 1
        attempt_id = f"{task.spec.task_id}{self._sep}{task.attempts}"
        task.live = attempt_id
        self._attempts[attempt_id] = task
        return attempt_id

    def get(self, attempt_id: str) -> TaskRecord | None:
        return self._attempts.get(attempt_id)

    def __contains__(self, attempt_id: str) -> bool:
        return attempt_id in self._attempts

    def is_placing(self, attempt_id: str) -> bool:
        """Whether the attempt is its task's live one and still waits for its LM's answer."""
        return bool(self.placing((attempt_id,)))

    def placing(self, attempt_ids: Sequence[str]) -> list[tuple[str, TaskRecord]]:
        """(attempt id, task) of those of `attempt_ids` that are `is_placing`, in order (one
        pass for a whole request)."""
        attempts, placing = self._attempts, TaskState.PLACING
        found = []
        for attempt_id in attempt_ids:
            task = attempts.get(attempt_id)
            if task is not None and task.live == attempt_id and task.state is placing:
                found.append((attempt_id, task))
        return found

    def forget(self, task: TaskRecord) -> None:
        """The task ended: none of its attempts can change it any more."""
        for n in range(1, task.attempts + 1):
            self._attempts.pop(f"{task.spec.task_id}{self._sep}{n}", None)
        task.live = None

    # -- leases --------------------------------------------------------------------------------

    def list_launched(self, task: TaskRecord) -> None:
        """Its live attempt is now held by an LM (LAUNCHED or RUNNING)."""
        if task.lm is not None and task.live is not None:
            self._live_on.setdefault(task.lm, {})[task.live] = task
            task.listed = (task.lm, task.live)

    def unlist(self, task: TaskRecord) -> None:
        # by where it was listed: a finish may come from an older attempt on another LM
        if task.listed is not None:
            lm, attempt_id = task.listed
            self._live_on[lm].pop(attempt_id, None)
            task.listed = None
        task.launched_at = task.missing_since = None

    def note_launch(self, lm: str, version: tuple[int, int]) -> None:
        oldest = self._oldest_launch.get(lm)
        if oldest is None or version[0] < oldest:
            self._oldest_launch[lm] = version[0]

    def expired(self, snapshot: LMSnapshot, now: float, grace: float) -> list[TaskRecord]:
        """Launched tasks whose attempt a restarted LM has not listed for `grace` seconds.

        Only an LM incarnation that launched an attempt knows to report its end. Within one
        epoch the LM's task events may lag its heartbeats under load, so those attempts are
        left to their events; only attempts of an older incarnation are at stake.
        """
        live = self._live_on.get(snapshot.lm)
        if not live or snapshot.running is None:
            return []
        epoch = snapshot.epoch
        if epoch <= self._oldest_launch.get(snapshot.lm, epoch):
            return []  # the common case: the LM never restarted since; costs nothing to know
        older = [(attempt_id, task) for attempt_id, task in live.items()
                 if task.launched_at is not None and task.launched_at[0] < epoch]
        if not older:
            return []
        listed = {info.attempt_id for info in snapshot.running if info.gm == self.gm}
        expired = []
        for attempt_id, task in older:
            if attempt_id in listed:
                task.missing_since = None
            elif task.missing_since is None:
                task.missing_since = now
            elif now - task.missing_since >= grace:
                expired.append(task)
        return expired

    # -- orphans of an earlier incarnation --------------------------------------------------------

    def find_orphans(self, slot: LMSlot) -> list[str]:
        """Attempts of this GM that `slot` lists and the book does not know: kept as orphans;
        returns their task ids (none when there was no earlier incarnation)."""
        if not self.seeks_orphans:
            return []
        listing = slot.snapshot
        # the common case, checked in C: every attempt of this GM listed is one it tracks
        if listing.running is slot.running and all(
                map(self._attempts.__contains__, listing.attempts_of(self.gm))):
            return []
        found = []
        for info in slot.running:
            if info.gm != self.gm or info.attempt_id in self._attempts:
                continue
            task_id = info.attempt_id.rpartition("#")[0]
            self._orphans[task_id] = (info.attempt_id, slot.lm,
                                      slot.topology.node_ids[info.node_index])
            found.append(task_id)
        return found

    @property
    def has_orphans(self) -> bool:
        return bool(self._orphans)

    def take_orphan(self, task: TaskRecord) -> tuple[str, str, str] | None:
        """(attempt, lm, node) of a running orphan of `task`, now its live attempt; None if
        there is none or the task is no longer waiting (it ran again meanwhile)."""
        orphan = self._orphans.pop(task.spec.task_id, None)
        if orphan is None or task.state not in (TaskState.PENDING, TaskState.HELD):
            return None
        attempt_id, lm, node = orphan
        task.live, task.lm, task.node = attempt_id, lm, node
        self._attempts[attempt_id] = task
        return orphan

    # -- invariants ----------------------------------------------------------------------------

    def validate(self, task: TaskRecord) -> None:
        """One task's side of the book; `validate_lists` checks the book's side."""
        placed = task.state in (TaskState.PLACING, TaskState.LAUNCHED, TaskState.RUNNING)
        if placed and (task.live is None or self._attempts.get(task.live) is not task):
            raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is {task.state} "
                                    f"without a live attempt")
        if task.state in LAUNCHED_STATES and task.listed is None:
            raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is {task.state} "
                                    f"but not listed for lease checks")

    def validate_lists(self) -> None:
        for lm, live in self._live_on.items():
            for attempt_id, task in live.items():
                if task.listed != (lm, attempt_id) or task.state not in LAUNCHED_STATES:
                    raise InvariantViolated(f"{self.gm}: {task.spec.task_id} is listed as "
                                            f"launched on {lm} as {attempt_id} while "
                                            f"{task.state}")
