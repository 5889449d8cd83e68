"""Packing simulation: one packing scheduler (simulator/models/packing/) on one instance, event by
event, with every constraint checked as it runs.

Events are job releases, task completions and the scheduler's own wake-ups; at each instant all
events due are applied, then the scheduler decides once, and its stops and starts are applied
through `PackingState`, which refuses a machine over capacity, a task outside its placement set
or a migration by a scheduler that does not migrate. A non-preemptive scheduler may not stop a
running task. A scheduler that leaves tasks waiting with nothing running and nothing to wake it
is a deadlock, reported as an error rather than a result.

`record=True` keeps every run segment (task, machine, start, end) so tests can check the
schedule again from scratch.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from simulator.models.packing.model import Instance
from simulator.models.packing.schedulers import DEFAULT_OPTIONS, PACKING_POLICIES, PackingOptions
from simulator.models.packing.state import EPS, PackingState, PackingViolation, Running, TaskKey

RELEASE, END, WAKE = 0, 1, 2  # at one instant: releases and ends before the decision


@dataclass(slots=True)
class Segment:
    key: TaskKey
    machine: int
    start: float
    end: float


@dataclass(slots=True)
class PackingRun:
    algorithm: str
    completion: dict[int, float]  # job -> completion time
    first_start: dict[int, float]  # job -> when its first task started
    weighted_jct: float  # Σ w (C - r) / Σ w
    seconds: float  # the simulation's wall time, LP solves included
    counts: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)  # the scheduler's own (LP solves)
    segments: list[Segment] = field(default_factory=list)


def simulate(instance: Instance, algorithm: str, *, online: bool = False,
             options: PackingOptions = DEFAULT_OPTIONS, record: bool = False) -> PackingRun:
    policy = PACKING_POLICIES.make(algorithm, online=online, options=options)
    state = PackingState(instance)
    started = time.perf_counter()
    queue: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(at: float, kind: int, payload: object) -> None:
        nonlocal seq
        heapq.heappush(queue, (at, kind, seq, payload))
        seq += 1

    for job in instance.jobs:
        push(job.release, RELEASE, job.id)
    completion: dict[int, float] = {}
    first_start: dict[int, float] = {}
    counts = {"decisions": 0, "starts": 0, "preemptions": 0, "migrations": 0,
              "remote_starts": 0}
    segments: list[Segment] = []
    open_segment: dict[TaskKey, Segment] = {}
    wake_pending: float | None = None
    while queue:
        now = queue[0][0]
        state.now = now
        arrived: list[int] = []
        freed: set[int] = set()
        woken = False
        while queue and queue[0][0] <= now + EPS:
            _, kind, _, payload = heapq.heappop(queue)
            if kind == RELEASE:
                state.release(payload)
                arrived.append(payload)
            elif kind == END:
                key, running = payload
                if state.running.get(key) is not running:
                    continue  # it was preempted: a stale end
                freed.add(running.machine)
                if record:
                    open_segment.pop(key).end = now
                if state.finish(key):
                    completion[key[0]] = now
            else:
                woken = True
                wake_pending = None
        if not (arrived or freed or woken):
            continue
        decision = policy.decide(state, arrived, freed)
        counts["decisions"] += 1
        if decision.stops and not policy.preemptive:
            raise PackingViolation(f"{algorithm} is not preemptive but stopped "
                                   f"{decision.stops[:3]}")
        for key in decision.stops:
            state.stop(key)
            counts["preemptions"] += 1
            if record:
                open_segment.pop(key).end = now
        for key, machine in decision.starts:
            moved = key in state.pinned and state.pinned[key] != machine
            running: Running = state.start(key, machine, migration=policy.migration)
            counts["starts"] += 1
            first_start.setdefault(key[0], now)
            counts["migrations"] += moved
            counts["remote_starts"] += machine not in state.task(key).local
            push(running.end(), END, (key, running))
            if record:
                open_segment[key] = Segment(key, machine, now, running.end())
                segments.append(open_segment[key])
        wake = policy.wake_at()
        if wake is not None and wake > now + EPS and wake != wake_pending and state.present:
            push(wake, WAKE, None)
            wake_pending = wake
        if not queue and state.present:
            raise RuntimeError(f"{algorithm} left {len(state.left)} tasks of "
                               f"{len(state.present)} jobs waiting with nothing running at "
                               f"t={now:g}")
    return PackingRun(algorithm=algorithm, completion=completion, first_start=first_start,
                      weighted_jct=instance.weighted_mean(completion),
                      seconds=time.perf_counter() - started,
                      counts=counts | {"jobs": len(completion),
                                       "tasks": sum(len(j.tasks) for j in instance.jobs)},
                      figures=policy.figures(), segments=segments)
