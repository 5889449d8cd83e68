"""The dead-letter queue's contract: its name, the headers a letter carries, and how a letter
is read back. The services write letters (services/broker.py), `megha dead-letters` reads and
resubmits them (api/dead_letters_command.py); both import this module, which needs no AMQP
client, so the two sides cannot disagree on a header's name.

A letter is the original message's body, unchanged, published persistent to the durable queue
`megha.dead-letters` (one per RabbitMQ virtual host, that is one per federation), with its own
id as the AMQP `message_id` and these headers on top of the original's:

- `x-megha-source-queue`: the queue the message was taken from; a resubmission goes back there;
- `x-megha-reason`: the handler's exception, `Type: message` (at most 1,000 characters);
- `x-megha-failure`: `permanent` (the message cannot be read: retrying cannot help) or
  `retries-exhausted`;
- `x-megha-consumer`: the service id of the consumer that gave up (`gm-1`);
- `x-megha-dead-lettered-at`: when, ISO 8601 UTC, in milliseconds;
- `x-megha-deliveries`: handler runs over the message's life, resubmissions included;
- `x-megha-redelivered`: RabbitMQ had delivered it before (to a consumer that died or was cut
  off);
- `x-megha-dead-letter-count`: letters written for this message so far, this one included;
- `x-megha-original-message-id`: the original's `message_id`, if it had one (restored on
  resubmission).

A resubmitted message keeps `x-megha-deliveries` and `x-megha-dead-letter-count` (and gains
`x-megha-resubmitted`, how often it was), so a message that fails again shows its whole history
in its next letter.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEAD_LETTER_QUEUE = "megha.dead-letters"
JOBS_QUEUE_PREFIX = "megha.jobs."

SOURCE_QUEUE = "x-megha-source-queue"
REASON = "x-megha-reason"
FAILURE = "x-megha-failure"
CONSUMER = "x-megha-consumer"
DEAD_LETTERED_AT = "x-megha-dead-lettered-at"
DELIVERIES = "x-megha-deliveries"
REDELIVERED = "x-megha-redelivered"
DEAD_LETTER_COUNT = "x-megha-dead-letter-count"
ORIGINAL_MESSAGE_ID = "x-megha-original-message-id"
RESUBMITTED = "x-megha-resubmitted"

PERMANENT = "permanent"
RETRIES_EXHAUSTED = "retries-exhausted"
REASON_CHARS = 1000  # a whole traceback does not belong in a header; the event log has it
# what describes one letter only, and is dropped when the message goes back to its queue
_LETTER_ONLY = (SOURCE_QUEUE, REASON, FAILURE, CONSUMER, DEAD_LETTERED_AT, REDELIVERED,
                ORIGINAL_MESSAGE_ID)


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:REASON_CHARS]


def letter_headers(original: Mapping[str, Any] | None, *, source_queue: str, reason: str,
                   permanent: bool, consumer: str, runs: int, redelivered: bool,
                   original_message_id: str | None, now: dt.datetime) -> dict[str, Any]:
    """The headers of a new letter: the original's, the history it carried, this failure."""
    headers = dict(original or {})
    headers.update({
        SOURCE_QUEUE: source_queue, REASON: reason,
        FAILURE: PERMANENT if permanent else RETRIES_EXHAUSTED, CONSUMER: consumer,
        DEAD_LETTERED_AT: now.astimezone(dt.UTC).isoformat(timespec="milliseconds"),
        DELIVERIES: _count(headers.get(DELIVERIES)) + runs,
        REDELIVERED: redelivered,
        DEAD_LETTER_COUNT: _count(headers.get(DEAD_LETTER_COUNT)) + 1,
    })
    if original_message_id:
        headers[ORIGINAL_MESSAGE_ID] = original_message_id
    return headers


def resubmission_headers(letter: Mapping[str, Any] | None) -> dict[str, Any]:
    """The headers a resubmitted message goes back with: the original's and its history."""
    headers = {key: value for key, value in (letter or {}).items() if key not in _LETTER_ONLY}
    headers[RESUBMITTED] = _count(headers.get(RESUBMITTED)) + 1
    return headers


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter as `megha dead-letters list` shows it."""

    id: str
    source_queue: str
    reason: str
    failure: str
    consumer: str
    dead_lettered_at: str
    deliveries: int
    dead_letter_count: int
    job_id: str | None  # the job's id if the message is a job submission
    size: int  # bytes of the body

    @classmethod
    def read(cls, message_id: str | None, headers: Mapping[str, Any] | None,
             body: bytes) -> Letter:
        headers = headers or {}
        source = _text(headers.get(SOURCE_QUEUE))
        return cls(id=message_id or "", source_queue=source,
                   reason=_text(headers.get(REASON)), failure=_text(headers.get(FAILURE)),
                   consumer=_text(headers.get(CONSUMER)),
                   dead_lettered_at=_text(headers.get(DEAD_LETTERED_AT)),
                   deliveries=_count(headers.get(DELIVERIES)),
                   dead_letter_count=_count(headers.get(DEAD_LETTER_COUNT)),
                   job_id=job_id_of(source, body), size=len(body))


def job_id_of(source_queue: str, body: bytes) -> str | None:
    """The job id of a job submission (a message of a `megha.jobs.<user>` queue), else None:
    a body that is not the JSON the GM publishes has none, and that is no error here."""
    if not source_queue.startswith(JOBS_QUEUE_PREFIX):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    job_id = message.get("job_id") if isinstance(message, dict) else None
    return job_id if isinstance(job_id, str) else None
