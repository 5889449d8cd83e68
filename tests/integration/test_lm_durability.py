"""An LM killed with task events it could not publish: its restart publishes them.

Real processes on a real RabbitMQ (services/local.py), lm-1 reaching the broker through a
TCP relay the test can cut. With the relay cut, lm-1 goes on running tasks and hearing
their ends from its worker, but its task events pile up in its outbox (and its log on disk,
services/outbox_wal.py). It is then killed with SIGKILL and started again on the same state
folder. Every job must complete, no task twice, and every task that finished before the
kill must be completed at its GM by the attempt that ran it, not by a rerun after the GM's
lease declared it lost: the events reached the GMs, late, but all of them.

Without the log (the state folder wiped before the restart) the same scenario still ends
every job, through the GMs' leases, but runs the tasks whose finishes were lost again. With a
damaged log (a bit flipped in one of its records) the restart keeps what precedes the damage,
sets the rest aside in a file next to the log, says so, and starts: no crash loop.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from test_failures import assert_all_done_once, wait_running, workload
from test_federation import CONFIG, free_port_block, read_events, wait_done

from services.local import LocalFederation, rabbitmq
from services.outbox_wal import WAL_NAME, read_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LM = "lm-1"


class BrokerRelay:
    """A TCP relay to RabbitMQ that can be cut: every connection through it is closed and new
    ones are refused until it is restored. Threads, not asyncio: it runs beside the test."""

    def __init__(self, amqp_url: str) -> None:
        parts = urlsplit(amqp_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5672)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{port}"
        self.url = urlunsplit(parts._replace(
            netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))
        self.cut_off = False
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            self.cut_off = True
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.sockets.clear()

    def restore(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.cut_off:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class RelayedFederation(LocalFederation):
    """lm-1 talks to RabbitMQ through `relay`; every other service directly."""

    relay: BrokerRelay | None = None

    def env_for(self, service: str) -> dict[str, str]:
        env = super().env_for(service)
        if service == LM and self.relay is not None:
            env["MEGHA_AMQP_URL"] = self.relay.url
        return env


@pytest.fixture
def own_vhost(amqp_url):
    """A virtual host of this test's own: the federation's ids are every test's, and a run
    elsewhere on the same broker would otherwise share its heartbeats and queues."""
    name = f"megha-durability-{uuid.uuid4().hex[:8]}"
    yield rabbitmq("vhost", name)
    rabbitmq("delete-vhost", name)


@pytest.fixture
def relayed(tmp_path, own_vhost):
    relay = BrokerRelay(own_vhost)
    fed = RelayedFederation(CONFIG, tmp_path / "logs", base_port=free_port_block(6),
                            amqp_url=own_vhost, state_dir=tmp_path / "state")
    fed.relay = relay
    try:
        with fed:
            yield fed, relay
    finally:
        relay.close()


def lm_events(fed: LocalFederation) -> list[dict]:
    return [e for e in read_events(fed.logs) if e["svc"] == LM]


def wait_outbox_settled(client: httpx.Client, fed: LocalFederation,
                        timeout: float = 60.0) -> dict:
    """Until lm-1's workers run nothing and its outbox has stopped growing; its state then."""
    workers = [w for w, owner in fed.federation.workers().items() if owner == LM]
    deadline = time.monotonic() + timeout
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        state = client.get(fed.endpoints.url(LM) + "/v1/state").json()
        idle = not any(client.get(fed.endpoints.url(w) + "/v1/state").json()["running"]
                       for w in workers)
        size = state["task_event_outbox"]
        if size != last:
            last, stable_since = size, time.monotonic()
        if idle and size and time.monotonic() - stable_since > 1.0:
            return state
        time.sleep(0.2)
    raise AssertionError(f"{LM}'s outbox never settled (last size {last})")


def finished_before_kill(fed: LocalFederation) -> dict[str, str]:
    """Task -> the attempt lm-1's first incarnation heard finish (from its log)."""
    finished, incarnations = {}, 0
    for event in lm_events(fed):
        if event["event"] == "lm_started":
            incarnations += 1
        elif event["event"] == "task_finished" and incarnations == 1:
            finished[event["attempt"].split("#")[0]] = event["attempt"]
    return finished


def gm_done(fed: LocalFederation) -> dict[str, str]:
    """Task -> the attempt its GM completed it with."""
    return {e["task"]: e["attempt"] for e in read_events(fed.logs)
            if e["event"] == "task_done" and e["svc"].startswith("gm-")}


def run_crash(fed: LocalFederation, relay: BrokerRelay, *, keep_state: bool,
              damage: Callable[[Path], None] | None = None):
    """The scenario; returns (jobs' final states, jobs, the finishes held at the kill, the
    outbox size at the kill). `damage` is done to lm-1's log between the kill and the
    restart."""
    with httpx.Client(timeout=10, headers=fed.headers()) as client:
        jobs = workload(client, fed, "durable", jobs=3, tasks=4, duration=1.0)
        wait_running(client, fed, LM)
        relay.cut()  # lm-1 keeps working, but nothing it says reaches RabbitMQ
        state = wait_outbox_settled(client, fed)
        assert not state["broker_connected"]
        log = state["task_event_log"]
        assert log["pending"] == state["task_event_outbox"], state
        held = finished_before_kill(fed)
        assert held, "no task finished on lm-1 while it was cut off"
        fed.kill(LM, signal.SIGKILL)
        if not keep_state:
            shutil.rmtree(fed.state_dir / LM)
        if damage is not None:
            damage(fed.state_dir / LM / WAL_NAME)
        relay.restore()
        fed.start_service(LM)
        fed.wait_healthy([LM])
        final = wait_done(client, fed, jobs, timeout=120)
    time.sleep(0.5)  # the last log lines
    return final, jobs, held, state["task_event_outbox"]


def test_a_killed_lm_publishes_the_task_events_it_held_when_it_restarts(relayed) -> None:
    fed, relay = relayed
    final, jobs, held, outbox = run_crash(fed, relay, keep_state=True)
    assert_all_done_once(fed, final, jobs)
    recovered = [e for e in lm_events(fed) if e["event"] == "task_events_recovered"]
    assert [e["count"] for e in recovered] == [0, outbox], recovered
    assert not any(e["torn_tail"] for e in recovered)
    # every finish lm-1 held reached its GM: the task completed by the attempt that ran it
    done = gm_done(fed)
    assert {task: done[task] for task in held} == held
    lost = [e for e in read_events(fed.logs) if e["event"] == "task_requeued"
            and e["svc"].startswith("gm-") and e["task"] in held and e["reason"] == "lost"]
    assert not lost, f"tasks that had finished were requeued: {lost[:5]}"
    epochs = [e["epoch"] for e in lm_events(fed) if e["event"] == "lm_started"]
    assert len(epochs) == 2 and epochs[0] < epochs[1]
    # everything published: the log is empty again
    wal = fed.state_dir / LM / "task-events.wal"
    assert wal.stat().st_size == 0, wal.read_text()[:500]


def test_without_its_log_the_lms_held_finishes_are_lost_and_run_again(relayed) -> None:
    """The same crash with the state folder wiped: the GMs' leases still end every job, but
    only by running again the tasks whose finishes died with the LM."""
    fed, relay = relayed
    final, jobs, held, _ = run_crash(fed, relay, keep_state=False)
    assert {job: status["state"] for job, status in final.items()} == dict.fromkeys(jobs, "done")
    done = gm_done(fed)
    rerun = {task for task, attempt in held.items() if done[task] != attempt}
    assert rerun, "every held finish reached its GM without the log"


class FlipInTheMiddle:
    """Flips one bit in the JSON of the middle pending event's record, and remembers what a
    restart should then find: the events pending before that record, and the tail after."""

    def __init__(self) -> None:
        self.expected_count = -1
        self.tail = b""

    def __call__(self, wal: Path) -> None:
        data = wal.read_bytes()
        records, bad = read_records(data)
        assert bad is None, f"the log was damaged before the test did it: {bad}"
        pending_at: list[set] = [set()]  # the ids pending before each record
        for record in records:
            pending = set(pending_at[-1])
            if "published" in record:
                pending -= {tuple(i) for i in record["published"]}
            else:
                pending.add(tuple(record["id"]))
            pending_at.append(pending)
        events = [n for n, record in enumerate(records)
                  if "id" in record and tuple(record["id"]) in pending_at[-1]]
        assert len(events) >= 2, f"too few pending events to damage one in the middle: {events}"
        target = events[len(events) // 2]
        start = sum(len(line) for line in data.splitlines(keepends=True)[:target])
        damaged = bytearray(data)
        damaged[start + 30] ^= 0x04  # inside the JSON, past the checksum and the space
        wal.write_bytes(bytes(damaged))
        self.expected_count = len(pending_at[target])
        self.tail = bytes(damaged[start:])


def test_a_restart_on_a_damaged_log_sets_the_damage_aside_and_starts(relayed) -> None:
    """The records after the flipped one are not trusted: their events are lost to the GMs,
    whose leases requeue those attempts, so every job still ends, some tasks run again."""
    fed, relay = relayed
    flip = FlipInTheMiddle()
    final, jobs, _, outbox = run_crash(fed, relay, keep_state=True, damage=flip)
    assert {job: status["state"] for job, status in final.items()} == dict.fromkeys(jobs, "done")
    first, recovered = [e for e in lm_events(fed) if e["event"] == "task_events_recovered"]
    assert "set_aside" not in first and not first["torn_tail"]
    assert recovered["torn_tail"]
    assert 0 <= recovered["count"] == flip.expected_count < outbox
    assert "checksum" in recovered["set_aside_reason"], recovered
    aside = Path(recovered["set_aside"])
    assert aside.parent == fed.state_dir / LM and aside.read_bytes() == flip.tail
    assert recovered["set_aside_bytes"] == len(flip.tail)
    assert recovered["set_aside_lines"] == flip.tail.count(b"\n")
    assert recovered["set_aside_intact"] == recovered["set_aside_lines"] - 1
    wal = fed.state_dir / LM / WAL_NAME  # the restarted LM published what it kept
    assert wal.stat().st_size == 0, wal.read_text()[:500]
