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
        self._entries: deque[Transition] = deque(maxlen=maxlen)

    def record(
        self, ts: float, stimulus_id: str, entity: str, old: str, new: str, detail: str = ""
    ) -> None:
        self._entries.append(Transition(ts, stimulus_id, entity, old, new, detail))

    def story(self, *keys: str) -> list[dict]:
        """Entries whose entity or stimulus is one of `keys`, or whose entity starts with
        `key/` (a job's story includes its tasks' ids, which are `job/…`-prefixed by the GM)."""
        wanted = set(keys)
        prefixes = tuple(f"{key}/" for key in keys)
        return [
            entry.as_dict()
            for entry in self._entries
            if entry.entity in wanted
            or entry.stimulus_id in wanted
            or entry.entity.startswith(prefixes)
        ]

    def __len__(self) -> int:
        return len(self._entries)
