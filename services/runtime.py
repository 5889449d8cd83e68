"""The imperative shell around one core: feed it events, carry out its commands.

A service owns one core object (GM, LM or worker agent). Every HTTP request, broker message
and timer becomes an event passed to `CoreRunner.handle`, which calls the core synchronously
(no `await` inside, so on the one event loop no lock is needed) and then hands each command
to its executor: `Log` lines go to the event log, I/O commands to small functions that start
asyncio tasks. Commands without an executor are returned to the caller (an HTTP handler
waiting for the LM's `ReplyToGM`, for instance).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from common.commands import Log
from common.startlog import HANDLED_EVENTS
from services.eventlog import EventLog


class CoreRunner:
    def __init__(self, core, svc: str, log: EventLog,
                 registry: CollectorRegistry | None = None) -> None:
        self.core = core
        self.svc = svc
        self.log = log
        self.executors: dict[type, Callable] = {}
        self.registry = registry or CollectorRegistry()
        self._ids = itertools.count(1)
        self.events_total = Counter("megha_core_events_total", "Events handled by the core",
                                    ["event"], registry=self.registry)
        self.handle_seconds = Histogram(
            "megha_core_handle_seconds", "Time the core spends on one event", ["event"],
            registry=self.registry,
            buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0))
        # what the service took in: HTTP requests (but /metrics, /healthz) and broker
        # messages, each a price outside the core (`megha twin` measures it per message)
        self.messages_total = Counter("megha_messages_total", "Messages taken in: HTTP "
                                      "requests and broker messages", registry=self.registry)
        self._tasks: set[asyncio.Task] = set()
        # per event type: its counter and histogram children (labels() is a dict lookup
        # under a lock, paid twice per event otherwise)
        self._metrics: dict[type, tuple] = {}

    def received(self) -> None:
        """One more message taken in."""
        self.messages_total.inc()

    def on(self, command_type: type, executor: Callable) -> None:
        self.executors[command_type] = executor

    def stimulus(self, kind: str) -> str:
        """A stimulus id unique within this service's life; it appears in the event log."""
        return f"{self.svc}:{kind}:{next(self._ids)}"

    def handle(self, event) -> list:
        started = time.perf_counter()
        commands = self.core.handle(event, time.time())
        elapsed = time.perf_counter() - started
        metrics = self._metrics.get(type(event))
        if metrics is None:
            name = type(event).__name__
            metrics = self._metrics[type(event)] = (self.events_total.labels(name),
                                                    self.handle_seconds.labels(name))
        metrics[0].inc()
        metrics[1].observe(elapsed)
        unhandled = []
        with self.log.together():
            for command in commands:
                if type(command) is Log:
                    fields = command.fields
                    if command.event in HANDLED_EVENTS:
                        fields = fields | {"handle_s": round(elapsed, 6)}
                    self.log.emit(command.event, fields)
                    continue
                executor = self.executors.get(type(command))
                if executor is None:
                    unhandled.append(command)
                else:
                    executor(command)
        return unhandled

    def spawn(self, coroutine, name: str = "") -> asyncio.Task:
        """Run I/O in the background, keeping a reference so it is not garbage-collected."""
        task = asyncio.get_running_loop().create_task(coroutine, name=name or None)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def tick_forever(self, interval: float, make_tick: Callable[[], object]) -> None:
        """Tick until cancelled. A core exception is logged and ticking goes on: timeouts
        and heartbeats stopping for good would be worse than one lost tick."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.handle(make_tick())
            except Exception as error:
                self.log.emit("tick_failed", {"error": repr(error)[:500]})

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
