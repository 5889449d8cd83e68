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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pika
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.spec import Basic, BasicProperties

log = logging.getLogger(__name__)

HEARTBEAT_EXCHANGE = "megha.heartbeats"
TASK_EVENTS_EXCHANGE = "megha.task_events"
FANOUT = "fanout"
DIRECT = "direct"
EXCHANGES = {HEARTBEAT_EXCHANGE: FANOUT, TASK_EVENTS_EXCHANGE: DIRECT}


def task_events_queue(gm: str) -> str:
    return f"{TASK_EVENTS_EXCHANGE}.{gm}"


def jobs_queue(user: str) -> str:
    return f"megha.jobs.{user}"


class BrokerUnavailable(RuntimeError):
    """A publish could not be confirmed: not connected in time, nacked, or cut off."""


Handler = Callable[[bytes], Awaitable[None]]
EventSink = Callable[[str, dict], None]


@dataclass(slots=True)
class _Consumer:
    queue: str  # "" for a server-named exclusive queue bound to `bind_exchange`
    handler: Handler
    durable: bool
    bind_exchange: str = ""
    routing_key: str = ""
    prefetch: int = 100
    max_length: int | None = None  # messages the queue holds; past it the oldest are dropped


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
    ) -> None:
        self.url = url
        self.name = name
        self._events = events or (lambda event, fields: None)
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
        self._handlers_running: set[asyncio.Task] = set()

    # -- set-up ----------------------------------------------------------------------------------

    def declare_queue(self, queue: str) -> None:
        """A durable queue this side publishes into, declared on every (re)connect: a
        message published to a queue nobody has declared yet would be dropped, confirmed."""
        self._queues.append(queue)

    def consume_queue(self, queue: str, handler: Handler, *, prefetch: int = 100,
                      bind_exchange: str = "", routing_key: str = "") -> None:
        """A durable queue (declared here), optionally bound to an exchange."""
        self._consumers.append(_Consumer(queue, handler, True, bind_exchange, routing_key,
                                         prefetch))

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
                      persistent: bool = False, timeout: float = 5.0) -> None:
        """Publish and wait for the broker's confirm; `BrokerUnavailable` if it does not come.

        The caller decides about retrying: a confirmed message is safe in RabbitMQ (on disk
        if `persistent` and the queue is durable); an unconfirmed one may or may not be.
        """
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
                                     content_type="application/json")
        channel.basic_publish(exchange, routing_key, body, properties)
        try:
            await asyncio.wait_for(confirmed, max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise BrokerUnavailable(f"{self.name}: no confirm within {timeout}s") from None

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
            task = asyncio.get_running_loop().create_task(
                self._handle(consumer, ch, method.delivery_tag, body, generation))
            self._handlers_running.add(task)
            task.add_done_callback(self._handlers_running.discard)

        channel.basic_consume(queue=queue, on_message_callback=on_message)

    async def _handle(self, consumer: _Consumer, channel, tag: int, body: bytes,
                      generation: int) -> None:
        """Run the handler, then acknowledge: what the handler did not finish is redelivered."""
        try:
            await consumer.handler(body)
        except Exception as error:
            self._events("broker_handler_failed", {"queue": consumer.queue or
                                                   consumer.bind_exchange,
                                                   "error": repr(error)[:300]})
            if generation == self._generation and channel.is_open:
                channel.basic_nack(tag, requeue=False)
            return
        if generation == self._generation and channel.is_open:
            channel.basic_ack(tag)

    def _on_channel_closed(self, channel, reason) -> None:
        if not self._closing:
            self._events("broker_channel_closed", {"reason": repr(reason)[:300]})
        if self._connection is not None and self._connection.is_open:
            self._connection.close()
        self._lost.set()

    def _drop_connection(self) -> None:
        self._connected.clear()
        self._channel = None
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
