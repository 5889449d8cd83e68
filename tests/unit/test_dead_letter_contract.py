"""The dead letters' contract (api/dead_letters.py) and `megha dead-letters`' answers to bad
input and to a broker that is not there. The letters' way through a real RabbitMQ is in
tests/integration/test_broker.py and tests/integration/test_dead_letters.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from api.dead_letters import (
    DEAD_LETTER_COUNT,
    DELIVERIES,
    FAILURE,
    ORIGINAL_MESSAGE_ID,
    REASON,
    RESUBMITTED,
    SOURCE_QUEUE,
    Letter,
    describe,
    job_id_of,
    letter_headers,
    resubmission_headers,
)
from megha.cli import main

NOW = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
JOB = json.dumps({"job_id": "j-7", "arrival": 1.0, "job": {"user": "u1"}}).encode()


def headers_for(original=None, runs=3, permanent=False, message_id=None) -> dict:
    return letter_headers(original, source_queue="megha.jobs.u1",
                          reason=describe(OSError("disk full")), permanent=permanent,
                          consumer="gm-1", runs=runs, redelivered=False,
                          original_message_id=message_id, now=NOW)


def test_a_letter_says_where_from_why_who_when_and_how_often() -> None:
    headers = headers_for({"app": "kept"}, message_id="m-1")
    letter = Letter.read("L1", headers, JOB)
    assert (letter.id, letter.source_queue, letter.reason, letter.failure, letter.consumer,
            letter.deliveries, letter.dead_letter_count, letter.job_id, letter.size) == (
        "L1", "megha.jobs.u1", "OSError: disk full", "retries-exhausted", "gm-1", 3, 1,
        "j-7", len(JOB))
    assert letter.dead_lettered_at == "2024-05-01T12:00:00.000+00:00"
    assert headers["app"] == "kept" and headers[ORIGINAL_MESSAGE_ID] == "m-1"
    assert headers_for(permanent=True)[FAILURE] == "permanent"


def test_a_resubmitted_message_carries_its_history_into_its_next_letter() -> None:
    first = headers_for({"app": "kept"}, runs=3)
    back = resubmission_headers(first)
    assert back == {"app": "kept", DELIVERIES: 3, DEAD_LETTER_COUNT: 1, RESUBMITTED: 1}
    second = headers_for(back, runs=2)
    assert (second[DELIVERIES], second[DEAD_LETTER_COUNT], second[RESUBMITTED]) == (5, 2, 1)
    assert resubmission_headers(second)[RESUBMITTED] == 2


def test_headers_read_back_from_the_wire_as_bytes_are_text_again() -> None:
    # pika gives a header's long string (type S) back as bytes
    headers = {SOURCE_QUEUE: b"megha.task_events.gm-1", REASON: b"OperationalError: locked"}
    letter = Letter.read(None, headers, b"{}")
    assert (letter.source_queue, letter.reason, letter.job_id, letter.id) == (
        "megha.task_events.gm-1", "OperationalError: locked", None, "")


@pytest.mark.parametrize(("queue", "body", "job"), [
    ("megha.jobs.u1", JOB, "j-7"),
    ("megha.jobs.u1", b"not json", None),
    ("megha.jobs.u1", b"[1, 2]", None),
    ("megha.jobs.u1", b'{"job_id": 7}', None),
    ("megha.task_events.gm-1", JOB, None),  # only job queues carry jobs
])
def test_a_job_id_is_read_only_from_a_job_message(queue: str, body: bytes, job) -> None:
    assert job_id_of(queue, body) == job


def test_the_reason_is_bounded() -> None:
    assert len(describe(RuntimeError("x" * 5000))) == 1000


@pytest.mark.parametrize(("argv", "message"), [
    (["dead-letters", "list"], "give --amqp-url or set MEGHA_AMQP_URL"),
    (["dead-letters", "list", "--amqp-url", "http://h"], "expected amqp://"),
    (["dead-letters", "list", "--amqp-url", "amqp://h", "--limit", "0"], "--limit"),
    (["dead-letters", "resubmit", "--amqp-url", "amqp://h"], "give --all or the ids"),
    (["dead-letters", "resubmit", "--amqp-url", "amqp://h", "--all", "abc"], "not both"),
])
def test_bad_arguments_are_named_with_status_2(argv, message, monkeypatch, capsys) -> None:
    monkeypatch.delenv("MEGHA_AMQP_URL", raising=False)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_broker_is_a_clear_error_without_the_password(capsys) -> None:
    url = "amqp://megha:secret@127.0.0.1:1/%2F"
    assert main(["dead-letters", "list", "--amqp-url", url, "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach RabbitMQ at amqp://megha@127.0.0.1:1/%2F" in err
    assert "secret" not in err


def test_the_help_says_what_a_dead_letter_is_and_where_the_broker_comes_from(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["dead-letters", "--help"])
    out = capsys.readouterr().out
    assert "megha.dead-letters" in out and "MEGHA_AMQP_URL" in out and "resubmit" in out
