"""Dead letters on a real RabbitMQ: what a failing handler does to its message (retried, then a
letter with its reason, never dropped), what happens when no letter can be written, and
`megha dead-letters list | resubmit`; and a real GM whose SQLite store is locked by another
connection, so its insert fails with "database is locked": the job becomes a letter, the lock
goes, the command resubmits it, and it runs to its end.

Each module gets a virtual host of its own, so the letters it reads are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

import httpx
import pika
import pytest
from test_broker import until
from test_federation import CONFIG, read_events

from api.dead_letters import (
    CONSUMER,
    DEAD_LETTER_COUNT,
    DEAD_LETTER_QUEUE,
    DELIVERIES,
    FAILURE,
    REASON,
    RESUBMITTED,
    SOURCE_QUEUE,
)
from api.dead_letters_command import connect, take
from api.dead_letters_command import depth as letters_waiting
from megha.cli import main
from services.broker import HEARTBEAT_EXCHANGE, Broker, RetryPolicy, jobs_queue
from services.local import ROOT, LocalFederation, free_port_block, rabbitmq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAST = RetryPolicy(runs=3, backoff=0.05, letter_tries=2, requeue_pause=0.2)


@pytest.fixture(scope="module")
def url(amqp_url):
    """A virtual host of this module's: its dead-letter queue holds only its letters."""
    name = f"megha-dl-{uuid.uuid4().hex[:8]}"
    url = rabbitmq("vhost", name)
    declare_the_dead_letter_queue(url)
    yield url
    rabbitmq("delete-vhost", name)


def declare_the_dead_letter_queue(url: str) -> None:
    """As a service does when it starts consuming a durable queue (services/broker.py)."""
    async def start_and_stop() -> None:
        broker = Broker(url, "declarer")
        broker.consume_queue(unique("declarer"), noop)
        await broker.start()
        await broker.close()

    asyncio.run(start_and_stop())


async def noop(body: bytes) -> None:
    pass


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def letters(url: str, source_queue: str | None = None) -> list[tuple[object, bytes]]:
    """(properties, body) of every letter now in the queue (put back after reading), those
    of `source_queue` only if given."""
    with connect(url, 5.0) as connection:
        channel = connection.channel()
        if letters_waiting(channel) is None:
            return []
        found = [(properties, body) for _, properties, body in take(channel, 10_000)]
        channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
    return [(p, b) for p, b in found
            if source_queue is None or p.headers.get(SOURCE_QUEUE) == source_queue]


def depth(url: str, queue: str) -> int:
    with connect(url, 5.0) as connection:
        return connection.channel().queue_declare(queue, passive=True).method.message_count


def command(*argv: str) -> tuple[int, str, str]:
    """`megha dead-letters ...` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["dead-letters", *argv])
    return status, out.getvalue(), err.getvalue()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def __call__(self, event: str, fields: dict) -> None:
        self.events.append((event, fields))

    def named(self, name: str) -> list[dict]:
        return [fields for event, fields in self.events if event == name]


def test_a_failure_that_clears_is_retried_and_nothing_is_dead_lettered(url: str) -> None:
    queue = jobs_queue(unique("user"))

    async def scenario() -> None:
        runs: list[bytes] = []

        async def handler(body: bytes) -> None:
            runs.append(body)
            if len(runs) < 3:
                raise OSError(28, "No space left on device")

        events = Recorder()
        broker = Broker(url, "gm-retry", events=events, retry=FAST)
        broker.declare_queue(queue)
        broker.consume_queue(queue, handler)
        await broker.start()
        await broker.publish("", queue, b'{"job_id": "j1"}', persistent=True)
        await until(lambda: len(runs) == 3)
        await asyncio.sleep(0.3)
        await broker.close()
        assert [f["then"] for f in events.named("broker_handler_failed")] == ["retry", "retry"]
        assert not events.named("broker_dead_lettered")

    asyncio.run(scenario())
    assert depth(url, queue) == 0  # acknowledged once the third run took it
    assert letters(url, queue) == []


def test_a_failure_that_does_not_clear_becomes_a_letter_and_comes_back_on_resubmit(
        url: str) -> None:
    queue = jobs_queue(unique("user"))
    body = json.dumps({"job_id": "job-locked", "arrival": 1.0, "job": {}}).encode()
    locked = True
    runs: list[bytes] = []

    async def handler(message: bytes) -> None:
        runs.append(message)
        if locked:
            raise sqlite3.OperationalError("database is locked")

    async def scenario() -> None:
        nonlocal locked
        events = Recorder()
        broker = Broker(url, "gm-locked", events=events, retry=FAST)
        broker.declare_queue(queue)
        broker.consume_queue(queue, handler)
        await broker.start()
        await broker.publish("", queue, body, persistent=True)
        await until(lambda: events.named("broker_dead_lettered"))
        assert len(runs) == FAST.runs
        [event] = events.named("broker_dead_lettered")
        assert event["reason"] == "OperationalError: database is locked"
        assert (event["queue"], event["job"], event["failure"], event["deliveries"]) == (
            queue, "job-locked", "retries-exhausted", 3)
        [(properties, letter_body)] = await asyncio.to_thread(letters, url, queue)
        assert letter_body == body and properties.message_id == event["letter"]
        assert properties.delivery_mode == 2
        headers = properties.headers
        assert (headers[REASON], headers[FAILURE], headers[CONSUMER], headers[DELIVERIES],
                headers[DEAD_LETTER_COUNT]) == ("OperationalError: database is locked",
                                                "retries-exhausted", "gm-locked", 3, 1)
        status, out, _ = await asyncio.to_thread(command, "list", "--amqp-url", url)
        line = next(row for row in out.splitlines() if row.startswith(event["letter"]))
        assert queue in line and "job-locked" in line and f"{len(body)}B" in line
        assert "OperationalError: database is locked" in line and status == 0

        locked = False  # the cause is fixed: send it back
        status, out, err = await asyncio.to_thread(
            command, "resubmit", event["letter"], "--amqp-url", url)
        assert status == 0, err
        assert f"resubmitted {event['letter']} to {queue} (job job-locked)" in out
        await until(lambda: len(runs) == FAST.runs + 1)
        await asyncio.sleep(0.2)
        await broker.close()
        assert runs[-1] == body

    asyncio.run(scenario())
    assert letters(url, queue) == [] and depth(url, queue) == 0


def test_a_message_that_fails_again_shows_its_whole_history(url: str) -> None:
    queue = jobs_queue(unique("user"))

    async def handler(body: bytes) -> None:
        raise ValueError("field job: missing")  # cannot be read: no retry

    async def scenario() -> None:
        events = Recorder()
        broker = Broker(url, "gm-twice", events=events, retry=FAST)
        broker.consume_queue(queue, handler)
        await broker.start()
        await broker.publish("", queue, b"{}", persistent=True)
        await until(lambda: len(events.named("broker_dead_lettered")) == 1)
        first = events.named("broker_dead_lettered")[0]
        assert (first["failure"], first["deliveries"]) == ("permanent", 1)
        status, _, err = await asyncio.to_thread(command, "resubmit", first["letter"],
                                                 "--amqp-url", url)
        assert status == 0, err
        await until(lambda: len(events.named("broker_dead_lettered")) == 2)
        await broker.close()

    asyncio.run(scenario())
    [(properties, _)] = letters(url, queue)
    headers = properties.headers
    assert (headers[DEAD_LETTER_COUNT], headers[DELIVERIES], headers[RESUBMITTED]) == (2, 2, 1)


def test_when_no_letter_can_be_written_the_message_goes_back_to_its_queue(url: str) -> None:
    queue = jobs_queue(unique("user"))

    async def handler(body: bytes) -> None:
        raise OSError("disk full")

    async def scenario() -> None:
        events = Recorder()
        broker = Broker(url, "gm-noletter", events=events,
                        retry=RetryPolicy(runs=1, backoff=0.05, letter_tries=2,
                                          requeue_pause=0.2))
        broker.declare_queue(queue)
        broker.consume_queue(queue, handler)
        await broker.start()

        def delete_the_dead_letter_queue() -> None:  # an operator's mistake, for real
            with connect(url, 5.0) as connection:
                connection.channel().queue_delete(DEAD_LETTER_QUEUE)

        await asyncio.to_thread(delete_the_dead_letter_queue)
        await broker.publish("", queue, b"precious", persistent=True)
        await until(lambda: any(f["then"] == "requeue"
                                for f in events.named("broker_dead_letter_failed")))
        # put back, it is delivered again: the handler meets it a second time
        await until(lambda: len(events.named("broker_handler_failed")) >= 2)
        await broker.close()
        failed = events.named("broker_dead_letter_failed")[0]
        assert "no queue took the message" in failed["error"]
        assert not events.named("broker_dead_lettered")

    asyncio.run(scenario())
    assert depth(url, queue) == 1  # still there, unacknowledged until the broker closed
    declare_the_dead_letter_queue(url)  # the next service to start puts it back
    assert depth(url, DEAD_LETTER_QUEUE) == 0


def test_a_failing_heartbeat_is_dropped_not_dead_lettered(url: str) -> None:
    async def scenario() -> None:
        runs: list[bytes] = []

        async def handler(body: bytes) -> None:
            runs.append(body)
            raise ValueError("stale snapshot")

        events = Recorder()
        gm = Broker(url, "gm-beats", events=events, retry=FAST)
        gm.consume_fanout(HEARTBEAT_EXCHANGE, handler)
        await gm.start()
        lm = Broker(url, "lm-beats")
        await lm.start()
        await lm.publish(HEARTBEAT_EXCHANGE, "", b'{"seq": 1}')
        await until(lambda: events.named("broker_handler_failed"))
        await asyncio.sleep(0.3)
        for broker in (gm, lm):
            await broker.close()
        assert runs == [b'{"seq": 1}']
        assert [f["then"] for f in events.named("broker_handler_failed")] == ["drop"]
        assert not events.named("broker_dead_lettered")

    asyncio.run(scenario())
    assert not [p for p, _ in letters(url) if p.headers.get(CONSUMER) == "gm-beats"]


def test_resubmit_names_what_it_could_not_do_and_keeps_the_letter(url: str) -> None:
    gone = jobs_queue(unique("deleted"))
    with connect(url, 5.0) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        letter_id = uuid.uuid4().hex[:12]
        channel.basic_publish("", DEAD_LETTER_QUEUE, b'{"job_id": "orphan"}',
                              pika.BasicProperties(delivery_mode=2, message_id=letter_id,
                                                   headers={SOURCE_QUEUE: gone}),
                              mandatory=True)
    status, out, err = command("resubmit", letter_id, "nosuchletter", "--amqp-url", url)
    assert status == 1
    assert f"letter {letter_id} not resubmitted: its source queue {gone!r} does not exist" in err
    assert "no dead letter with id 'nosuchletter'" in err
    assert "0 letter(s) resubmitted" in out
    [(properties, body)] = letters(url, gone)
    assert properties.message_id == letter_id and body == b'{"job_id": "orphan"}'
    status, out, _ = command("list", "--json", "--amqp-url", url)
    listed = [json.loads(line) for line in out.splitlines()]
    assert {"id": letter_id, "job_id": "orphan", "source_queue": gone, "size": 20}.items() <= \
        next(row for row in listed if row["id"] == letter_id).items()


# -- a real GM whose store is locked ---------------------------------------------------------


def job_state(client: httpx.Client, fed: LocalFederation, job_id: str) -> str | None:
    answer = client.get(fed.endpoints.url("gm-1") + f"/v1/jobs/{job_id}")
    return answer.json()["state"] if answer.status_code == 200 else None


@pytest.mark.timeout(240)
def test_a_job_the_gm_cannot_store_is_dead_lettered_then_resubmitted_and_runs(
        url: str, tmp_path) -> None:
    job_id = unique("locked")
    with LocalFederation(CONFIG, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=url) as fed, \
            httpx.Client(timeout=10, headers=fed.headers()) as client:
        store = sqlite3.connect(fed.logs / "state" / "gm-1.sqlite", isolation_level=None)
        store.execute("BEGIN EXCLUSIVE")  # every insert of gm-1's times out: database is locked
        try:
            answer = client.post(fed.endpoints.url("gm-1") + "/v1/jobs", json={
                "job_id": job_id, "user": "u1",
                "tasks": [{"cpu_m": 500, "mem_mib": 256, "duration": 0.5}] * 2})
            assert answer.status_code == 202, answer.text  # accepted: it is in RabbitMQ
            deadline = time.monotonic() + 90
            found = []
            while not found:
                assert time.monotonic() < deadline, "the job never became a dead letter"
                time.sleep(1.0)
                status, out, err = command("list", "--json", "--amqp-url", url)
                assert status == 0, err
                found = [row for row in map(json.loads, out.splitlines())
                         if row["job_id"] == job_id]
            [letter] = found
            assert (letter["source_queue"], letter["consumer"], letter["failure"]) == (
                "megha.jobs.u1", "gm-1", "retries-exhausted")
            assert "database is locked" in letter["reason"]
            assert letter["deliveries"] == RetryPolicy().runs
        finally:
            store.execute("ROLLBACK")
            store.close()
        assert job_state(client, fed, job_id) is None  # not lost: waiting as a letter

        # the real command line, as an operator runs it, with the URL from the environment
        done = subprocess.run(
            [sys.executable, "-m", "megha", "dead-letters", "resubmit", letter["id"]],
            env={**os.environ, "MEGHA_AMQP_URL": url, "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert f"resubmitted {letter['id']} to megha.jobs.u1 (job {job_id})" in done.stdout
        deadline = time.monotonic() + 60
        while job_state(client, fed, job_id) != "done":
            assert time.monotonic() < deadline, f"{job_id}: {job_state(client, fed, job_id)}"
            time.sleep(0.2)
        assert [row for row in map(json.loads, command("list", "--json", "--amqp-url",
                                                       url)[1].splitlines())
                if row["job_id"] == job_id] == []
    events = [e for e in read_events(fed.logs) if e["svc"] == "gm-1"]
    [dead] = [e for e in events if e["event"] == "broker_dead_lettered"]
    assert dead["job"] == job_id and "database is locked" in dead["reason"]
    assert dead["letter"] == letter["id"] and dead["queue"] == "megha.jobs.u1"
    retries = [e for e in events if e["event"] == "broker_handler_failed"]
    assert [e["then"] for e in retries] == ["retry", "retry", "dead_letter"]
