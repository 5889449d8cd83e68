"""An LM and its worker agent as real processes against a real RabbitMQ, the test acting as
their GM: launches over HTTP, task events from its durable queue, heartbeats from the fanout.

The federation is deploy/federation-small.toml (lm-1: four nodes on one worker agent, n0 and
n1 in gm-1's partition); its timing is short (worker timeout 1.5 s), so failures show fast.
Every process's output (stdout and stderr) goes to a file under tmp_path; a failing test
prints their tails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from api.auth import CLUSTER_TOKEN_ENV
from api.endpoints import ENV as ENDPOINTS_ENV
from api.endpoints import Endpoints
from common.federation import load_federation
from services.auth import generate_token
from services.broker import HEARTBEAT_EXCHANGE, TASK_EVENTS_EXCHANGE, Broker, task_events_queue

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "federation-small.toml"
FEDERATION = load_federation(CONFIG.read_text(), str(CONFIG))
TIMING = FEDERATION.timing
LM, WORKER, GM = "lm-1", "lm-1/w0", "gm-1"
MODULES = {LM: "services.lm", WORKER: "services.worker"}
TOPOLOGY = FEDERATION.topology(LM)
N0, N1 = "lm-1/n0", "lm-1/n1"  # gm-1's partition
CPU = TOPOLOGY.cap_cpu[0]
RECOVERY_REFUSALS = {"lm_recovering", "node_down"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def strict_json(line: str) -> dict:
    """`json.loads` without the NaN and Infinity it tolerates but JSON does not have."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


class Processes:
    """The services one test started; each incarnation logs to a file of its own."""

    def __init__(self, tmp_path: Path, amqp_url: str, config: Path = CONFIG) -> None:
        self.dir = tmp_path
        self.amqp_url = amqp_url
        self.config = config
        self.endpoints = Endpoints({service: f"http://127.0.0.1:{free_port()}"
                                    for service in MODULES})
        self.token = generate_token()  # the cluster token: the test calls as the GM would
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.running: dict[str, subprocess.Popen] = {}
        self.started: list[subprocess.Popen] = []
        self.logs: list[tuple[str, Path]] = []
        self._incarnations: Counter[str] = Counter()

    def url(self, service: str) -> str:
        return self.endpoints.url(service)

    def start(self, service: str) -> None:
        self._incarnations[service] += 1
        path = self.dir / f"{service.replace('/', '_')}.{self._incarnations[service]}.log"
        env = dict(os.environ, MEGHA_CONFIG=str(self.config), MEGHA_ID=service,
                   MEGHA_AMQP_URL=self.amqp_url, PYTHONPATH=str(ROOT))
        env[ENDPOINTS_ENV] = self.endpoints.render()
        env[CLUSTER_TOKEN_ENV] = self.token
        # the LM's task-event log: this test's own, kept across its restarts
        env["MEGHA_STATE_DIR"] = str(self.dir / "state")
        # stderr too: a traceback would be a line that is not JSON, and the test would say so
        with open(path, "wb") as out:
            process = subprocess.Popen([sys.executable, "-m", MODULES[service]], env=env,
                                       stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        self.running[service] = process
        self.started.append(process)
        self.logs.append((service, path))

    async def wait_healthy(self, *services: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1.0) as client:
            for service in services:
                while True:
                    process = self.running[service]
                    if process.poll() is not None:
                        raise AssertionError(f"{service} exited with {process.returncode}")
                    try:
                        if (await client.get(self.url(service) + "/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{service} not healthy after {timeout}s")
                    await asyncio.sleep(0.05)

    def kill(self, service: str, sig: int = signal.SIGKILL) -> None:
        process = self.running.pop(service)
        process.send_signal(sig)
        process.wait(timeout=10)

    def stop_all(self) -> None:
        """SIGTERM (a graceful uvicorn shutdown), then SIGKILL what lingers."""
        for process in self.started:
            if process.poll() is None:
                process.terminate()
        for process in self.started:
            try:
                process.wait(timeout=8)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.running.clear()

    def lines(self, service: str) -> list[dict]:
        """Every event of every incarnation of `service` so far (lenient: for inspection)."""
        events = []
        for name, path in self.logs:
            if name == service:
                events += [json.loads(line) for line in path.read_text().splitlines() if line]
        return events

    def tails(self, count: int = 40) -> str:
        parts = []
        for service, path in self.logs:
            lines = path.read_text(errors="replace").splitlines() if path.exists() else []
            parts.append(f"--- {service} ({path.name}), last {count} of {len(lines)} lines")
            parts += lines[-count:]
        return "\n".join(parts)


@pytest.fixture
def procs(tmp_path: Path, amqp_url: str):
    processes = Processes(tmp_path, amqp_url)
    try:
        yield processes
    finally:
        processes.stop_all()


@pytest.fixture
def procs_on(tmp_path: Path, amqp_url: str):
    """`procs_on(config)`: the services of a federation file of the test's own, stopped at
    its end whatever happened (a test that stopped them only when it passed left them
    running after a failure)."""
    made: list[Processes] = []

    def make(config: Path) -> Processes:
        made.append(Processes(tmp_path, amqp_url, config))
        return made[-1]

    try:
        yield make
    finally:
        for processes in made:
            processes.stop_all()


def run(procs: Processes, scenario: Callable) -> None:
    """Run an async scenario; on any failure (a timeout too) show what the services said."""
    try:
        asyncio.run(scenario())
    except BaseException:
        print(procs.tails())
        raise


async def until(predicate: Callable[[], object], timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.02)


def placement(job: str, node: str, *, index: int = 0, cpu_m: int = 500, mem_mib: int = 512,
              duration: float | None = 1.0) -> dict:
    task_id = f"{job}/{index}"
    return {"attempt_id": f"{task_id}#1", "node_id": node, "gm": GM, "user": "u1",
            "task": {"task_id": task_id, "job_id": job, "cpu_m": cpu_m, "mem_mib": mem_mib,
                     "duration": duration}}


def unique_job() -> str:
    return f"it-{uuid.uuid4().hex[:8]}"


class FakeGM:
    """gm-1 as the LM sees it: HTTP requests out, task events and heartbeats in."""

    def __init__(self, procs: Processes) -> None:
        self.lm_url = procs.url(LM)
        self.events: list[dict] = []
        self.heartbeats: list[dict] = []
        self.broker = Broker(procs.amqp_url, f"test-{GM}")
        self.broker.consume_queue(task_events_queue(GM), self._on_event,
                                  bind_exchange=TASK_EVENTS_EXCHANGE, routing_key=GM)
        self.broker.consume_fanout(HEARTBEAT_EXCHANGE, self._on_heartbeat)
        self.http = httpx.AsyncClient(timeout=5.0, headers=procs.headers)

    async def __aenter__(self) -> FakeGM:
        await self.broker.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.broker.close()
        await self.http.aclose()

    async def _on_event(self, body: bytes) -> None:
        batch = json.loads(body)  # one message per batch of one LM's events for this GM
        assert batch["events"], batch
        self.events.extend(batch["events"])

    async def _on_heartbeat(self, body: bytes) -> None:
        self.heartbeats.append(json.loads(body))

    async def launch(self, placements: list[dict], *, request_id: str | None = None,
                     kind: str = "launch") -> dict:
        body = {"gm": GM, "request_id": request_id or uuid.uuid4().hex, "kind": kind,
                "placements": placements}
        response = await self.http.post(f"{self.lm_url}/v1/{kind}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def reprioritize(self, job: str, priority: float) -> dict:
        body = {"gm": GM, "job_id": job, "priority": priority}
        response = await self.http.post(f"{self.lm_url}/v1/reprioritize", json=body)
        assert response.status_code == 202, response.text
        return response.json()

    async def launch_when_ready(self, placements: list[dict], timeout: float = 10.0) -> dict:
        """Retry while the LM refuses because it is recovering: what a real GM does."""
        deadline = time.monotonic() + timeout
        while True:
            reply = await self.launch(placements)
            reasons = {result["reason"] for result in reply["results"]}
            if not reasons <= RECOVERY_REFUSALS or time.monotonic() > deadline:
                return reply
            await asyncio.sleep(0.05)

    async def state(self) -> dict:
        response = await self.http.get(f"{self.lm_url}/v1/state")
        assert response.status_code == 200, response.text
        return response.json()

    def kinds(self, attempt_id: str) -> list[str]:
        return [event["kind"] for event in self.events if event["attempt_id"] == attempt_id]

    async def event(self, attempt_id: str, kind: str, timeout: float = 10.0) -> dict:
        def found():
            return next((e for e in self.events
                         if e["attempt_id"] == attempt_id and e["kind"] == kind), None)

        return await until(found, timeout, f"{kind} event of {attempt_id}")


def reasons(reply: dict) -> list[str]:
    return [result["reason"] for result in reply["results"]]


def running_ids(snapshot: dict) -> set[str]:
    return {item["attempt_id"] for item in snapshot["running"] or []}


async def start_both(procs: Processes, gm: FakeGM) -> None:
    """Worker and LM up, and the LM past its recovery with every node up."""
    procs.start(WORKER)
    procs.start(LM)
    await procs.wait_healthy(WORKER, LM)
    all_up = "f" * math.ceil(len(TOPOLOGY) / 4)

    async def ready() -> bool:
        state = await gm.state()
        return not state["recovering"] and state["snapshot"]["up"] == all_up

    deadline = time.monotonic() + 10
    while not await ready():
        assert time.monotonic() < deadline, "the LM did not finish recovering"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(40)
def test_launch_is_refused_until_the_worker_reports_then_runs_and_reports(procs):
    job = unique_job()
    item = placement(job, N0, cpu_m=500, mem_mib=512, duration=1.0)
    attempt = item["attempt_id"]

    async def scenario() -> None:
        procs.start(LM)
        await procs.wait_healthy(LM)
        async with FakeGM(procs) as gm:
            # no worker yet: recovering, then (after the worker timeout) its nodes are down
            assert set(reasons(await gm.launch([item]))) <= RECOVERY_REFUSALS
            mismatch = await gm.http.post(f"{gm.lm_url}/v1/repartition", json={
                "gm": GM, "request_id": "r", "kind": "launch", "placements": [item]})
            assert mismatch.status_code == 422
            assert [d["loc"] for d in mismatch.json()["detail"]] == [["body", "kind"]]
            invalid = await gm.http.post(f"{gm.lm_url}/v1/launch", json={"gm": GM})
            assert invalid.status_code == 422
            assert ["body", "request_id"] in [d["loc"] for d in invalid.json()["detail"]]

            procs.start(WORKER)
            await procs.wait_healthy(WORKER)
            reply = await gm.launch_when_ready([item])
            assert reasons(reply) == ["launched"]
            assert reply["snapshot"]["free_cpu"][0] == CPU - 500

            started = await gm.event(attempt, "started")
            finished = await gm.event(attempt, "finished")
            assert (started["lm"], started["node_id"], started["job_id"]) == (LM, N0, job)
            assert 0.95 <= finished["runtime"] <= 1.5
            assert gm.kinds(attempt) == ["started", "finished"]

            # the fanout shows the resources taken while it ran, then given back
            def taken() -> int | None:
                return next((i for i, hb in enumerate(gm.heartbeats)
                             if attempt in running_ids(hb) and hb["free_cpu"][0] == CPU - 500),
                            None)

            await until(lambda: taken() is not None, 5, "a heartbeat with it running")
            await until(lambda: any(attempt not in running_ids(hb) and hb["free_cpu"][0] == CPU
                                    for hb in gm.heartbeats[taken():]),
                        5, "a later heartbeat with its resources free")
            worker_state = (await gm.http.get(procs.url(WORKER) + "/v1/state")).json()
            assert worker_state["running"] == [] and worker_state["report_outbox"] == 0

    run(procs, scenario)
    procs.stop_all()
    # docs/architecture.md, The event log: every line each process printed is a JSON event
    # of that service
    for service, path in procs.logs:
        lines = path.read_text().splitlines()
        assert lines, f"{service} printed nothing"
        for number, line in enumerate(lines, 1):
            try:
                record = strict_json(line)
            except ValueError as error:
                raise AssertionError(f"{path.name}:{number} is not JSON: {line!r}") from error
            assert isinstance(record["ts"], float) and record["svc"] == service, line
            assert isinstance(record["event"], str) and record["event"], line


@pytest.mark.timeout(40)
def test_overcommitting_batch_is_partly_refused_and_a_retry_runs_nothing_twice(procs):
    job = unique_job()
    batch = [placement(job, N1, index=k, cpu_m=800, mem_mib=1024, duration=1.5)
             for k in range(3)]
    attempts = [item["attempt_id"] for item in batch]

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            seen: list[dict] = []

            async def sample() -> None:
                while True:
                    seen.append((await gm.state())["snapshot"])
                    await asyncio.sleep(0.02)

            sampler = asyncio.create_task(sample())
            reply = await gm.launch(batch, request_id=f"{job}-r1")
            assert reasons(reply) == ["launched", "launched", "stale_view"]
            assert reply["snapshot"]["free_cpu"][1] == CPU - 1600
            again = await gm.launch(batch, request_id=f"{job}-r1")  # the same request, resent
            assert reasons(again) == ["already_running", "already_running", "stale_view"]
            for attempt in attempts[:2]:
                await gm.event(attempt, "finished")
            await asyncio.sleep(TIMING.heartbeat_interval)  # room for a duplicate to show
            sampler.cancel()

            assert [gm.kinds(attempt) for attempt in attempts] == [
                ["started", "finished"], ["started", "finished"], []]
            assert seen and all(0 <= cpu <= cap and mem >= 0
                                for snapshot in seen
                                for cpu, cap, mem in zip(snapshot["free_cpu"], TOPOLOGY.cap_cpu,
                                                         snapshot["free_mem"], strict=True))
            assert min(snapshot["free_cpu"][1] for snapshot in seen) == CPU - 1600
            starts = Counter(record["attempt"] for record in procs.lines(WORKER)
                             if record["event"] == "task_started")
            assert [starts[attempt] for attempt in attempts] == [1, 1, 0]

    run(procs, scenario)


@pytest.mark.timeout(40)
def test_a_cancel_from_the_gm_stops_the_task_on_the_worker(procs):
    item = placement(unique_job(), N1, duration=None)
    attempt = item["attempt_id"]  # holds '/' and '#': the LM's DELETE must quote them

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([item])) == ["launched"]
            await gm.event(attempt, "started")
            response = await gm.http.post(f"{gm.lm_url}/v1/cancel",
                                          json={"gm": GM, "attempt_id": attempt})
            assert response.status_code == 202 and response.json()["cancelled"] is True
            assert running_ids((await gm.state())["snapshot"]) == set()

            async def on_worker() -> dict:
                return (await gm.http.get(procs.url(WORKER) + "/v1/state")).json()

            deadline = time.monotonic() + 3
            while (state := await on_worker())["running"]:
                assert time.monotonic() < deadline, "the worker still runs the cancelled task"
                await asyncio.sleep(0.05)
            assert state["nodes"][N1]["free_cpu_m"] == CPU
            await asyncio.sleep(TIMING.heartbeat_interval)
            assert gm.kinds(attempt) == ["started"]  # its owner asked: nothing to tell it
            assert any(r["event"] == "task_cancelled" and r["attempt"] == attempt
                       for r in procs.lines(WORKER))

    run(procs, scenario)


@pytest.mark.timeout(40)
def test_a_killed_worker_has_its_nodes_marked_down_and_its_tasks_lost(procs):
    item = placement(unique_job(), N0, duration=None)  # runs until killed
    attempt = item["attempt_id"]

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([item])) == ["launched"]
            await gm.event(attempt, "started")
            killed_at = time.monotonic()
            procs.kill(WORKER)
            lost = await gm.event(attempt, "lost", timeout=TIMING.worker_timeout + 5)
            waited = time.monotonic() - killed_at
            # its last heartbeat went out at most one interval before the kill
            earliest = TIMING.worker_timeout - TIMING.worker_heartbeat_interval
            assert earliest - 0.1 <= waited <= TIMING.worker_timeout + 2, waited
            assert "missed its heartbeats" in lost["detail"]
            snapshot = (await gm.state())["snapshot"]
            assert snapshot["up"] == "0" and snapshot["running"] == []
            assert snapshot["free_cpu"] == list(TOPOLOGY.cap_cpu)
            retry = placement(unique_job(), N0)
            assert reasons(await gm.launch([retry])) == ["node_down"]
            # heartbeats keep their own beat: the GM hears of it within one interval
            await until(lambda: any(hb["up"] == "0" for hb in gm.heartbeats),
                        TIMING.heartbeat_interval + 1, "a heartbeat showing the node down")

    run(procs, scenario)


@pytest.mark.timeout(40)
def test_a_restarted_lm_adopts_what_its_worker_runs(procs):
    item = placement(unique_job(), N0, cpu_m=700, duration=4.0)
    attempt = item["attempt_id"]

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([item])) == ["launched"]
            await gm.event(attempt, "started")
            old_epoch = (await gm.state())["epoch"]
            procs.kill(LM)
            procs.start(LM)
            await procs.wait_healthy(LM)
            state = await gm.state()
            assert state["epoch"] > old_epoch

            async def adopted() -> dict | None:
                state = await gm.state()
                running = running_ids(state["snapshot"])
                return state if attempt in running and not state["recovering"] else None

            deadline = time.monotonic() + 3 * TIMING.worker_heartbeat_interval + 1
            while (state := await adopted()) is None:
                assert time.monotonic() < deadline, "the new LM did not adopt the task"
                await asyncio.sleep(0.05)
            assert state["snapshot"]["free_cpu"][0] == CPU - 700
            await until(lambda: any(hb["epoch"] > old_epoch and attempt in running_ids(hb)
                                    for hb in gm.heartbeats), 3, "a new-epoch heartbeat")
            finished = await gm.event(attempt, "finished", timeout=8)
            assert 3.95 <= finished["runtime"] <= 4.6
            assert gm.kinds(attempt) == ["started", "finished"]
            assert any(record["event"] == "attempt_adopted" and record["attempt"] == attempt
                       for record in procs.lines(LM))

    run(procs, scenario)


def rabbitmq(command: str) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "rabbitmq.sh"), command], check=True,
                   capture_output=True, timeout=120)


@contextlib.asynccontextmanager
async def broker_stopped():
    """RabbitMQ stopped for the block's duration, started again whatever happens in it."""
    await asyncio.to_thread(rabbitmq, "stop")
    try:
        yield
    finally:
        await asyncio.to_thread(rabbitmq, "start")


@pytest.mark.timeout(50)
def test_task_events_wait_in_the_outbox_while_rabbitmq_is_down(procs):
    item = placement(unique_job(), N1, duration=0.3)
    attempt = item["attempt_id"]

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            async with broker_stopped():
                # launching needs no broker; both task events are made during the outage
                assert reasons(await gm.launch([item])) == ["launched"]
                await until(lambda: any(r["event"] == "task_finished" for r in procs.lines(LM)),
                            5, "the LM hearing that the task finished")
                state = await gm.state()
                assert state["task_event_outbox"] == 2 and not state["broker_connected"]
            await gm.event(attempt, "finished", timeout=20)
            assert gm.kinds(attempt) == ["started", "finished"]
            events = [r["event"] for r in procs.lines(LM)]
            assert events.index("task_events_delayed") < events.index("task_events_flowing")
            metrics = (await gm.http.get(procs.url(LM) + "/metrics")).text
            assert 'megha_lm_heartbeats_total{result="dropped"}' in metrics

    run(procs, scenario)


def test_an_lm_whose_task_events_cannot_leave_takes_no_new_work(tmp_path, amqp_url):
    """The LM's outbox of task events is bounded: with RabbitMQ away and the outbox full, the
    LM refuses launches (`lm_backlogged`) and shows its nodes unavailable; once the events
    have left it takes work again."""
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text() + "\n[limits]\nlm_task_event_outbox = 2\n")
    procs = Processes(tmp_path, amqp_url, config)
    first = placement(unique_job(), N0, duration=0.2)
    second = placement(unique_job(), N1, duration=0.2)

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            async with broker_stopped():
                assert reasons(await gm.launch([first])) == ["launched"]
                # its start and its end fill the outbox of two
                await until(lambda: any(r["event"] == "lm_backlogged"
                                        for r in procs.lines(LM)), 5, "the LM backlogged")
                reply = await gm.launch([second])
                assert reasons(reply) == ["lm_backlogged"]
                assert int(reply["snapshot"]["up"], 16) == 0  # no node offered meanwhile
                health = (await gm.http.get(procs.url(LM) + "/healthz")).json()
                assert health["backlogged"] is True
            await gm.event(first["attempt_id"], "finished", timeout=20)
            await until(lambda: any(r["event"] == "lm_accepting" for r in procs.lines(LM)),
                        10, "the LM accepting again once its events left")
            assert reasons(await gm.launch([second])) == ["launched"]
            await gm.event(second["attempt_id"], "finished", timeout=10)

    try:
        run(procs, scenario)
    finally:
        procs.stop_all()


def local_queue_config(tmp_path: Path, *, preemptive: bool) -> Path:
    """The small federation with local queues two deep ([policies.local_queues])."""
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text() + "\n[policies.local_queues]\ndepth = 2\n"
                      f"preemptive = {'true' if preemptive else 'false'}\n")
    return config


@pytest.mark.timeout(40)
def test_a_busy_node_queues_at_its_worker_and_the_shortest_goes_first(tmp_path, procs_on):
    """Over real HTTP: a full node takes two more launches into its worker's queue and
    refuses a third; the LM shows the node with no free resources and no queue room; when the
    running task ends, the worker starts the queued task with the least remaining work."""
    procs = procs_on(local_queue_config(tmp_path, preemptive=False))
    running = placement(unique_job(), N0, cpu_m=CPU, duration=1.0)
    longer = {**placement(unique_job(), N0, cpu_m=CPU, duration=0.5), "priority": 50.0}
    shorter = {**placement(unique_job(), N0, cpu_m=CPU, duration=0.5), "priority": 5.0}
    refused = placement(unique_job(), N0, cpu_m=CPU, duration=0.5)

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([running])) == ["launched"]
            reply = await gm.launch([longer, shorter, refused])
            assert reasons(reply) == ["queued", "queued", "queue_full"]
            assert reply["snapshot"]["free_cpu"][0] == 0
            room = int(reply["snapshot"]["queue_room"], 16) >> (4 * len(
                reply["snapshot"]["queue_room"]) - len(TOPOLOGY))
            assert not room >> (len(TOPOLOGY) - 1) & 1  # n0: its queue is full
            first = await gm.event(shorter["attempt_id"], "started")
            second = await gm.event(longer["attempt_id"], "started")
            assert first["at"] < second["at"]
            await gm.event(longer["attempt_id"], "finished")
            state = (await gm.state())["snapshot"]
            assert state["free_cpu"][0] == CPU

    run(procs, scenario)
    waits = {r["attempt"]: r["queued_seconds"] for r in procs.lines(WORKER)
             if r["event"] == "task_started"}
    assert waits[shorter["attempt_id"]] >= 0.8  # it waited behind the running task


@pytest.mark.timeout(40)
def test_a_reprioritized_job_moves_ahead_in_the_workers_queue(tmp_path, procs_on):
    """Over real HTTP: of two tasks queued behind a running one, the longer job's goes
    second; the GM's `POST /v1/reprioritize` (its estimate shrank) reaches the worker through
    the LM's batch, the worker re-keys its queue, and that task starts first."""
    procs = procs_on(local_queue_config(tmp_path, preemptive=False))
    running = placement(unique_job(), N0, cpu_m=CPU, duration=2.0)
    longer = {**placement(unique_job(), N0, cpu_m=CPU, duration=0.5), "priority": 50.0}
    shorter = {**placement(unique_job(), N0, cpu_m=CPU, duration=0.5), "priority": 5.0}
    job = longer["task"]["job_id"]

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([running])) == ["launched"]
            await gm.event(running["attempt_id"], "started")
            assert reasons(await gm.launch([longer, shorter])) == ["queued", "queued"]
            assert await gm.reprioritize(job, 1.0) == {"job_id": job}
            rekeyed = await until(lambda: [e for e in procs.lines(WORKER)
                                           if e["event"] == "worker_reprioritized"], 5,
                                  "the worker re-keys its queue")
            assert rekeyed[0]["job"] == job and rekeyed[0]["priority"] == 1.0
            async with httpx.AsyncClient(headers=procs.headers) as client:
                worker = (await client.get(procs.url(WORKER) + "/v1/state")).json()
            assert {q["attempt_id"]: q["priority"] for q in worker["queued"]} == {
                longer["attempt_id"]: 1.0, shorter["attempt_id"]: 5.0}
            assert not gm.kinds(longer["attempt_id"])  # re-keyed before the node freed up
            first = await gm.event(longer["attempt_id"], "started")
            second = await gm.event(shorter["attempt_id"], "started")
            assert first["at"] < second["at"]
            await gm.event(shorter["attempt_id"], "finished")

    run(procs, scenario)


@pytest.mark.timeout(40)
def test_a_preemptive_queue_suspends_a_long_task_for_a_far_shorter_one(tmp_path, procs_on):
    """Over real HTTP: a far shorter arrival suspends the running task; the worker reports
    the suspension, the LM gives its resources to the short task's start, and the long task
    resumes and finishes once, its runtime its whole time running."""
    procs = procs_on(local_queue_config(tmp_path, preemptive=True))
    long = {**placement(unique_job(), N0, cpu_m=CPU, duration=2.0), "priority": 100.0}
    short = {**placement(unique_job(), N0, cpu_m=CPU, duration=0.3), "priority": 1.0}

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([long])) == ["launched"]
            await gm.event(long["attempt_id"], "started")
            assert reasons(await gm.launch([short])) == ["queued"]
            await gm.event(short["attempt_id"], "finished")
            finished = await gm.event(long["attempt_id"], "finished")
            assert 1.9 <= finished["runtime"] <= 2.6
            assert gm.kinds(long["attempt_id"]) == ["started", "finished"]
            state = (await gm.state())["snapshot"]
            assert state["free_cpu"][0] == CPU

    run(procs, scenario)
    lines = procs.lines(WORKER)
    assert [r["attempt"] for r in lines if r["event"] == "task_suspended"] == [
        long["attempt_id"]]
    assert any(r["event"] == "task_started" and r.get("resumed") for r in lines)


@pytest.mark.timeout(40)
def test_copies_run_on_idle_nodes_yield_to_a_launch_and_the_task_finishes_once(tmp_path,
                                                                             procs_on):
    """Over real HTTP, with [policies.redundancy] srpt+r: a running task gets copies on the
    idle nodes (its progress asked for through the worker's batch endpoint), which the GM
    sees free; a launch onto a copy's node stops that copy at the worker; the first attempt
    to finish completes the task once, the others are cancelled at the worker and every
    node is free again."""
    config = tmp_path / "federation.toml"
    # mildly varying node speeds (rate CoV 0.14): the workers' speed processes run on the
    # services' wall clock
    config.write_text(CONFIG.read_text() + '\n[policies.redundancy]\npolicy = "srpt+r"\n'
                      'max_copies = 0\n\n[variability]\nmodel = "gamma"\nshape = 50.0\n'
                      "interval = 1.0\n")
    procs = procs_on(config)
    task = placement(unique_job(), N0, cpu_m=500, duration=2.0)
    other = placement(unique_job(), N1, cpu_m=500, duration=0.3)

    async def scenario() -> None:
        async with FakeGM(procs) as gm:
            await start_both(procs, gm)
            assert reasons(await gm.launch([task])) == ["launched"]
            await gm.event(task["attempt_id"], "started")
            copies = await until(lambda: [e for e in procs.lines(LM)
                                          if e["event"] == "copy_launched"], 5, "copies")
            assert {e["node"] for e in copies} == set(TOPOLOGY.node_ids[1:])
            state = (await gm.state())["snapshot"]
            assert state["free_cpu"] == [CPU - 500] + [CPU] * (len(TOPOLOGY) - 1)
            assert running_ids(state) == {task["attempt_id"]}
            # a launch where a copy runs: accepted, the copy makes way
            assert reasons(await gm.launch([other])) == ["launched"]
            await gm.event(other["attempt_id"], "finished")
            await gm.event(task["attempt_id"], "finished")
            await asyncio.sleep(3 * TIMING.heartbeat_interval)
            assert gm.kinds(task["attempt_id"]) == ["started", "finished"]
            assert not [e for e in gm.events if "~" in e["attempt_id"]]  # copies: LM's own
            state = (await gm.state())["snapshot"]
            assert state["free_cpu"] == [CPU] * len(TOPOLOGY) and not running_ids(state)
            async with httpx.AsyncClient(headers=procs.headers) as client:
                worker = (await client.get(procs.url(WORKER) + "/v1/state")).json()
            assert not worker["running"] and not worker["queued"]

    run(procs, scenario)
    lm_lines, worker_lines = procs.lines(LM), procs.lines(WORKER)
    cancelled = [e for e in lm_lines if e["event"] == "copy_cancelled"]
    on_n1 = next(e["attempt"] for e in lm_lines
                 if e["event"] == "copy_launched" and e["node"] == N1)
    assert any(e["attempt"] == on_n1 and e["why"] == "node_taken" for e in cancelled)
    [won] = [e for e in lm_lines
             if e["event"] == "copy_won" and e["original"] == task["attempt_id"]]
    assert won["checkpoints"] >= 1
    stopped = {e["attempt"] for e in worker_lines if e["event"] == "task_cancelled"}
    assert on_n1 in stopped and {e["attempt"] for e in cancelled} <= stopped
    assert any(e["event"] == "task_checkpointed" and e["attempt"] == task["attempt_id"]
               for e in worker_lines)
