"""docker-compose.yml keeps the testbed's state in named volumes: `docker compose up --build`
(which recreates every container whose image changed), a crash, or `down` then `up` lose none
of it; only `down -v` does.

What is state (docs/architecture.md, "Components" and "Task events"): a GM's store (SQLite,
services/store.py) and an LM's task-event log and epoch (services/outbox_wal.py), both under
MEGHA_STATE_DIR, and RabbitMQ's durable queues and its user, under /var/lib/rabbitmq, kept
under the node's name (rabbit@<hostname>), so the hostname is fixed too. Worker agents and the
load generator keep nothing. Read with PyYAML (anchors and merge keys as compose reads them);
where a Docker engine answers, `docker compose config` must accept the file as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from services import auth

ROOT = Path(__file__).resolve().parents[2]
BROKER_DATA = "/var/lib/rabbitmq"


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def runs(service: dict, module: str) -> bool:
    command = service.get("command") or []
    return isinstance(command, list) and command[-1:] == [module]


def named_volumes(service: dict, declared: dict) -> dict[str, str]:
    """The service's named volumes: mount path -> volume (bind mounts left out)."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, _, rest = entry.partition(":")
        target = rest.split(":")[0]
        if source in declared:
            mounts[target] = source
    return mounts


def state_problems(config: dict) -> list[str]:
    found = []
    declared = config.get("volumes") or {}
    services = config["services"]
    state_dir = config["x-env"]["MEGHA_STATE_DIR"]
    owners: dict[str, str] = {}
    for name, service in services.items():
        mounts = named_volumes(service, declared)
        for volume in mounts.values():
            if volume in owners:
                found.append(f"{name} and {owners[volume]} share the volume {volume}")
            owners[volume] = name
        stateful = runs(service, "services.gm") or runs(service, "services.lm")
        if stateful:
            environment = service.get("environment", {})
            if environment.get("MEGHA_STATE_DIR", state_dir) != state_dir:
                found.append(f"{name}: MEGHA_STATE_DIR is not {state_dir}")
            if state_dir not in mounts:
                found.append(f"{name}: no named volume at MEGHA_STATE_DIR {state_dir}")
        elif name != "rabbitmq" and mounts:
            found.append(f"{name} keeps nothing, yet mounts {sorted(mounts.values())}")
    broker = services.get("rabbitmq", {})
    if BROKER_DATA not in named_volumes(broker, declared):
        found.append(f"rabbitmq: no named volume at {BROKER_DATA}")
    if not broker.get("hostname"):
        found.append("rabbitmq: no fixed hostname (its data is kept under the node's name)")
    return found


def test_every_gm_lm_and_the_broker_keep_their_state() -> None:
    assert state_problems(compose()) == []


def test_the_testbed_has_the_services_it_says() -> None:
    services = compose()["services"]
    gms = [name for name, s in services.items() if runs(s, "services.gm")]
    lms = [name for name, s in services.items() if runs(s, "services.lm")]
    assert sorted(gms) == ["gm-1", "gm-2"] and sorted(lms) == ["lm-1", "lm-2", "lm-3"]
    declared = compose()["volumes"]
    assert {"rabbitmq-data", "gm-1-state", "gm-2-state", "lm-1-state", "lm-2-state",
            "lm-3-state"} <= set(declared)


def gm_without_volume(config: dict) -> None:
    config["services"]["gm-2"]["volumes"] = ["./deploy:/app/deploy:ro"]


def shared_volume(config: dict) -> None:
    config["services"]["gm-2"]["volumes"] = ["./deploy:/app/deploy:ro", "gm-1-state:/app/state"]


def broker_without_volume(config: dict) -> None:
    config["services"]["rabbitmq"]["volumes"] = [
        "./services/healthcheck.py:/usr/local/lib/megha-healthcheck.py:ro"]


def state_elsewhere(config: dict) -> None:
    config["services"]["lm-3"]["environment"]["MEGHA_STATE_DIR"] = "/var/megha"


@pytest.mark.parametrize("breakage, expected", [
    (gm_without_volume, "gm-2: no named volume at MEGHA_STATE_DIR"),
    (shared_volume, "gm-2 and gm-1 share the volume gm-1-state"),
    (broker_without_volume, "rabbitmq: no named volume at /var/lib/rabbitmq"),
    (state_elsewhere, "lm-3: MEGHA_STATE_DIR is not /app/state"),
    (lambda c: c["services"]["rabbitmq"].pop("hostname"), "no fixed hostname"),
])
def test_the_check_fails_a_testbed_that_loses_state(breakage, expected: str) -> None:
    config = compose()
    breakage(config)
    assert any(expected in problem for problem in state_problems(config))


def engine_up() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    return subprocess.run([docker, "info"], capture_output=True, timeout=20).returncode == 0


def test_docker_compose_accepts_the_file() -> None:
    if not engine_up():
        pytest.skip("no Docker engine answers; the YAML checks above stand in for compose")
    tokens = auth.generate_env(["q1"])
    environment = {"MEGHA_RABBITMQ_PASSWORD": "check", **tokens, **auth.digest_env(tokens)}
    result = subprocess.run(["docker", "compose", "--env-file", "/dev/null", "config",
                             "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**os.environ, **environment})
    assert result.returncode == 0, result.stderr
    assert "gm-1-state" in result.stdout and "rabbitmq-data" in result.stdout
    # each service holds its own role's token and only digests of the rest: the least
    # services/auth.py's env_for_role says a process of that role needs
    services = json.loads(result.stdout)["services"]
    roles = {"gm-1": "gm", "gm-2": "gm", "lm-1": "lm", "lm-3": "lm", "lm-2-w1": "worker"}
    for service, role in roles.items():
        given = {name: value for name, value in services[service]["environment"].items()
                 if "TOKEN" in name}
        assert given == auth.env_for_role(tokens, role), service
    loadgen = services["loadgen"]["environment"]
    assert {name for name in loadgen if "TOKEN" in name} == {"MEGHA_USER_TOKENS"}
