"""The GM's embedded store (SQLite): its unfinished jobs and the tasks of them that finished.

RabbitMQ is the durable inbox (a job is acknowledged to its client once the broker has
confirmed it); this store is what the GM has taken out of the inbox. A job message is
acknowledged only after its row is committed, and a finished task only after its row is:
a GM killed at any point comes back with every accepted job and never reruns a task that
finished.

Durable before the acknowledgement, against a power cut too: the store runs in WAL mode with
`synchronous=FULL`, so every commit fsyncs the write-ahead log before it returns, and the
acknowledgement that follows it can no longer outrun the disk. (`NORMAL`, used before, fsyncs
only at checkpoints: it survives a killed process, the failure the testbed injects, but a
machine that loses power could come back without jobs RabbitMQ had already let go of.) The
cost is one fsync per commit; `benchmarks/bench_store.py` measures it. A job is recorded
with one commit, a batch of finished tasks (one message of task events) with one, and a job's
end with one.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    user TEXT NOT NULL,
    body TEXT NOT NULL,
    arrival REAL NOT NULL,
    state TEXT NOT NULL DEFAULT 'active',
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS done_tasks (
    task_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    runtime REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS done_by_job ON done_tasks (job_id);
"""


@dataclass(frozen=True, slots=True)
class StoredJob:
    job_id: str
    user: str
    body: str  # the JobSubmission JSON as accepted
    arrival: float
    done_tasks: tuple[tuple[str, float], ...]


class GMStore:
    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is on disk when it returns, before the message is acknowledged
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def add_job(self, job_id: str, user: str, body: str, arrival: float) -> bool:
        """Record an accepted job; False if it was recorded before (a redelivery)."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO jobs (job_id, user, body, arrival) VALUES (?, ?, ?, ?)",
            (job_id, user, body, arrival))
        return cursor.rowcount == 1

    def state_of(self, job_id: str) -> str | None:
        row = self._db.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else row[0]

    def user_of(self, job_id: str) -> str | None:
        row = self._db.execute("SELECT user FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else row[0]

    def identity_of(self, job_id: str) -> tuple[str, str] | None:
        """(user queue, body as accepted) of a job recorded here: what a resubmission of its
        id is compared with (services/admission.py)."""
        row = self._db.execute("SELECT user, body FROM jobs WHERE job_id = ?",
                               (job_id,)).fetchone()
        return None if row is None else (row[0], row[1])

    def task_done(self, job_id: str, task_id: str, runtime: float) -> None:
        self.tasks_done([(job_id, task_id, runtime)])

    def tasks_done(self, done: list[tuple[str, str, float]]) -> None:
        """Record finished tasks (job id, task id, runtime), in one transaction."""
        if not done:
            return
        with self._transaction():
            self._db.executemany("INSERT OR IGNORE INTO done_tasks VALUES (?, ?, ?)",
                                 [(task_id, job_id, runtime) for job_id, task_id, runtime in done])

    def job_ended(self, job_id: str, state: str, reason: str) -> None:
        with self._transaction():
            self._db.execute("UPDATE jobs SET state = ?, reason = ? WHERE job_id = ?",
                             (state, reason, job_id))
            self._db.execute("DELETE FROM done_tasks WHERE job_id = ?", (job_id,))

    def unfinished(self) -> list[StoredJob]:
        jobs = self._db.execute(
            "SELECT job_id, user, body, arrival FROM jobs WHERE state = 'active' "
            "ORDER BY arrival, rowid").fetchall()
        done: dict[str, list[tuple[str, float]]] = {}
        for task_id, job_id, runtime in self._db.execute(
                "SELECT task_id, job_id, runtime FROM done_tasks"):
            done.setdefault(job_id, []).append((task_id, runtime))
        return [StoredJob(job_id, user, body, arrival, tuple(done.get(job_id, ())))
                for job_id, user, body, arrival in jobs]

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One commit (one fsync) for the statements inside. The connection is in autocommit
        mode (`isolation_level=None`), where `with connection:` opens no transaction and every
        row of an `executemany` would commit, and fsync, on its own."""
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
