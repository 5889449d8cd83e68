"""The services' connection to RabbitMQ: declarations, confirmed publishing, consuming,
reconnection. Every exchange and queue is declared here and nowhere else: two services
declaring one queue with different arguments make the second one fail (docs/architecture.md,
Ownership and flows).

Why pika's asyncio adapter, not a BlockingConnection in a thread: the services are asyncio
programs (uvicorn). With `AsyncioConnection`, pika's socket I/O, its AMQP heartbeats and our
callbacks all run on the service's one event loop: nothing crosses threads (pika is not
thread-safe), and message handlers run as tasks scheduled on that loop, never inside pika's
callbacks, so a slow handler delays other work a little but never stops pika from answering
the broker's heartbeats for as long as it runs, as a busy BlockingConnection callback would.

Topology:
- `megha.heartbeats`, a fanout exchange: LMs publish their snapshots; every GM reads them
  through its own exclusive, server-named queue (a restarted GM wants only fresh ones),
  bounded: past `max_length` messages the oldest are dropped (a GM that fell behind needs
  the latest snapshot of each LM, not the backlog of old ones).
- `megha.task_events`, a direct exchange routed by GM id into the durable queue
  `megha.task_events.<gm>`: a GM that is down finds its events waiting when it comes back.
- `megha.jobs.<user>`, one durable queue per user queue, published to with persistent
  messages and publisher confirms: a job is acknowledged to its client only once RabbitMQ
  has it on disk.
- `megha.dead-letters`, one durable queue per virtual host (per federation): the messages of
  durable queues that no handler could take, with why (api/dead_letters.py lists the headers).
  `megha dead-letters list | resubmit` reads them and sends them back (docs/queues.md).

A handler that raises (docs/queues.md, "Dead letters"):
- on a durable queue (jobs, task events: a message there must never be lost) the message stays
  unacknowledged while the handler is run again, `RetryPolicy.runs` times in all with a
  doubling pause, since a locked store or a full disk often clears within seconds. An error
  that says the message itself is unreadable (`ValueError`, which includes pydantic's
  `ValidationError` and `json.JSONDecodeError`, `LookupError`, `TypeError`) is not retried:
  no rerun can read it. Then the message is published to `megha.dead-letters`, persistent,
  mandatory and confirmed, and only once the broker has confirmed the letter is the original
  acknowledged. A letter that cannot be written (broker nack, no confirm, no such queue) is
  tried again; past that the original is put back into its queue (nack with requeue, after a
  pause, so a broken broker does not become a hot loop). Whatever fails, the message is in one
  of the two queues or unacknowledged (and RabbitMQ redelivers it when the channel closes):
  nothing accepted disappears. A crash after the letter's confirm and before the ack makes a
  duplicate letter; resubmitting a job twice is harmless (a job id is one job), a task-event
  batch twice too (the first finish wins).
- on the heartbeat fanout the message is dropped (nack without requeue), as before: the LM's
  next snapshot, a heartbeat later, supersedes it, and a letter of a stale one helps nobody.

Why we publish the letters ourselves rather than declaring the queues with RabbitMQ's
`x-dead-letter-exchange` argument: a queue's arguments are fixed when it is first declared,
and declaring an existing durable queue again with other arguments fails
(PRECONDITION_FAILED, the channel is closed), so every deployment that already has its
`megha.jobs.*` and `megha.task_events.*` queues would have to delete them, with the jobs in
them, to upgrade. Broker-side dead-lettering also carries only RabbitMQ's reason
(`rejected`), not the exception, the consumer or the runs, and drops the letter silently if
the dead-letter exchange is missing, where a mandatory, confirmed publish of our own fails
loudly and keeps the original.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pika
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.spec import Basic, BasicProperties

from api.dead_letters import (
    DEAD_LETTER_QUEUE,
    DELIVERIES,
    FAILURE,
    JOBS_QUEUE_PREFIX,
    describe,
    job_id_of,
    letter_headers,
)

log = logging.getLogger(__name__)

HEARTBEAT_EXCHANGE = "megha.heartbeats"
TASK_EVENTS_EXCHANGE = "megha.task_events"
FANOUT = "fanout"
DIRECT = "direct"
EXCHANGES = {HEARTBEAT_EXCHANGE: FANOUT, TASK_EVENTS_EXCHANGE: DIRECT}


def task_events_queue(gm: str) -> str:
    return f"{TASK_EVENTS_EXCHANGE}.{gm}"


def jobs_queue(user: str) -> str:
    return f"{JOBS_QUEUE_PREFIX}{user}"


class BrokerUnavailable(RuntimeError):
    """A publish could not be confirmed: not connected in time, nacked, or cut off."""


Handler = Callable[[bytes], Awaitable[None]]
EventSink = Callable[[str, dict], None]

# errors that say the message cannot be read (pydantic's ValidationError and json's
# JSONDecodeError are ValueErrors, a missing field a KeyError): rerunning the handler on the
# same bytes cannot succeed, so the message becomes a letter on the first failure
PERMANENT_ERRORS = (ValueError, LookupError, TypeError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a durable queue's failing handler is retried before its message becomes a letter
    (the module docstring says why). The defaults give a failure about 3 s to clear (runs
    after 0, 1 and 3 s) while holding one prefetch slot, never the queue."""

    runs: int = 3  # handler runs per delivery, the first included
    backoff: float = 1.0  # seconds before the second run, doubled before each next one
    letter_tries: int = 3  # publishes of the letter before the original is put back
    requeue_pause: float = 5.0  # seconds before that put-back: no hot loop on a sick broker

    def pause(self, failures: int) -> float:
        return self.backoff * 2 ** (failures - 1)


@dataclass(slots=True)
class _Consumer:
    queue: str  # "" for a server-named exclusive queue bound to `bind_exchange`
    handler: Handler
    durable: bool
    bind_exchange: str = ""
    routing_key: str = ""
    prefetch: int = 100
    max_length: int | None = None  # messages the queue holds; past it the oldest are dropped
    dead_letters: bool = False  # a failing handler: retried, then a letter (else dropped)

    @property
    def name(self) -> str:
        return self.queue or self.bind_exchange


@dataclass(slots=True)
class _Delivery:
    """One message handed to a consumer, with what settling or dead-lettering it needs."""

    consumer: _Consumer
    channel: object  # the pika channel it came on; its tag means nothing on another
    tag: int
    generation: int
    properties: BasicProperties
    redelivered: bool
    body: bytes


class Broker:
    """One AMQP connection of one service, kept alive across broker restarts.

    Register consumers before `start()`; they are declared and resumed on every reconnect.
    `publish()` waits (up to its timeout) for a connection and for the broker's confirm.
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        events: EventSink | None = None,
        connect_timeout: float = 5.0,
        max_backoff: float = 2.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self._events = events or (lambda event, fields: None)
        self._retry = retry or RetryPolicy()
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._consumers: list[_Consumer] = []
        self._queues: list[str] = []  # durable queues this side publishes into
        self._connection: AsyncioConnection | None = None
        self._channel = None
        self._generation = 0  # bumps per channel: delivery tags of an old channel are void
        self._connected = asyncio.Event()
        self._lost = asyncio.Event()
        self._closing = False
        self._runner: asyncio.Task | None = None
        self._next_tag = 0
        self._unconfirmed: dict[int, asyncio.Future] = {}
        self._returned: set[str] = set()  # message ids of mandatory publishes sent back
        self._handlers_running: set[asyncio.Task] = set()

    # -- set-up ----------------------------------------------------------------------------------

    def declare_queue(self, queue: str) -> None:
        """A durable queue this side publishes into, declared on every (re)connect: a
        message published to a queue nobody has declared yet would be dropped, confirmed."""
        self._queues.append(queue)

    def consume_queue(self, queue: str, handler: Handler, *, prefetch: int = 100,
                      bind_exchange: str = "", routing_key: str = "") -> None:
        """A durable queue (declared here), optionally bound to an exchange. A message its
        handler fails on is retried, then sent to the dead-letter queue (module docstring)."""
        self._consumers.append(_Consumer(queue, handler, True, bind_exchange, routing_key,
                                         prefetch, dead_letters=True))
        if DEAD_LETTER_QUEUE not in self._queues:
            self._queues.append(DEAD_LETTER_QUEUE)

    def consume_fanout(self, exchange: str, handler: Handler, *, prefetch: int = 100,
                       max_length: int | None = None) -> None:
        """A fresh exclusive queue on every connection, bound to a fanout exchange; with
        `max_length`, RabbitMQ drops the oldest messages past that many."""
        self._consumers.append(_Consumer("", handler, False, exchange, "", prefetch,
                                         max_length))

    async def start(self, wait: bool = True) -> None:
        """Connect in the background; with `wait`, until the first connection is up."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._keep_connected(), name=f"broker-{self.name}")
        if wait:
            await asyncio.wait_for(self._connected.wait(), timeout=self._connect_timeout * 4)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def close(self) -> None:
        self._closing = True
        if self._connection is not None and not self._connection.is_closed:
            self._connection.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for task in list(self._handlers_running):
            task.cancel()

    # -- publishing --------------------------------------------------------------------------------

    async def publish(self, exchange: str, routing_key: str, body: bytes, *,
                      persistent: bool = False, timeout: float = 5.0,
                      headers: dict | None = None, message_id: str | None = None,
                      content_type: str | None = None, mandatory: bool = False) -> None:
        """Publish and wait for the broker's confirm; `BrokerUnavailable` if it does not come.

        The caller decides about retrying: a confirmed message is safe in RabbitMQ (on disk
        if `persistent` and the queue is durable); an unconfirmed one may or may not be.
        `mandatory` (which needs a `message_id`) makes a message no queue takes an error:
        without it RabbitMQ confirms and drops it.
        """
        if mandatory and not message_id:
            raise ValueError("a mandatory publish needs a message_id to match its return")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await asyncio.wait_for(self._connected.wait(), timeout)
        except TimeoutError:
            raise BrokerUnavailable(f"{self.name}: not connected to RabbitMQ") from None
        channel = self._channel
        if channel is None or not channel.is_open:
            raise BrokerUnavailable(f"{self.name}: channel closed")
        self._next_tag += 1
        confirmed: asyncio.Future = loop.create_future()
        self._unconfirmed[self._next_tag] = confirmed
        properties = BasicProperties(delivery_mode=2 if persistent else 1,
                                     content_type=content_type or "application/json",
                                     headers=headers, message_id=message_id)
        channel.basic_publish(exchange, routing_key, body, properties, mandatory=mandatory)
        try:
            await asyncio.wait_for(confirmed, max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise BrokerUnavailable(f"{self.name}: no confirm within {timeout}s") from None
        # RabbitMQ sends a mandatory message's return before its confirm, on the same channel
        if mandatory and message_id in self._returned:
            self._returned.discard(message_id)
            raise BrokerUnavailable(f"{self.name}: no queue took the message: exchange "
                                    f"{exchange!r}, routing key {routing_key!r}")

    def _on_return(self, channel, method, properties, body: bytes) -> None:
        if properties.message_id:
            self._returned.add(properties.message_id)

    def _on_confirm(self, frame) -> None:
        method = frame.method
        ok = isinstance(method, Basic.Ack)
        tags = ([t for t in self._unconfirmed if t <= method.delivery_tag] if method.multiple
                else [method.delivery_tag])
        for tag in tags:
            future = self._unconfirmed.pop(tag, None)
            if future is not None and not future.done():
                if ok:
                    future.set_result(None)
                else:
                    future.set_exception(BrokerUnavailable(f"{self.name}: broker nacked"))

    # -- the connection's life ----------------------------------------------------------------

    async def _keep_connected(self) -> None:
        backoff = 0.1
        while not self._closing:
            try:
                await self._connect_once()
                backoff = 0.1
                self._events("broker_connected", {"url": self._redacted_url()})
                await self._lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # any failure to connect is retried, with backoff
                self._events("broker_connect_failed", {"error": repr(error)[:300]})
            self._drop_connection()
            if self._closing:
                return
            await asyncio.sleep(backoff)
            backoff = min(self._max_backoff, backoff * 2)

    async def _connect_once(self) -> None:
        loop = asyncio.get_running_loop()
        opened: asyncio.Future = loop.create_future()
        self._lost = asyncio.Event()
        parameters = pika.URLParameters(self.url)
        parameters.heartbeat = 10
        parameters.blocked_connection_timeout = 10
        parameters.connection_attempts = 1
        parameters.socket_timeout = self._connect_timeout

        def on_open(connection) -> None:
            if not opened.done():
                opened.set_result(connection)

        def on_open_error(connection, error) -> None:
            if not opened.done():
                opened.set_exception(ConnectionError(f"RabbitMQ connection failed: {error!r}"))

        def on_closed(connection, reason) -> None:
            if not opened.done():
                opened.set_exception(ConnectionError(f"RabbitMQ closed: {reason!r}"))
            if not self._closing:
                self._events("broker_disconnected", {"reason": repr(reason)[:300]})
            self._lost.set()

        self._connection = AsyncioConnection(parameters, on_open, on_open_error, on_closed,
                                             custom_ioloop=loop)
        await asyncio.wait_for(opened, self._connect_timeout)
        channel = await self._callback(lambda cb: self._connection.channel(on_open_callback=cb))
        channel.add_on_close_callback(self._on_channel_closed)
        self._channel = channel
        self._generation += 1
        self._next_tag = 0
        channel.confirm_delivery(ack_nack_callback=self._on_confirm)
        channel.add_on_return_callback(self._on_return)
        for exchange, kind in EXCHANGES.items():
            await self._callback(lambda cb, e=exchange, k=kind: channel.exchange_declare(
                exchange=e, exchange_type=k, durable=True, callback=cb))
        for queue in self._queues:
            await self._callback(lambda cb, q=queue: channel.queue_declare(
                queue=q, durable=True, callback=cb))
        for consumer in self._consumers:
            await self._start_consumer(channel, consumer)
        self._connected.set()

    async def _start_consumer(self, channel, consumer: _Consumer) -> None:
        arguments = (None if consumer.max_length is None else
                     {"x-max-length": consumer.max_length, "x-overflow": "drop-head"})
        declared = await self._callback(lambda cb: channel.queue_declare(
            queue=consumer.queue, durable=consumer.durable, exclusive=not consumer.durable,
            auto_delete=not consumer.durable, arguments=arguments, callback=cb))
        queue = declared.method.queue
        if consumer.bind_exchange:
            await self._callback(lambda cb: channel.queue_bind(
                queue=queue, exchange=consumer.bind_exchange,
                routing_key=consumer.routing_key or queue, callback=cb))
        await self._callback(lambda cb: channel.basic_qos(prefetch_count=consumer.prefetch,
                                                          callback=cb))
        generation = self._generation

        def on_message(ch, method, properties, body: bytes) -> None:
            delivery = _Delivery(consumer, ch, method.delivery_tag, generation, properties,
                                 method.redelivered, body)
            task = asyncio.get_running_loop().create_task(self._handle(delivery))
            self._handlers_running.add(task)
            task.add_done_callback(self._handlers_running.discard)

        channel.basic_consume(queue=queue, on_message_callback=on_message)

    async def _handle(self, delivery: _Delivery) -> None:
        """Run the handler, then acknowledge: what the handler did not finish is redelivered.
        A failure is retried, then dead-lettered, or on the fanout dropped (module docstring)."""
        consumer, policy = delivery.consumer, self._retry
        runs = 0
        while True:
            runs += 1
            try:
                await consumer.handler(delivery.body)
            except Exception as error:
                permanent = isinstance(error, PERMANENT_ERRORS)
                then = ("drop" if not consumer.dead_letters else
                        "dead_letter" if permanent or runs >= policy.runs else "retry")
                self._events("broker_handler_failed", {
                    "queue": consumer.name, "error": repr(error)[:300], "run": runs,
                    "then": then})
                if then == "drop":
                    self._settle(delivery, ack=False)
                elif then == "dead_letter":
                    await self._dead_letter(delivery, error, permanent, runs)
                else:
                    await asyncio.sleep(policy.pause(runs))
                    if self._current(delivery):
                        continue  # else void: RabbitMQ has the message back, and redelivers it
                return
            self._settle(delivery, ack=True)
            return

    async def _dead_letter(self, delivery: _Delivery, error: Exception, permanent: bool,
                           runs: int) -> None:
        """Publish the message to the dead-letter queue, confirmed, and only then ack it; if
        no letter can be written, put the message back into its queue."""
        policy, properties = self._retry, delivery.properties
        letter = uuid.uuid4().hex[:12]
        reason = describe(error)
        headers = letter_headers(
            properties.headers, source_queue=delivery.consumer.queue, reason=reason,
            permanent=permanent, consumer=self.name, runs=runs,
            redelivered=delivery.redelivered, original_message_id=properties.message_id,
            now=dt.datetime.now(dt.UTC))
        for attempt in range(1, policy.letter_tries + 1):
            if not self._current(delivery):
                return  # the channel closed: the original is back in its queue
            try:
                await self.publish("", DEAD_LETTER_QUEUE, delivery.body, persistent=True,
                                   headers=headers, message_id=letter, mandatory=True,
                                   content_type=properties.content_type)
            except BrokerUnavailable as failure:
                last = attempt == policy.letter_tries
                self._events("broker_dead_letter_failed", {
                    "queue": delivery.consumer.name, "letter": letter,
                    "error": str(failure)[:300], "attempt": attempt,
                    "then": "requeue" if last else "retry"})
                await asyncio.sleep(policy.requeue_pause if last else policy.pause(attempt))
                continue
            fields = {"queue": delivery.consumer.name, "letter": letter, "reason": reason,
                      "failure": headers[FAILURE], "consumer": self.name,
                      "deliveries": headers[DELIVERIES]}
            job = job_id_of(delivery.consumer.queue, delivery.body)
            if job is not None:
                fields["job"] = job
            self._events("broker_dead_lettered", fields)
            self._settle(delivery, ack=True)
            return
        self._settle(delivery, ack=False, requeue=True)

    def _current(self, delivery: _Delivery) -> bool:
        """Whether the delivery can still be settled: a tag of an older channel is void."""
        return delivery.generation == self._generation and delivery.channel.is_open

    def _settle(self, delivery: _Delivery, *, ack: bool, requeue: bool = False) -> None:
        if not self._current(delivery):
            return  # the channel closed: RabbitMQ requeued the message itself
        if ack:
            delivery.channel.basic_ack(delivery.tag)
        else:
            delivery.channel.basic_nack(delivery.tag, requeue=requeue)

    def _on_channel_closed(self, channel, reason) -> None:
        if not self._closing:
            self._events("broker_channel_closed", {"reason": repr(reason)[:300]})
        if self._connection is not None and self._connection.is_open:
            self._connection.close()
        self._lost.set()

    def _drop_connection(self) -> None:
        self._connected.clear()
        self._channel = None
        self._returned.clear()
        for future in self._unconfirmed.values():
            if not future.done():
                future.set_exception(BrokerUnavailable(f"{self.name}: connection lost"))
        self._unconfirmed.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not (connection.is_closed or connection.is_closing):
            connection.close()

    async def _callback(self, start: Callable[[Callable], object]):
        """Turn one pika callback-style call into an awaitable, failing if the link drops."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        start(lambda result: done.done() or done.set_result(result))
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            finished, _ = await asyncio.wait({done, lost}, timeout=self._connect_timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if done not in finished:
            raise ConnectionError("RabbitMQ did not answer a declaration in time")
        return done.result()

    def _redacted_url(self) -> str:
        parameters = pika.URLParameters(self.url)
        return f"amqp://{parameters.host}:{parameters.port}{parameters.virtual_host}"
