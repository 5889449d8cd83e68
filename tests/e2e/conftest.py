"""The compose testbed under test: real containers, driven with the docker SDK and the
`docker compose` CLI, from a project name of its own so that it never touches a testbed a
user has running, and torn down (and checked gone) whatever happens."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "federation.toml"
PROJECT_LABEL = "com.docker.compose.project"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ComposeProject:
    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.project = f"megha-e2e-{uuid.uuid4().hex[:6]}"
        self.ports = {"gm-1": free_port(), "gm-2": free_port()}
        self.env = dict(os.environ, COMPOSE_BAKE="false",
                        MEGHA_RABBITMQ_PASSWORD=secrets.token_urlsafe(12),
                        MEGHA_GM1_PORT=str(self.ports["gm-1"]),
                        MEGHA_GM2_PORT=str(self.ports["gm-2"]))

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        done = subprocess.run(["docker", "compose", "-p", self.project, *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"docker compose {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done

    def container(self, service: str):
        found = self.client.containers.list(all=True, filters={"label": [
            f"{PROJECT_LABEL}={self.project}", f"com.docker.compose.service={service}"]})
        assert len(found) == 1, f"{service}: {len(found)} containers"
        return found[0]

    def gm_url(self, gm: str) -> str:
        return f"http://127.0.0.1:{self.ports[gm]}"

    def probe(self, service: str) -> tuple[bool, str]:
        """Run the container's own health check command once, now: (passed, its output).

        Docker runs it only every `interval` (sparse, so that an idle testbed stays quiet),
        and first one interval after the start; a test asks when it needs to know."""
        container = self.container(service)
        container.reload()
        if container.status != "running":
            return False, container.status
        kind, *command = container.attrs["Config"]["Healthcheck"]["Test"]
        if kind == "CMD-SHELL":
            command = ["/bin/sh", "-c", command[0]]
        result = container.exec_run(command)
        return result.exit_code == 0, result.output.decode(errors="replace").strip()

    def health_status(self, service: str) -> str | None:
        """Docker's own verdict from its last checks: starting, healthy or unhealthy."""
        container = self.container(service)
        container.reload()
        return container.attrs["State"].get("Health", {}).get("Status")

    def wait_healthy(self, services: list[str], timeout: float = 240.0) -> None:
        """Until each service passes its health check command (run here, not waited for)."""
        deadline = time.monotonic() + timeout
        for service in services:
            while True:
                passed, output = self.probe(service)
                if passed:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{service} fails its health check after {timeout}s: "
                                       f"{output}")
                time.sleep(0.5)

    def events(self) -> list[dict]:
        """Every JSON event line every container of the project wrote, in time order."""
        events = []
        for container in self.client.containers.list(
                all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"}):
            for line in container.logs(stdout=True, stderr=False).decode().splitlines():
                if line.startswith("{"):
                    events.append(json.loads(line))
        events.sort(key=lambda event: event["ts"])
        return events

    def replay(self, *args: str, timeout: float = 400) -> tuple[subprocess.Popen, Path]:
        """`megha replay` from the host against the GMs' published ports, in the background."""
        results = Path(f"/tmp/{self.project}-{uuid.uuid4().hex[:6]}.json")
        gms = [f"--gm={gm}={self.gm_url(gm)}" for gm in self.ports]
        process = subprocess.Popen(
            [sys.executable, "-m", "megha", "replay", "--config", str(CONFIG), *gms,
             "--results", str(results), "--timeout", str(timeout), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return process, results

    def leftovers(self) -> dict[str, list[str]]:
        label = {"label": f"{PROJECT_LABEL}={self.project}"}
        return {
            "containers": [c.name for c in self.client.containers.list(all=True, filters=label)],
            "networks": [n.name for n in self.client.networks.list(filters=label)],
            "volumes": [v.name for v in self.client.volumes.list(filters=label)],
        }

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5")


@pytest.fixture(scope="session")
def docker_client():
    """A Docker engine and Compose v2, prepared as the README's quick start prepares them."""
    subprocess.run(["bash", str(ROOT / "deploy" / "prepare.sh")], check=True, timeout=1800)
    client = docker.from_env(timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def testbed(docker_client):
    bed = ComposeProject(docker_client)
    try:
        bed.compose("build")
        yield bed
    finally:
        bed.down()
        left = bed.leftovers()
        assert left == {"containers": [], "networks": [], "volumes": []}, left


def accepted_jobs_all_done(bed: ComposeProject, results: Path) -> dict:
    """The replay's results, checked: every job accepted, every accepted job done."""
    outcome = json.loads(results.read_text())
    summary = outcome["summary"]
    assert summary["accepted"] == summary["jobs"], summary
    assert summary["completed"] == summary["accepted"], summary
    for gm, url in ((gm, bed.gm_url(gm)) for gm in bed.ports):
        for job in outcome["jobs"]:
            if job["gm"] == gm:
                state = httpx.get(f"{url}/v1/jobs/{job['job']}", timeout=10).json()["state"]
                assert state == "done", (job["job"], state)
    return outcome
