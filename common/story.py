"""A bounded log of state transitions, each tied to the stimulus that caused it.

`story(key)` answers "how did this get here" for a job, task, attempt or stimulus id
(after dask.distributed's worker story). Old entries fall off the end: memory stays flat
in a long simulation.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Transition:
    ts: float
    stimulus_id: str
    entity: str
    old: str
    new: str
    detail: str = ""

    def as_dict(self) -> dict:
        return {
            "ts": self.ts,
            "stimulus_id": self.stimulus_id,
            "entity": self.entity,
            "old": self.old,
            "new": self.new,
            "detail": self.detail,
        }


class TransitionLog:
    def __init__(self, maxlen: int = 100_000) -> None:
        # Plain tuples, turned into `Transition`s only when a story is asked for: recording
        # sits on the placement hot path.
        self._entries: deque[tuple] = deque(maxlen=maxlen)
        # `record` of one transition given as that tuple, (ts, stimulus_id, entity, old, new,
        # detail), without a call frame of its own: every core (GM, LM, worker) records a
        # transition per move of each task or attempt.
        self.add = self._entries.append

    def record(
        self, ts: float, stimulus_id: str, entity: str, old: str, new: str, detail: str = ""
    ) -> None:
        self._entries.append((ts, stimulus_id, entity, old, new, detail))

    def story(self, *keys: str) -> list[dict]:
        """Entries whose entity or stimulus is one of `keys`, or whose entity starts with
        `key/` (a job's story includes its tasks' ids, which are `job/…`-prefixed by the GM)."""
        wanted = set(keys)
        prefixes = tuple(f"{key}/" for key in keys)
        return [
            Transition(*entry).as_dict()
            for entry in self._entries
            if entry[2] in wanted or entry[1] in wanted or entry[2].startswith(prefixes)
        ]

    def __len__(self) -> int:
        return len(self._entries)
