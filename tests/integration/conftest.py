"""Integration tests run real processes against a real RabbitMQ: the project's own broker
(scripts/rabbitmq.sh), started here when it is not running."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ = ROOT / "scripts" / "rabbitmq.sh"


def rabbitmq(command: str) -> str:
    done = subprocess.run(["bash", str(RABBITMQ), command], capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/rabbitmq.sh {command} failed:\n{done.stderr}")
    return done.stdout.strip()


def rabbitmq_running() -> bool:
    return subprocess.run(["bash", str(RABBITMQ), "status"], capture_output=True,
                          timeout=60).returncode == 0


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
