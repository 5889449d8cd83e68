"""A GM's job reprioritized at an LM: its attempts here take the new priority
(docs/local-queues.md, Estimates that change; the GM's side is common/reprioritize.py).

Only an LM with local queues or copies keeps its live attempts by job (`LMAttemptBook.by_job`),
since only there does an attempt's priority order anything: its worker's local queue, and the
copy candidates (common/lm_copies.py). The LM (common/lm.py) tells the workers returned.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from common.lm_attempts import LMAttemptBook
    from common.lm_copies import CopyBook


def reprioritize(attempts: LMAttemptBook, workers_of: Sequence[str], copies: CopyBook | None,
                 job_id: str, gm: str, priority: float) -> dict[str, None] | None:
    """The job's attempts of `gm` here take `priority` (a copy candidate is re-keyed): the
    workers holding them, each once in the order of their attempts (`workers_of`: each node's
    worker). None: the job has no attempts here, or the LM keeps no index of them."""
    by_job = attempts.by_job
    ids = by_job.get(job_id) if by_job is not None else None
    if not ids:
        return None
    running = attempts.running
    workers: dict[str, None] = {}
    for attempt_id in ids:
        attempt = running[attempt_id]
        placement = attempt.placement
        if placement.gm != gm:
            continue
        workers[workers_of[attempt.node_index]] = None
        if placement.priority != priority:
            # a new placement, not a mutated one: the simulator shares it among roles
            attempt.placement = replace(placement, priority=priority)
            if copies is not None:
                copies.reprioritized(attempt_id, priority)
    return workers
