"""The GM's store (services/store.py): durable before the acknowledgement, one commit per
call, and what a restarted GM reads back."""

from __future__ import annotations

import sqlite3

import pytest

from services.store import GMStore

FULL = 2  # what `PRAGMA synchronous` answers for FULL (NORMAL is 1)


def statements(store: GMStore) -> list[str]:
    """Every statement the store's connection runs from now on, as SQLite sees it."""
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    return seen


def test_a_commit_is_fsynced_before_it_returns(tmp_path):
    """`synchronous=FULL` in WAL mode: what the GM acknowledges to RabbitMQ after a commit
    survives a power cut, not only a killed process."""
    store = GMStore(tmp_path / "gm.sqlite")
    assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert store._db.execute("PRAGMA synchronous").fetchone() == (FULL,)


def test_a_batch_of_finished_tasks_is_one_transaction(tmp_path):
    """One commit, so one fsync, per batch: in autocommit mode each row would otherwise commit
    (and fsync) on its own."""
    store = GMStore(tmp_path / "gm.sqlite")
    seen = statements(store)
    store.tasks_done([("j", f"j/{k}", 1.0) for k in range(5)])
    assert [s for s in seen if s in ("BEGIN", "COMMIT")] == ["BEGIN", "COMMIT"]
    assert seen[0] == "BEGIN" and seen[-1] == "COMMIT"
    seen.clear()
    store.job_ended("j", "done", "")
    assert seen[0] == "BEGIN" and seen[-1] == "COMMIT" and len(seen) == 4


def test_a_failed_transaction_leaves_nothing_and_the_store_goes_on(tmp_path):
    store = GMStore(tmp_path / "gm.sqlite")
    store.add_job("j", "q0", "{}", 1.0)
    with pytest.raises(sqlite3.Error):  # the second row cannot be bound: the batch fails
        store.tasks_done([("j", "j/0", 1.0), ("j", "j/1", object())])
    assert store.unfinished()[0].done_tasks == ()  # not half the batch
    store.tasks_done([("j", "j/0", 1.0)])
    assert store.unfinished()[0].done_tasks == (("j/0", 1.0),)


def test_a_killed_gm_finds_every_committed_job_and_finish(tmp_path):
    """No close(): the process dies with the connection open."""
    store = GMStore(tmp_path / "gm.sqlite")
    assert store.add_job("a", "q0", '{"a": 1}', 1.0)
    assert not store.add_job("a", "q0", '{"a": 1}', 1.0)  # a redelivery
    store.add_job("b", "q1", '{"b": 1}', 2.0)
    store.tasks_done([("a", "a/0", 0.5), ("a", "a/1", 0.7)])
    store.job_ended("b", "done", "")
    again = GMStore(tmp_path / "gm.sqlite")
    (job,) = again.unfinished()
    assert (job.job_id, job.user, job.body, job.arrival) == ("a", "q0", '{"a": 1}', 1.0)
    assert sorted(job.done_tasks) == [("a/0", 0.5), ("a/1", 0.7)]
    assert again.state_of("b") == "done" and again.user_of("b") == "q1"
