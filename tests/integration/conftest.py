"""Integration tests run real processes against a real RabbitMQ: the project's own broker
(scripts/rabbitmq.sh), started here when it is not running."""

from __future__ import annotations

import uuid

import pytest

from services.local import rabbitmq, rabbitmq_running


@pytest.fixture(scope="session")
def amqp_url():
    """The URL of a virtual host of this session's own on the broker; a broker this session
    started is stopped when the session ends. Every run names its GMs and LMs alike (gm-1,
    lm-1, ...), so two runs on one broker would otherwise share queues: one run's GM would
    take another's task events and jobs."""
    started_here = not rabbitmq_running()
    rabbitmq("start")
    vhost = f"megha-test-{uuid.uuid4().hex[:8]}"
    yield rabbitmq("vhost", vhost)
    if started_here:
        rabbitmq("stop")
    else:
        rabbitmq("delete-vhost", vhost)


@pytest.fixture
def restart_rabbitmq(amqp_url):
    """Call it to restart the broker in the middle of a test."""
    return lambda: rabbitmq("restart")
