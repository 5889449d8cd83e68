"""`megha dead-letters list | resubmit`: the messages no service could take, and sending them
back.

A service whose handler keeps failing on a message of a durable queue (a job, a batch of task
events) publishes it to `megha.dead-letters` with why (services/broker.py, api/dead_letters.py)
instead of dropping it. This command reads that queue over AMQP, as any client would: it
needs the broker's URL (`--amqp-url`, else `MEGHA_AMQP_URL`), not the services.

Reading a queue without taking its messages is not an AMQP operation, so `list` takes each
letter unacknowledged (`basic.get`) and puts them all back at the end (one `basic.nack` with
requeue): RabbitMQ returns them to their places, in order. `resubmit` publishes a letter to its
source queue, persistent, mandatory and confirmed, and only then acknowledges it out of the
dead-letter queue: a letter whose publish fails (the source queue is gone, the broker refuses)
stays where it was. It looks at no more letters than the queue held when it started, so a
message that fails again at once and comes back as a new letter is not resubmitted twice.

Why it lives in `api/`: it is a client of the broker and shares the letters' contract with the
services, and a client imports `api/` and `common/`, never `services/`
(tests/unit/test_layering.py); `api/` is also in the service image, where it is run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

import pika
import pika.exceptions

from api.dead_letters import (
    DEAD_LETTER_QUEUE,
    ORIGINAL_MESSAGE_ID,
    Letter,
    resubmission_headers,
)
from common.errors import InvalidInput

AMQP_URL_ENV = "MEGHA_AMQP_URL"
LIST_LIMIT = 1000  # letters `list` takes at once: each is held in memory until put back

EPILOG = f"""\
what a dead letter is:
  A GM that cannot take a message of a durable queue (a job: its store is locked, the disk is
  full, the message no longer parses; a batch of task events) retries it a few times, then
  moves it, unchanged, to the queue {DEAD_LETTER_QUEUE} with the reason in its headers. It
  stays there until it is resubmitted; nothing accepted is dropped. Fix the cause (see the
  reason, and the service's `broker_dead_lettered` events), then resubmit.

the broker:
  --amqp-url, else ${AMQP_URL_ENV}: amqp://USER:PASSWORD@HOST:PORT/VHOST, the URL the services
  use (one virtual host is one federation; scripts/rabbitmq.sh url prints the local one).

examples:
  megha dead-letters list
  megha dead-letters list --json
  megha dead-letters resubmit 3f9c2a7b1d04 8e1f00c2a9b3
  megha dead-letters resubmit --all --amqp-url amqp://megha:secret@rabbitmq:5672/%2F

exit status: 0 done; 1 the broker could not be reached, or a letter was not found or not
resubmitted (each is named); 2 bad arguments."""


class BrokerError(RuntimeError):
    """RabbitMQ could not be reached, refused us, or went away mid-command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--amqp-url", default=None, metavar="URL",
                        help=f"RabbitMQ, amqp://user:password@host:port/vhost (default: "
                             f"${AMQP_URL_ENV})")
    common.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up connecting, or waiting on a blocked broker, after this "
                             "long (default 10)")
    actions = parser.add_subparsers(dest="action", metavar="action", required=True)
    show = actions.add_parser(
        "list", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="list the dead letters: id, time, source queue, job, size, runs, reason",
        description="List the dead letters, oldest first, without taking them out of the\n"
                    "queue: each letter's id (for resubmit), when it was dead-lettered, its\n"
                    "source queue, the job id if it is a job, its size in bytes, how many\n"
                    "times a handler ran on it, which service gave up, and the reason.",
        epilog=EPILOG)
    show.add_argument("--json", action="store_true",
                      help="one JSON object per letter and line, every field")
    show.add_argument("--limit", type=int, default=LIST_LIMIT, metavar="N",
                      help=f"show at most N letters, the oldest (default {LIST_LIMIT})")
    again = actions.add_parser(
        "resubmit", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
        help="send letters back to their source queue, then remove them from the dead letters",
        description="Publish each chosen letter to the queue it came from (confirmed by the\n"
                    "broker) and only then remove it from the dead-letter queue. A letter\n"
                    "that cannot be published stays a dead letter.",
        epilog=EPILOG)
    again.add_argument("--all", action="store_true", help="every letter in the queue now")
    again.add_argument("ids", nargs="*", metavar="ID", help="letter ids, as `list` shows them")


def run(args: argparse.Namespace) -> int:
    url = amqp_url(args.amqp_url)
    if args.timeout <= 0:
        raise InvalidInput("--timeout", f"must be positive, got {args.timeout}")
    if args.action == "list" and args.limit < 1:
        raise InvalidInput("--limit", f"must be at least 1, got {args.limit}")
    if args.action == "resubmit" and args.all == bool(args.ids):
        raise InvalidInput("resubmit", "give either --all or letter ids, not both"
                           if args.all else "give --all or the ids of the letters to resubmit")
    try:
        with connect(url, args.timeout) as connection:
            channel = connection.channel()
            if args.action == "list":
                return show_letters(channel, args.limit, args.json)
            return resubmit_letters(channel, None if args.all else set(args.ids))
    except BrokerError as error:
        print(f"megha dead-letters: {error}", file=sys.stderr)
        return 1
    except pika.exceptions.AMQPError as error:  # the connection died mid-command
        print(f"megha dead-letters: lost RabbitMQ at {redacted(url)} ({error!r}); a letter "
              f"not yet resubmitted is still a dead letter", file=sys.stderr)
        return 1


def amqp_url(given: str | None) -> str:
    url = given or os.environ.get(AMQP_URL_ENV, "")
    if not url:
        raise InvalidInput("--amqp-url", f"no broker: give --amqp-url or set {AMQP_URL_ENV}")
    if not url.startswith(("amqp://", "amqps://")):
        raise InvalidInput("--amqp-url", f"expected amqp://user:password@host:port/vhost, got "
                                         f"{redacted(url)!r}")
    return url


def redacted(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    if not sep or not at:
        return url
    return f"{scheme}://{credentials.partition(':')[0]}@{place}"


def connect(url: str, timeout: float) -> pika.BlockingConnection:
    try:
        parameters = pika.URLParameters(url)
    except Exception as error:  # pika reports a bad URL as whatever its parser raised
        raise InvalidInput("--amqp-url", f"cannot read {redacted(url)!r}: {error}") from None
    parameters.connection_attempts = 1
    parameters.socket_timeout = timeout
    parameters.stack_timeout = timeout
    parameters.blocked_connection_timeout = timeout
    where = redacted(url)
    try:
        return pika.BlockingConnection(parameters)
    except (pika.exceptions.ProbableAuthenticationError,
            pika.exceptions.AuthenticationError) as error:
        raise BrokerError(f"RabbitMQ at {where} refused user "
                          f"{parameters.credentials.username!r}: {error!r}") from None
    except pika.exceptions.ProbableAccessDeniedError as error:
        raise BrokerError(f"RabbitMQ at {where} refused access to virtual host "
                          f"{parameters.virtual_host!r}: {error!r}") from None
    except pika.exceptions.AMQPError as error:
        raise BrokerError(f"cannot reach RabbitMQ at {where} (is it running, and is the URL "
                          f"right?): {error!r}") from None


def depth(channel) -> int | None:
    """Letters waiting in the queue, or None if no service has declared it yet. The check is
    passive: the queue's declaration (its arguments) belongs to the services."""
    try:
        return channel.queue_declare(DEAD_LETTER_QUEUE, passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker as error:
        if error.reply_code == 404:
            return None
        raise


def take(channel, count: int):
    """Up to `count` letters, unacknowledged: (delivery tag, properties, body) each."""
    for _ in range(count):
        method, properties, body = channel.basic_get(DEAD_LETTER_QUEUE, auto_ack=False)
        if method is None:
            return
        yield method.delivery_tag, properties, body


def read(properties, body: bytes) -> Letter:
    return Letter.read(properties.message_id, properties.headers, body)


def show_letters(channel, limit: int, as_json: bool) -> int:
    waiting = depth(channel)
    if waiting is None:
        print(f"no dead letters: {DEAD_LETTER_QUEUE} does not exist yet (no service has "
              f"consumed a durable queue on this virtual host)")
        return 0
    letters = [read(properties, body) for _, properties, body in take(channel, limit)]
    channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)  # all back, in order
    if as_json:
        for letter in letters:
            print(json.dumps(asdict(letter)))
        return 0
    print(table(letters))
    more = (waiting or 0) - len(letters)
    if more > 0:
        print(f"... and {more} more (--limit)")
    return 0


def table(letters: list[Letter]) -> str:
    if not letters:
        return f"no dead letters in {DEAD_LETTER_QUEUE}"
    header = ("ID", "DEAD-LETTERED AT", "SOURCE QUEUE", "JOB", "SIZE", "RUNS", "CONSUMER",
              "REASON")
    rows = [(letter.id or "?", letter.dead_lettered_at or "?", letter.source_queue or "?",
             letter.job_id or "-", f"{letter.size}B", str(letter.deliveries),
             letter.consumer or "?", " ".join(letter.reason.split()) or "?")
            for letter in letters]
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header) - 1)]
    lines = ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)),
                        row[-1]]) for row in [header, *rows]]
    return "\n".join([f"{len(letters)} dead letter(s) in {DEAD_LETTER_QUEUE}", *lines])


def resubmit_letters(channel, wanted: set[str] | None) -> int:
    """Resubmit every letter (`wanted` None) or those of the given ids; 1 if one was missing
    or could not be resubmitted."""
    waiting = depth(channel)
    if waiting is None:  # nothing was ever dead-lettered here, so no id can be found
        print(f"no dead letters: {DEAD_LETTER_QUEUE} does not exist yet")
        waiting = 0
    else:
        channel.confirm_delivery()
    resubmitted, failed = 0, 0
    skipped = False  # letters held unacknowledged, to be put back
    for tag, properties, body in take(channel, waiting):
        letter = read(properties, body)
        if wanted is not None and letter.id not in wanted:
            skipped = True  # held until the end: put back now, the next get would return it
            continue
        if wanted is not None:
            wanted.discard(letter.id)
        problem = publish_back(channel, letter, properties, body)
        if problem:
            print(f"megha dead-letters: letter {letter.id or '?'} not resubmitted: {problem}; "
                  f"it stays a dead letter", file=sys.stderr)
            failed += 1
            skipped = True
        else:
            channel.basic_ack(tag)
            resubmitted += 1
            job = f" (job {letter.job_id})" if letter.job_id else ""
            print(f"resubmitted {letter.id} to {letter.source_queue}{job}")
        if wanted is not None and not wanted:
            break
    if skipped:
        channel.basic_nack(delivery_tag=0, multiple=True, requeue=True)
    for missing in sorted(wanted or ()):
        print(f"megha dead-letters: no dead letter with id {missing!r} (`megha dead-letters "
              f"list` shows them)", file=sys.stderr)
    print(f"{resubmitted} letter(s) resubmitted")
    return 1 if failed or wanted else 0


def publish_back(channel, letter: Letter, properties, body: bytes) -> str:
    """Publish a letter to its source queue, confirmed; what went wrong, or "" if nothing."""
    if not letter.source_queue:
        return "it names no source queue (not a letter the services wrote)"
    headers: dict[str, Any] = resubmission_headers(properties.headers)
    original_id = (properties.headers or {}).get(ORIGINAL_MESSAGE_ID)
    back = pika.BasicProperties(delivery_mode=2, content_type=properties.content_type,
                                headers=headers, message_id=original_id or None)
    try:
        channel.basic_publish("", letter.source_queue, body, back, mandatory=True)
    except pika.exceptions.UnroutableError:
        return (f"its source queue {letter.source_queue!r} does not exist (its service never "
                f"started on this virtual host, or the queue was deleted)")
    except pika.exceptions.NackError:
        return f"RabbitMQ refused the publish to {letter.source_queue!r}"
    return ""
