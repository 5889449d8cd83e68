"""Integration tests run real processes against a real RabbitMQ: the project's own broker
(scripts/rabbitmq.sh), started here when it is not running."""

from __future__ import annotations

import pytest

from services.local import rabbitmq, rabbitmq_running


@pytest.fixture(scope="session")
def amqp_url():
    """The broker's URL; a broker this session started is stopped when the session ends."""
    started_here = not rabbitmq_running()
    rabbitmq("start")
    yield rabbitmq("url")
    if started_here:
        rabbitmq("stop")


@pytest.fixture
def restart_rabbitmq(amqp_url):
    """Call it to restart the broker in the middle of a test."""
    return lambda: rabbitmq("restart")
