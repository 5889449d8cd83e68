"""What a GM lets in: each user queue's part of the backlog, and job ids owned by their queue.

**Per-queue admission.** A GM bounds its backlog (`limits.gm_backlog_tasks`: waiting tasks,
pending or held in the core, or accepted and still in the broker) so that a burst costs
latency, not memory. One shared bound would let one queue's burst fill it and get every other
queue of the GM a 429 until it drained. So each queue has a *part* of the bound, in
proportion to its share among the GM's queues, and a queue is admitted while it holds fewer
waiting tasks than its part, whatever the others hold.

So one queue's burst never gets another queue a 429. The price: a part is reserved, never
lent, so a GM whose other queues are idle still holds at most its busy queue's part (lending
idle room would let the burst take the room the idle queue is owed when it wakes). A job of any
size gets in below the line, so the backlog may pass the bound by at most one job per queue
(`limits.max_tasks_per_job` each).

**Ids owned by their queue.** A client may choose its job's id so that a retried submission
is the same job. An id belongs to the queue that used it first, at this GM: the same id,
queue and body again is the same job (202, nothing new); the same id with another body, or
from another queue, is a conflict (409, with the reason), never a 202 for a job that would not
run. The body is compared by the digest of its canonical JSON (the wire model's dump).
Clients that need ids nobody can guess take the GM's (leave `job_id` out) or a random one.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from common.wire import JobSubmission

RETRY_AFTER_MIN, RETRY_AFTER_MAX = 1, 30  # seconds a refused client is told to wait
DRAIN_WINDOW = 10.0  # seconds over which the backlog's drain rate is measured


class Backpressure(Exception):
    """The queue's part of the backlog is full: nothing accepted; retry after `retry_after`."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


class IdConflict(Exception):
    """A job id already taken, by another queue or by another body (409)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def body_digest(canonical_json: str) -> str:
    return hashlib.sha256(canonical_json.encode()).hexdigest()


def submission_digest(submission: JobSubmission, job_id: str) -> str:
    """The digest of a submission as the job `job_id`: a job whose id the GM chose, sent again
    with that id, is the same body."""
    return body_digest(submission.model_copy(update={"job_id": job_id}).model_dump_json())


def check_reuse(job_id: str, queue: str, digest: str, known: tuple[str, str] | None) -> bool:
    """Whether a submission of `job_id` is a job already here (True: answer 202 again), given
    the (queue, digest) it was first submitted with (None: a new id); IdConflict if the id is
    taken by another queue or another body."""
    if known is None:
        return False
    owner, first_digest = known
    if owner != queue:
        # the owner's name is not said: a queue learns only that the id is taken
        raise IdConflict(f"job id {job_id!r} is taken by another queue's job at this GM; ids "
                         f"belong to the queue that used them first: choose another id, or "
                         f"leave job_id out and the GM picks one")
    if first_digest != digest:
        raise IdConflict(f"job id {job_id!r} of queue {queue!r} was accepted before with a "
                         f"different body; a retry must send the same body, and a new job "
                         f"needs a new id")
    return True


@dataclass(frozen=True, slots=True)
class AcceptedJob:
    """A job published to the broker and not yet taken out of it by this GM."""

    queue: str
    tasks: int
    digest: str


def backlog_parts(limit: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Each queue's part of `limit`, in proportion to its share (equal parts if all are 0)."""
    total = sum(max(share, 0.0) for share in shares.values())
    if total <= 0:
        return {queue: limit // max(len(shares), 1) for queue in shares}
    return {queue: int(limit * max(share, 0.0) / total) for queue, share in shares.items()}


class QueueAdmission:
    """The GM's gate: per-queue parts of the backlog bound, the jobs accepted and still in the
    broker, and the episodes of refusals (logged as `backlog_full` / `backlog_open` events,
    one episode per queue)."""

    def __init__(self, gm_id: str, limit: int, shares: Mapping[str, float],
                 emit: Callable[[str, dict], None]) -> None:
        self.gm_id = gm_id
        self.limit = limit
        self.parts = backlog_parts(limit, shares)
        self._emit = emit
        self.accepted: dict[str, AcceptedJob] = {}  # job id -> published, not yet consumed
        self.accepted_tasks: Counter[str] = Counter()  # queue -> tasks of those jobs
        self._refusing_since: dict[str, float] = {}  # queue -> start of its 429 episode
        self._refused_in_episode: Counter[str] = Counter()
        self._drain_samples: deque[tuple[float, int]] = deque()  # (time, tasks placed)

    # -- the jobs between the broker and the core ------------------------------------------------

    def accept(self, job_id: str, job: AcceptedJob) -> None:
        # Counted before publishing: the GM's consumer may take the message before the
        # publish returns, and it takes the job off the count (counting after would leave the
        # job counted for ever, and the GM refusing everything once it added up).
        self.accepted[job_id] = job
        self.accepted_tasks[job.queue] += job.tasks

    def taken(self, job_id: str) -> None:
        """The job left the broker (consumed), or its publish failed: no longer counted here."""
        job = self.accepted.pop(job_id, None)
        if job is not None:
            self.accepted_tasks[job.queue] -= job.tasks

    def total(self, core_waiting: int) -> int:
        return core_waiting + self.accepted_tasks.total()

    # -- the decision ----------------------------------------------------------------------------

    def admit(self, queue: str, waiting_by_queue: Mapping[str, int], core_waiting: int,
              placed: Callable[[], int], now: float) -> None:
        """Raise `Backpressure` if `queue` may not add a job now (see the module docstring).
        `waiting_by_queue`: the core's waiting tasks per queue; `placed()`: the core's count
        of tasks placed so far (for the drain rate and Retry-After), asked at most twice a
        second and on a refusal, not on every submission; `now`: monotonic seconds."""
        self._sample_drain(placed, now)
        held = waiting_by_queue.get(queue, 0) + self.accepted_tasks[queue]
        part = self.parts.get(queue, 0)
        if held < part:
            self._episode_ends(queue, held, now)
            return
        total = self.total(core_waiting)
        rate = self._drain_rate(placed(), now)
        excess = held - part + 1
        retry_after = (RETRY_AFTER_MAX // 6 if rate <= 0 else
                       min(RETRY_AFTER_MAX, max(RETRY_AFTER_MIN, math.ceil(excess / rate))))
        if queue not in self._refusing_since:
            self._refusing_since[queue] = now
            self._refused_in_episode[queue] = 0
            self._emit("backlog_full", {"gm": self.gm_id, "queue": queue, "held": held,
                                        "part": part, "backlog": total, "limit": self.limit,
                                        "drain_tasks_per_s": round(rate, 1)})
        self._refused_in_episode[queue] += 1
        raise Backpressure(
            f"queue {queue!r} holds {held} waiting tasks at {self.gm_id}, at or over its part "
            f"of {part} (limits.gm_backlog_tasks {self.limit}, shared among the GM's queues "
            f"by share; {total} wait in all); {self.gm_id} places about {rate:.0f} tasks/s: "
            f"retry after {retry_after} s", retry_after)

    def _episode_ends(self, queue: str, held: int, now: float) -> None:
        since = self._refusing_since.pop(queue, None)
        if since is not None:
            self._emit("backlog_open", {"gm": self.gm_id, "queue": queue, "held": held,
                                        "part": self.parts.get(queue, 0), "limit": self.limit,
                                        "refused": self._refused_in_episode.pop(queue, 0),
                                        "seconds": round(now - since, 3)})

    def _sample_drain(self, placed: Callable[[], int], now: float) -> None:
        samples = self._drain_samples
        if not samples or now - samples[-1][0] >= 0.5:
            samples.append((now, placed()))
        while len(samples) > 2 and now - samples[1][0] >= DRAIN_WINDOW:
            samples.popleft()

    def _drain_rate(self, placed: int, now: float) -> float:
        """Tasks placed per second over the last DRAIN_WINDOW seconds."""
        then, placed_then = self._drain_samples[0]
        return (placed - placed_then) / (now - then) if now - then >= 1.0 else 0.0
