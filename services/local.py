"""Run a whole federation as local processes, without Docker, for development and tests.

    python -m services.local --config deploy/federation-small.toml [--logs DIR] [--base-port N]
                             [--tls]

It starts the project's own RabbitMQ (scripts/rabbitmq.sh) unless `--amqp-url` names one,
gives every GM, LM and worker agent a port on 127.0.0.1, starts them with the environment
their `main()` reads, waits until each answers `/healthz`, prints the endpoints, and stays
in the foreground until interrupted; then it stops every process it started. Each process's
JSON event log goes to `DIR/<id>.log` (ids with a slash become `lm-1_w0.log`).

Tokens (services/auth.py): MEGHA_CLUSTER_TOKEN and MEGHA_USER_TOKENS from the environment if
both are set, else fresh random ones, and a token per role (MEGHA_GM_TOKEN, MEGHA_LM_TOKEN,
MEGHA_WORKER_TOKEN: from the environment where set, else fresh), so the federation runs with
role tokens. Each process gets only what its role needs (`env_for_role`): its own role's token,
every other token as its digest (`NAME_SHA256`), and on GMs the user tokens. All of them are
written to `DIR/tokens.env` (readable by the owner only) for `megha replay --tokens` and curl.
`headers(queue)` gives a test's HTTP client the cluster token's header (or a queue's, or with
`role=` a role's).

TLS (`--tls`, `tls=True`): scripts/make-certs.sh makes a CA and a certificate per service in
`DIR/tls/`, every service serves HTTPS with its own (MEGHA_TLS_CERT, MEGHA_TLS_KEY, MEGHA_TLS_CA)
and the endpoints are https://; `DIR/tls/ca.pem` is what a client verifies them with.

`LocalFederation` is the same thing as a context manager, for tests.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from api.auth import (
    CLUSTER_TOKEN_ENV,
    FILE_SUFFIX,
    ROLE_TOKEN_ENVS,
    SECRET_ENVS,
    USER_TOKENS_ENV,
    parse_user_tokens,
)
from api.endpoints import ENV as ENDPOINTS_ENV
from api.endpoints import Endpoints
from api.peers import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV
from common.federation import Federation, load_federation
from services.auth import env_for_role, generate_env, generate_token

ROOT = Path(__file__).resolve().parent.parent
RABBITMQ = ROOT / "scripts" / "rabbitmq.sh"
MAKE_CERTS = ROOT / "scripts" / "make-certs.sh"
MODULES = {"gm": "services.gm", "lm": "services.lm", "worker": "services.worker"}
# What a child must not inherit from this process's environment: the secrets and TLS files
# it is given here (a stray NAME_FILE beside the NAME set here would be refused as both set)
NOT_INHERITED = frozenset({*SECRET_ENVS, *(name + FILE_SUFFIX for name in SECRET_ENVS),
                           TLS_CERT_ENV, TLS_KEY_ENV, TLS_CA_ENV})


def rabbitmq(command: str, *args: str) -> str:
    done = subprocess.run(["bash", str(RABBITMQ), command, *args], capture_output=True,
                          text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/rabbitmq.sh {command} failed:\n{done.stderr}")
    return done.stdout.strip()


def rabbitmq_running() -> bool:
    return subprocess.run(["bash", str(RABBITMQ), "status"], capture_output=True,
                          timeout=60).returncode == 0


def free_port_block(count: int) -> int:
    """A base port with `count` free ports on 127.0.0.1 after it (checked, then used at
    once)."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(20_000, 40_000)
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports")


def _metric_sum(text: str, name: str) -> float:
    """The sum over labels of one Prometheus metric in an exposition text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def log_name(service_id: str) -> str:
    return service_id.replace("/", "_") + ".log"


def cert_name(service_id: str) -> str:
    """A service's certificate's name in scripts/make-certs.sh (a host name: no slash)."""
    return service_id.replace("/", "-")


def make_certs(folder: Path, names: list[str]) -> Path:
    """A CA and a certificate per name in `folder` (scripts/make-certs.sh); the CA's path."""
    done = subprocess.run(["bash", str(MAKE_CERTS), str(folder), *names], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/make-certs.sh failed:\n{done.stderr}")
    return folder / "ca.pem"


@dataclass
class LocalFederation:
    config: Path
    logs: Path
    base_port: int = 18100
    amqp_url: str | None = None
    state_dir: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    tls: bool = False

    def __post_init__(self) -> None:
        self.federation: Federation = load_federation(self.config.read_text(), str(self.config))
        self.roles: dict[str, str] = {}
        for gm in self.federation.gms:
            self.roles[gm] = "gm"
        for lm in self.federation.lms:
            self.roles[lm.id] = "lm"
        for worker in self.federation.workers():
            self.roles[worker] = "worker"
        scheme = "https" if self.tls else "http"
        self.endpoints = Endpoints({service: f"{scheme}://127.0.0.1:{self.base_port + k}"
                                    for k, service in enumerate(self.roles)})
        self.tls_dir = self.logs / "tls"
        self.ca_file: Path | None = None  # made at start, with tls
        self.processes: dict[str, subprocess.Popen] = {}
        self._started_broker = False
        given = {name: os.environ.get(name, "") for name in (CLUSTER_TOKEN_ENV, USER_TOKENS_ENV)}
        self.token_env = (given if all(given.values()) else
                          generate_env([queue.name for queue in self.federation.queues]))
        for variable in ROLE_TOKEN_ENVS.values():
            self.token_env[variable] = (os.environ.get(variable, "")
                                        or self.token_env.get(variable) or generate_token())
        self.cluster_token = self.token_env[CLUSTER_TOKEN_ENV]
        self.user_tokens = parse_user_tokens(self.token_env[USER_TOKENS_ENV])
        self.role_tokens = {role: self.token_env[variable]
                            for role, variable in ROLE_TOKEN_ENVS.items()}
        self.tokens_file = self.logs / "tokens.env"  # written at start

    def headers(self, queue: str | None = None, *, role: str | None = None) -> dict[str, str]:
        """The `Authorization` header of the cluster token, of `queue`'s user token, or of
        `role`'s token."""
        if role is not None:
            token = self.role_tokens[role]
        else:
            token = self.cluster_token if queue is None else self.user_tokens[queue]
        return {"Authorization": f"Bearer {token}"}

    def verify(self) -> ssl.SSLContext | bool:
        """How a client verifies the services: against the CA made at start with TLS."""
        if not self.tls:
            return True
        if self.ca_file is None:
            raise RuntimeError("the federation's CA is made by start()")
        return ssl.create_default_context(cafile=str(self.ca_file))

    def http_client(self, **options) -> httpx.Client:
        """An httpx client to the services (verifying them against the CA with TLS)."""
        return httpx.Client(verify=self.verify(), **options)

    def write_tokens(self) -> Path:
        """`DIR/tokens.env`: the tokens as KEY=VALUE lines, for `megha replay --tokens`."""
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.tokens_file
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text("".join(f"{key}={value}\n" for key, value in self.token_env.items()))
        return path

    # -- processes --------------------------------------------------------------------------------

    def env_for(self, service: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
        env.update({
            "MEGHA_CONFIG": str(self.config), "MEGHA_ID": service,
            ENDPOINTS_ENV: self.endpoints.render(), "MEGHA_AMQP_URL": self.amqp_url or "",
            "MEGHA_STATE_DIR": str(self.state_dir or self.logs / "state"),
            "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT),
        })
        env.update(env_for_role(self.token_env, self.roles[service]))
        if self.tls:
            name = self.tls_dir / cert_name(service)
            env.update({TLS_CERT_ENV: f"{name}.pem", TLS_KEY_ENV: f"{name}.key",
                        TLS_CA_ENV: str(self.tls_dir / "ca.pem")})
        env.update(self.extra_env)
        return env

    def start_service(self, service: str) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        out = open(self.logs / log_name(service), "ab")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen([sys.executable, "-m", MODULES[self.roles[service]]],
                                   env=self.env_for(service), stdout=out,
                                   stderr=subprocess.STDOUT, cwd=ROOT)
        out.close()
        self.processes[service] = process
        return process

    def kill(self, service: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(service, None)
        if process is not None and process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=30)

    def wait_healthy(self, services: list[str] | None = None, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(services or self.roles)
        with self.http_client(timeout=1.0) as client:
            while waiting:
                service = waiting[0]
                process = self.processes.get(service)
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"{service} exited with {process.returncode}; see "
                                       f"{self.logs / log_name(service)}")
                try:
                    if client.get(self.endpoints.url(service) + "/healthz").status_code == 200:
                        waiting.pop(0)
                        continue
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{service} not healthy after {timeout}s; see "
                                       f"{self.logs / log_name(service)}")
                time.sleep(0.1)

    def wait_warm(self, timeout: float = 60.0) -> None:
        """Until every GM's view holds every LM with every node up: figures taken then are a
        running federation's, not those of GMs waiting for their first heartbeats."""
        nodes = sum(len(t) for t in self.federation.topologies())
        deadline = time.monotonic() + timeout
        with self.http_client(timeout=2) as client:
            for gm in self.federation.gms:
                while client.get(self.endpoints.url(gm) + "/healthz").json().get(
                        "nodes_up_in_view", 0) < nodes:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{gm} never saw all {nodes} nodes up")
                    time.sleep(0.1)

    def busy(self) -> dict[str, dict[str, float]]:
        """Per running service, what it has spent so far: its process's CPU seconds (user and
        system, every thread), its core's seconds in `handle`, the events it handled and the
        messages it took in (its /metrics). The difference of two readings is what a stretch
        of work cost."""
        ticks = os.sysconf("SC_CLK_TCK")
        out = {}
        with self.http_client(timeout=5) as client:
            for service, process in self.processes.items():
                try:
                    stat = Path(f"/proc/{process.pid}/stat").read_text()
                    text = client.get(self.endpoints.url(service) + "/metrics").text
                except (OSError, httpx.HTTPError):
                    continue
                fields = stat.rpartition(")")[2].split()  # after the command's name
                cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
                out[service] = {"role": self.roles[service], "cpu_s": cpu,
                                "handle_s": _metric_sum(text, "megha_core_handle_seconds_sum"),
                                "events": _metric_sum(text, "megha_core_events_total"),
                                "messages": _metric_sum(text, "megha_messages_total")}
        return out

    def peak_rss_mib(self) -> float:
        """The peak resident memory of every process still running, summed (Linux)."""
        total = 0
        for process in self.processes.values():
            try:
                status = Path(f"/proc/{process.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        return total / 1024

    # -- the whole federation ---------------------------------------------------------------------

    def start(self) -> None:
        if not self.amqp_url:
            self._started_broker = not rabbitmq_running()
            rabbitmq("start")
            self.amqp_url = rabbitmq("url")
        self.write_tokens()
        if self.tls:
            self.ca_file = make_certs(self.tls_dir, [cert_name(s) for s in self.roles])
        # workers first, then LMs (they recover from their workers), then GMs
        order = sorted(self.roles, key=lambda s: ("worker", "lm", "gm").index(self.roles[s]))
        for service in order:
            self.start_service(service)
        self.wait_healthy()

    def stop(self) -> None:
        for service in list(self.processes):
            process = self.processes[service]
            if process.poll() is None:
                process.terminate()
        for service in list(self.processes):
            try:
                self.processes[service].wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.processes[service].kill()
        self.processes.clear()
        if self._started_broker:
            rabbitmq("stop")

    def __enter__(self) -> LocalFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.local",
        description="Run every GM, LM and worker agent of a federation as local processes.")
    parser.add_argument("--config", type=Path, default=ROOT / "deploy" / "federation.toml",
                        help="federation TOML file (default: deploy/federation.toml)")
    parser.add_argument("--logs", type=Path, default=Path("logs"),
                        help="folder for each process's JSON event log (default: ./logs)")
    parser.add_argument("--base-port", type=int, default=18100,
                        help="first port on 127.0.0.1; services take consecutive ones")
    parser.add_argument("--amqp-url", default=None,
                        help="use this RabbitMQ instead of starting the project's own")
    parser.add_argument("--tls", action="store_true",
                        help="serve HTTPS between the services, with a CA and certificates "
                             "made in LOGS/tls/ (scripts/make-certs.sh)")
    args = parser.parse_args(argv)
    federation = LocalFederation(args.config, args.logs, args.base_port, args.amqp_url,
                                 tls=args.tls)
    stop = False

    def on_signal(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with federation:
        for service, url in federation.endpoints.table.items():
            print(f"{service:12s} {url}", flush=True)
        print(f"logs in {args.logs}/, tokens in {args.logs}/tokens.env; Ctrl-C stops "
              f"everything", flush=True)
        if federation.ca_file is not None:
            print(f"HTTPS: verify with {federation.ca_file} (curl --cacert, or "
                  f"{TLS_CA_ENV}={federation.ca_file} for megha replay)", flush=True)
        while not stop:
            for service, process in federation.processes.items():
                if process.poll() is not None:
                    print(f"{service} exited with {process.returncode}", flush=True)
                    stop = True
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
