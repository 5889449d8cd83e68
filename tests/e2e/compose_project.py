"""The compose testbed as one object: real containers, driven with the docker SDK and the
`docker compose` CLI, under a project name of its own so that it never touches a testbed a
user has running. The e2e tests (conftest.py) and benchmarks/bench_testbed.py both drive the
testbed through it; it imports nothing from pytest, so a script can use it as it is."""

from __future__ import annotations

import argparse
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

from common.federation import Federation, load_federation
from loadgen.credentials import read_env_file
from loadgen.sources import add_workload_arguments, build_workload
from loadgen.synthesis import infeasible
from loadgen.workload import ReplayJob
from services import auth

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "federation.toml"
PROJECT_LABEL = "com.docker.compose.project"
# Every long-running service of docker-compose.yml: all but `loadgen`, which replays the
# bundled trace as soon as it starts, and which the tests and the benchmark start only when
# they want exactly that.
SERVICES = ["rabbitmq", "gm-1", "gm-2", "lm-1", "lm-2", "lm-3", "lm-1-w0", "lm-1-w1",
            "lm-2-w0", "lm-2-w1", "lm-3-w0", "lm-3-w1"]

# The scheduler-bound workload (`synthesize`): jobs of 4 to 8 tasks, each 500 m cpu and
# 512 MiB for 0.25 to 0.75 s
WIDTH = "choice:4,5,6,7,8"  # tasks per job; `uniform:4,8` rounded would halve 4 and 8
MEAN_WIDTH = 6.0
DURATION = "uniform:0.25,0.75"  # seconds


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ComposeProject:
    """A compose project of the testbed. By default a new one: a random project name after
    `prefix`, free ports for the GMs and a random broker password, nothing started yet.
    `project` and `ports` name one that already runs instead (to read its containers and
    talk to its GMs; its own `.env` is not known here, so do not `compose` it: its tokens
    are taken from the environment, else the repository's `.env`). A new project gets
    random tokens (services/auth.py) of its own."""

    def __init__(self, client: docker.DockerClient, prefix: str = "megha-e2e",
                 project: str | None = None, ports: dict[str, int] | None = None) -> None:
        self.client = client
        self.project = project or f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.ports = ports or {"gm-1": free_port(), "gm-2": free_port()}
        self.env = dict(os.environ, COMPOSE_BAKE="false",
                        MEGHA_RABBITMQ_PASSWORD=secrets.token_urlsafe(12),
                        MEGHA_GM1_PORT=str(self.ports["gm-1"]),
                        MEGHA_GM2_PORT=str(self.ports["gm-2"]))
        if project is None:
            queues = [q.name for q in load_federation(CONFIG.read_text(), str(CONFIG)).queues]
            self.env.update(auth.generate_env(queues))
            # the services check the tokens they do not send by digest (docker-compose.yml)
            self.env.update(auth.digest_env(self.env))
        else:
            dotenv = read_env_file(ROOT / ".env") if (ROOT / ".env").is_file() else {}
            for name in (auth.CLUSTER_TOKEN_ENV, auth.USER_TOKENS_ENV):
                self.env[name] = os.environ.get(name) or dotenv.get(name, "")
        self.cluster_token = self.env[auth.CLUSTER_TOKEN_ENV]
        self.user_tokens = auth.parse_user_tokens(self.env[auth.USER_TOKENS_ENV])

    def headers(self) -> dict[str, str]:
        """The operator's `Authorization` header, for reading any queue's jobs."""
        return {"Authorization": f"Bearer {self.cluster_token}"}

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        done = subprocess.run(["docker", "compose", "-p", self.project, *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"docker compose {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done

    def containers(self) -> list:
        """Every container of the project, running or not."""
        return self.client.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})

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
        and first one interval after the start; a caller asks when it needs to know."""
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
        """Every JSON event line every container of the project wrote, in time order (a
        stable sort: lines of one container with the same stamp keep the order written)."""
        events = []
        for container in self.containers():
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
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(os.environ, MEGHA_USER_TOKENS=self.env[auth.USER_TOKENS_ENV]))
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


def synthesize(rate: float, seconds: float, seed: int, federation: Federation,
               config: Path, prefix: str) -> tuple[list[ReplayJob], int]:
    """About `rate` tasks/s for `seconds`, as `megha synth --poisson` makes them: Poisson
    arrivals, jobs of 4 to 8 tasks, tasks of 500 m and 512 MiB for 0.25 to 0.75 s, half of
    them with placement constraints from the Megha model, users drawn equally over the
    federation's queues. It loads the scheduler, not the cluster: at 300 tasks/s about 150 of
    the testbed's 480 half-core slots are busy, so a task waits for GM -> LM -> worker and
    RabbitMQ back, not for a free node.

    Returns the jobs without those with a task no node can run (about 7%: the GMs would
    refuse them), and how many were left out. Leaving out jobs independently of their arrival
    thins a Poisson process into a Poisson process, so the arrivals are drawn at the rate
    that leaves `rate` once they are gone."""
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    kept_share = 1.0
    for _ in range(2):  # the second draw corrects the rate by the share the first kept
        jobs_per_s = rate / MEAN_WIDTH / kept_share
        args = parser.parse_args([
            "--poisson", f"{jobs_per_s:g}", "--count", str(max(1, round(jobs_per_s * seconds))),
            "--width", WIDTH, "--duration", DURATION, "--cpu-m", "500", "--mem-mib", "512",
            "--unconstrained-share", "0.5", "--seed", str(seed), "--config", str(config)])
        jobs = build_workload(args, federation, config, prefix=prefix).jobs
        refused = set(infeasible(jobs, federation))
        kept = [job for job in jobs if job.job_id not in refused]
        kept_share = max(0.5, sum(len(job.tasks) for job in kept)
                         / sum(len(job.tasks) for job in jobs))
    return kept, len(refused)
