"""One workload on the real services, as local processes: every GM, LM and worker agent of a
federation file (services/local.py), the project's RabbitMQ on a virtual host of the run's own,
and the load generator's own replayer over HTTP (loadgen/replay.py). What it leaves is each
process's event log, which `megha inspect` and the twin's fit read.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from common.errors import InvalidInput
from common.federation import load_federation
from loadgen.replay import FINAL_STATES, Replayer
from loadgen.workload import ReplayJob
from services.local import LocalFederation, free_port_block, rabbitmq, rabbitmq_running

IDLE_S = 3.0  # seconds of a warm, idle federation measured before the replay
VHOST_PREFIX = "megha-twin-"
WINDOW_S = 2.0  # how often every service's spending is read during a replay


@dataclass(frozen=True)
class ServicesRun:
    logs: Path  # one <service>.log per process
    processes: int
    wall_s: float  # from the first submission to the last completion
    start_s: float  # starting the processes until every GM saw every node
    peak_rss_mib: float  # the processes' peak resident memory, summed
    accepted: int
    unfinished: int  # accepted jobs that had not ended at the completion timeout
    not_accepted: int
    # per service, over the replay (`busy_s` seconds, from warm to the last completion): CPU
    # seconds, core seconds, core events; and its CPU seconds per second when idle, before
    busy: dict = field(default_factory=dict)
    busy_s: float = 0.0
    # per service, the same read every WINDOW_S from the idle stretch to the end: rows of
    # (seconds, CPU seconds, core seconds, messages, core events), each a window's increase
    windows: dict = field(default_factory=dict)

    def overheads(self) -> dict[str, tuple[float, float]]:
        """Per role, the CPU a service spends outside its core (HTTP, JSON, the broker's
        client, the event log), as (per message taken in, per core event): the non-negative
        least-squares fit, over every window of every service of the role, of the CPU outside
        the core on the window's seconds (timers, heartbeats: not charged), messages and
        events. Windows of few and of wide jobs differ in events per message, which is what
        tells a message's price from its items'."""
        out = {}
        for role in ("gm", "lm", "worker"):
            rows = [row for svc, rows in self.windows.items()
                    if self.busy.get(svc, {}).get("role") == role for row in rows]
            if len(rows) >= 3:
                data = np.array(rows, dtype=float)
                design = data[:, [0, 3, 4]]
                (_, per_message, per_event), _ = nnls(design, data[:, 1] - data[:, 2])
                out[role] = (float(per_message), float(per_event))
        return out

    def save(self) -> None:
        """`run.json` beside the logs, for a later twin to judge against (--services-logs)."""
        (self.logs / "run.json").write_text(json.dumps(asdict(self) | {"logs": str(self.logs)},
                                                       indent=1))

    @classmethod
    def load(cls, logs: Path) -> ServicesRun:
        try:
            data = json.loads((logs / "run.json").read_text())
        except (OSError, ValueError) as error:
            raise InvalidInput("--services-logs", f"{logs} holds no services' run (run.json: "
                                                  f"{error})") from None
        return cls(**(data | {"logs": logs}))


class _Windows(threading.Thread):
    """Reads every service's spending each WINDOW_S in the background while the replay runs
    (the main thread is the replayer's), and keeps each window's increase."""

    def __init__(self, federation: LocalFederation, first: dict) -> None:
        super().__init__(name="twin-windows", daemon=True)
        self.federation = federation
        self.rows: dict[str, list[list[float]]] = {}
        self._last, self._last_at = first, time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()

    def take(self, reading: dict) -> None:
        with self._lock:
            now = time.monotonic()
            for svc, b in reading.items():
                last = self._last.get(svc)
                if last is not None:
                    self.rows.setdefault(svc, []).append(
                        [now - self._last_at] + [b[k] - last[k] for k in
                                                 ("cpu_s", "handle_s", "messages", "events")])
            self._last, self._last_at = reading, now

    def run(self) -> None:
        while not self._done.wait(WINDOW_S):
            self.take(self.federation.busy())

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)


class Broker:
    """The project's RabbitMQ, started if it does not run, and a virtual host of this run's
    own on it (GMs and LMs are named alike in every run: two runs on one virtual host would
    take each other's jobs and task events). Left as found."""

    def __init__(self, amqp_url: str | None = None) -> None:
        self.given = amqp_url
        self.url = amqp_url or ""
        self._vhost = ""
        self._started = False

    def __enter__(self) -> Broker:
        if self.given is None:
            self._started = not rabbitmq_running()
            rabbitmq("start")
            self._vhost = f"{VHOST_PREFIX}{uuid.uuid4().hex[:8]}"
            self.url = rabbitmq("vhost", self._vhost)
        return self

    def __exit__(self, *exc) -> None:
        if self._vhost:
            rabbitmq("delete-vhost", self._vhost)
        # a broker this run started is stopped, unless another twin is using it (it found the
        # broker running and counts on it): a virtual host of a twin with clients connected
        if self._started and not any(name.startswith(VHOST_PREFIX)
                                     for name in rabbitmq("busy-vhosts").split()):
            rabbitmq("stop")


def run_on_services(config: Path, jobs: Sequence[ReplayJob], logs: Path, *,
                    amqp_url: str | None = None, grace: float = 120.0,
                    say: Callable[[str], None] = print) -> ServicesRun:
    """Start the federation of `config`, wait until it is warm, replay `jobs` open loop,
    wait for them to end (at most `grace` seconds after the last arrival), stop it."""
    try:
        return _run(config, jobs, logs, amqp_url, grace, say)
    except (RuntimeError, TimeoutError) as error:  # a process that exited, or never answered
        raise ServicesDidNotRun(f"the services did not run {config}: {error}") from None


class ServicesDidNotRun(RuntimeError):
    """A service process exited or never became healthy or warm (its log says why)."""


def _run(config: Path, jobs: Sequence[ReplayJob], logs: Path, amqp_url: str | None,
         grace: float, say: Callable[[str], None]) -> ServicesRun:
    with Broker(amqp_url) as broker:
        started = time.monotonic()
        shape = load_federation(config.read_text(), str(config))
        processes = len(shape.gms) + len(shape.lms) + len(shape.workers())
        federation = LocalFederation(config, logs, base_port=free_port_block(processes),
                                     amqp_url=broker.url)
        with federation:
            federation.wait_warm(timeout=120.0)
            warm = time.monotonic() - started
            idle_from, idle_at = federation.busy(), time.monotonic()
            reader = _Windows(federation, idle_from)
            time.sleep(IDLE_S)  # what each service spends doing nothing: timers, heartbeats
            before, replay_at = federation.busy(), time.monotonic()
            reader.take(before)
            reader.start()
            idle = {svc: (before[svc]["cpu_s"] - b["cpu_s"]) / (replay_at - idle_at)
                    for svc, b in idle_from.items() if svc in before}
            say(f"services: {len(federation.processes)} processes up and warm in {warm:.1f} s; "
                f"replaying {len(jobs)} jobs")
            gms = {queue.name: (queue.gm, federation.endpoints.url(queue.gm))
                   for queue in federation.federation.queues}
            replayer = Replayer(jobs, gms, completion_timeout=grace,
                                log=lambda line: say(f"services: {line}"),
                                tokens=federation.user_tokens)
            try:
                result = asyncio.run(replayer.run())
            finally:
                reader.stop()
            after, busy_s = federation.busy(), time.monotonic() - replay_at
            reader.take(after)
            peak = federation.peak_rss_mib()
            processes = len(federation.processes)
    accepted = [o for o in result.outcomes if o.status == "accepted"]
    run = ServicesRun(logs, processes, result.wall_seconds, warm, peak, len(accepted),
                      sum(o.state not in FINAL_STATES for o in accepted),
                      len(result.outcomes) - len(accepted),
                      {svc: {"role": b["role"], "idle_cpu_per_s": idle.get(svc, 0.0)} |
                       {k: b[k] - before[svc][k]
                        for k in ("cpu_s", "handle_s", "events", "messages")}
                       for svc, b in after.items() if svc in before}, busy_s, reader.rows)
    run.save()
    return run
