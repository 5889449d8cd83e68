"""The broker adapter against a real RabbitMQ: fanout, durable queues, confirms, restarts."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from services.broker import (
    HEARTBEAT_EXCHANGE,
    TASK_EVENTS_EXCHANGE,
    Broker,
    BrokerUnavailable,
    jobs_queue,
    task_events_queue,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def until(predicate, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def test_fanout_reaches_every_consumer(amqp_url: str) -> None:
    async def scenario() -> None:
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        consumers = []
        for name in got:
            broker = Broker(amqp_url, f"gm-{name}")

            async def handler(body: bytes, name=name) -> None:
                got[name].append(body)

            broker.consume_fanout(HEARTBEAT_EXCHANGE, handler)
            await broker.start()
            consumers.append(broker)
        lm = Broker(amqp_url, "lm")
        await lm.start()
        await lm.publish(HEARTBEAT_EXCHANGE, "", b'{"seq": 1}')
        await until(lambda: all(got.values()))
        assert got == {"a": [b'{"seq": 1}'], "b": [b'{"seq": 1}']}
        for broker in [*consumers, lm]:
            await broker.close()

    asyncio.run(scenario())


def test_task_events_wait_in_the_gms_durable_queue(amqp_url: str) -> None:
    gm = unique("gm")

    async def scenario() -> None:
        lm = Broker(amqp_url, "lm")
        received: list[bytes] = []

        async def handler(body: bytes) -> None:
            received.append(body)

        # the GM declares its queue once, goes away; events published meanwhile wait for it
        first = Broker(amqp_url, gm)
        first.consume_queue(task_events_queue(gm), handler, bind_exchange=TASK_EVENTS_EXCHANGE,
                            routing_key=gm)
        await first.start()
        await first.close()
        received.clear()
        await lm.start()
        for k in range(3):
            await lm.publish(TASK_EVENTS_EXCHANGE, gm, f"event {k}".encode(), persistent=True)
        again = Broker(amqp_url, gm)
        again.consume_queue(task_events_queue(gm), handler, bind_exchange=TASK_EVENTS_EXCHANGE,
                            routing_key=gm)
        await again.start()
        await until(lambda: len(received) == 3)
        assert received == [b"event 0", b"event 1", b"event 2"]
        await again.close()
        await lm.close()

    asyncio.run(scenario())


def test_a_failing_handler_does_not_loop_forever(amqp_url: str) -> None:
    """A message no handler can read is run once, then kept as a dead letter (more in
    tests/integration/test_dead_letters.py), not redelivered for ever."""
    user = unique("user")

    async def scenario() -> None:
        calls: list[bytes] = []
        events: list[str] = []

        async def handler(body: bytes) -> None:
            calls.append(body)
            raise ValueError("cannot read this")

        broker = Broker(amqp_url, "gm", events=lambda event, fields: events.append(event))
        broker.declare_queue(jobs_queue(user))
        broker.consume_queue(jobs_queue(user), handler)
        await broker.start()
        await broker.publish("", jobs_queue(user), b"garbage", persistent=True)
        await until(lambda: "broker_dead_lettered" in events)
        await asyncio.sleep(0.5)
        assert calls == [b"garbage"]
        assert events.count("broker_handler_failed") == 1
        await broker.close()

    asyncio.run(scenario())


def test_everything_survives_a_broker_restart(amqp_url: str, restart_rabbitmq) -> None:
    user = unique("user")

    async def scenario() -> None:
        received: list[bytes] = []
        events: list[str] = []

        async def handler(body: bytes) -> None:
            received.append(body)

        producer = Broker(amqp_url, "client", events=lambda e, f: events.append(e))
        producer.declare_queue(jobs_queue(user))
        await producer.start()
        # confirmed persistent messages to a durable queue nobody consumes yet
        consumer = Broker(amqp_url, "gm", events=lambda e, f: events.append(e))
        consumer.consume_queue(jobs_queue(user), handler, prefetch=1)
        await producer.publish("", jobs_queue(user), b"before", persistent=True)
        await asyncio.to_thread(restart_rabbitmq)
        await until(lambda: events.count("broker_connected") >= 2, timeout=30)  # reconnected
        await producer.publish("", jobs_queue(user), b"after", persistent=True, timeout=20)
        await consumer.start()
        await until(lambda: len(received) == 2)
        assert received == [b"before", b"after"]
        assert "broker_disconnected" in events
        await producer.close()
        await consumer.close()

    asyncio.run(scenario())


def test_publish_without_a_broker_fails_clearly() -> None:
    async def scenario() -> None:
        broker = Broker("amqp://megha:x@127.0.0.1:1/%2F", "lonely", connect_timeout=0.5)
        await broker.start(wait=False)
        with pytest.raises(BrokerUnavailable, match="not connected"):
            await broker.publish("", "nowhere", b"x", timeout=0.5)
        await broker.close()

    asyncio.run(scenario())
