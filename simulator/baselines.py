"""Baselines on the same engine, cluster and workload: Sparrow and random placement.

They are not the Megha core but small models of published designs, logging the same events
(`job_arrived`, `task_started`, `job_done`) so `megha inspect` compares them with the
federated runs. Both count slots: a node runs `capacity // demand` tasks of a job's size at
once (one in slot mode).

**Sparrow** (Ousterhout et al., SOSP 2013) as its paper describes it: a job of m tasks arrives
at one of the distributed schedulers (here: the GM that serves its user queue); batch
sampling sends probes to d*m distinct random nodes (probe ratio d = 2); each node queues the
probes FIFO; when a slot is free the node takes the next probe and asks the probe's scheduler
for a task (late binding); the scheduler answers with one of the job's unlaunched tasks, or
with nothing once all are launched, and the node goes on to its next probe. A slot waits
while its request is in flight. Every message takes one network delay.

**Random**: every task is sent to one node drawn uniformly at random and waits there in FIFO
order for a slot: no information about load at all.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.errors import InvalidInput
from common.federation import Federation
from common.models import JobSpec, NodeSpec, TaskSpec
from simulator.engine import DelayModel, Engine
from simulator.eventlog import SimLog

DEFAULT_PROBE_RATIO = 2.0


@dataclass(slots=True)
class _Node:
    spec: NodeSpec
    free: int = 0  # slots free for the running job's size (slot mode: 0 or 1)
    queue: deque = field(default_factory=deque)  # Sparrow: probes (job ids); random: tasks


@dataclass(slots=True)
class _Job:
    spec: JobSpec
    scheduler: str
    unlaunched: deque
    left: int


class _SlotSimulation:
    """What both baselines share: the nodes, the clock, the log, job ends."""

    name = "baseline"

    def __init__(self, federation: Federation, jobs: Sequence[JobSpec], log: SimLog, *,
                 delay: DelayModel | None = None, seed: int = 0,
                 progress: Callable[[float, int, int], None] | None = None) -> None:
        self.engine = Engine()
        self.log = log
        self.delay = (delay or DelayModel.parse(None)).sampler(random.Random(f"{seed}/net"))
        self.rng = random.Random(f"{seed}/{self.name}")
        self.progress = progress
        self.jobs = sorted(jobs, key=lambda job: job.arrival)
        self.nodes = [_Node(node) for lm in federation.lms for node in lm.nodes]
        self.queue_gm = {queue.name: queue.gm for queue in federation.queues}
        demands = {task.demand for job in self.jobs for task in job.tasks}
        if len(demands) > 1:
            raise InvalidInput("workload", f"the {self.name} baseline counts slots: every task "
                                           f"must ask for the same resources (use --slots)")
        self.demand = next(iter(demands)) if demands else None
        for node in self.nodes:
            node.free = self._slots(node.spec)
        if self.demand is not None and not any(node.free for node in self.nodes):
            raise InvalidInput("workload", f"no node fits a task of {self.demand}")
        self.live: dict[str, _Job] = {}
        self.ended = 0

    def _slots(self, node: NodeSpec) -> int:
        if self.demand is None:
            return 1
        cap, need = node.capacity, self.demand
        return min(cap.cpu_m // need.cpu_m, cap.mem_mib // need.mem_mib)

    def run(self) -> int:
        for job in self.jobs:
            self.engine.at(job.arrival, self._arrive, job)
        total = len(self.jobs)
        report = None
        if self.progress is not None:
            def report(now: float) -> None:
                self.progress(now, self.ended, total)
        self.engine.stopped = self.ended >= total
        self.engine.run(report)
        if self.ended < total:  # the agenda ran dry with work left: a bug, never a result
            raise AssertionError(f"{self.name}: {total - self.ended} of {total} jobs never "
                                 f"finished")
        if self.progress is not None:
            self.progress(self.engine.now, total, total)
        return self.ended

    def _arrive(self, spec: JobSpec) -> None:
        scheduler = self.queue_gm.get(spec.user, "scheduler")
        self.log.emit(self.engine.now, scheduler, "job_arrived", {
            "job": spec.job_id, "user": spec.user, "gm": scheduler, "tasks": len(spec.tasks),
            "arrival": self.engine.now, "weight": spec.weight})
        job = _Job(spec, scheduler, deque(spec.tasks), len(spec.tasks))
        self.live[spec.job_id] = job
        self._dispatch(job)

    def _dispatch(self, job: _Job) -> None:
        """Send an arrived job's tasks (or probes) towards nodes: each baseline's own."""
        raise NotImplementedError

    def _start(self, node: _Node, job: _Job, task: TaskSpec) -> None:
        node.free -= 1
        spec = node.spec
        self.log.emit(self.engine.now, spec.worker, "task_started", {
            "attempt": f"{task.task_id}#1", "task": task.task_id, "job": job.spec.job_id,
            "node": spec.node_id, "worker": spec.worker, "lm": spec.lm, "gm": job.scheduler,
            "user": job.spec.user, "duration": task.duration, "handle_s": 0.0})
        self.engine.at(self.engine.now + (task.duration or 0.0), self._finish, (node, job))

    def _finish(self, item: tuple[_Node, _Job]) -> None:
        node, job = item
        node.free += 1
        self.engine.at(self.engine.now + self.delay(), self._task_done, job)
        self._next(node)

    def _task_done(self, job: _Job) -> None:
        job.left -= 1
        if job.left == 0:
            spec = job.spec
            self.log.emit(self.engine.now, job.scheduler, "job_done", {
                "job": spec.job_id, "user": spec.user, "gm": job.scheduler,
                "tasks": len(spec.tasks), "arrival": spec.arrival, "reason": ""})
            del self.live[spec.job_id]
            self.ended += 1
            self.engine.stopped = self.ended >= len(self.jobs)

    def _next(self, node: _Node) -> None:
        """Fill a node's free slots from its queue: each baseline's own."""
        raise NotImplementedError


class SparrowSimulation(_SlotSimulation):
    name = "sparrow"

    def __init__(self, *args, probe_ratio: float = DEFAULT_PROBE_RATIO, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not probe_ratio >= 1:
            raise InvalidInput("--probe-ratio", f"must be at least 1, got {probe_ratio}")
        self.probe_ratio = probe_ratio

    def _dispatch(self, job: _Job) -> None:
        # d x m probes on distinct nodes; a job wider than the cluster puts one on every node
        # per round, and the rest on distinct random ones
        probes = math.ceil(self.probe_ratio * len(job.spec.tasks))
        rounds, rest = divmod(probes, len(self.nodes))
        targets = list(range(len(self.nodes))) * rounds
        targets += self.rng.sample(range(len(self.nodes)), rest)
        for index in targets:
            self.engine.at(self.engine.now + self.delay(), self._probe, (self.nodes[index], job))

    def _probe(self, item: tuple[_Node, _Job]) -> None:
        node, job = item
        node.queue.append(job)
        self._next(node)

    def _next(self, node: _Node) -> None:
        while node.free > 0 and node.queue:
            job = node.queue.popleft()
            node.free -= 1  # the slot waits for the scheduler's answer
            self.engine.at(self.engine.now + self.delay(), self._get_task, (node, job))

    def _get_task(self, item: tuple[_Node, _Job]) -> None:
        node, job = item
        task = job.unlaunched.popleft() if job.unlaunched else None
        self.engine.at(self.engine.now + self.delay(), self._answer, (node, job, task))

    def _answer(self, item: tuple[_Node, _Job, TaskSpec | None]) -> None:
        node, job, task = item
        node.free += 1
        if task is None:  # every task of the job already went to other probes
            self._next(node)
        else:
            self._start(node, job, task)


class RandomSimulation(_SlotSimulation):
    name = "random"

    def _dispatch(self, job: _Job) -> None:
        while job.unlaunched:
            task = job.unlaunched.popleft()
            node = self.nodes[self.rng.randrange(len(self.nodes))]
            self.engine.at(self.engine.now + self.delay(), self._arrive_at_node,
                           (node, job, task))

    def _arrive_at_node(self, item: tuple[_Node, _Job, TaskSpec]) -> None:
        node, job, task = item
        node.queue.append((job, task))
        self._next(node)

    def _next(self, node: _Node) -> None:
        while node.free > 0 and node.queue:
            job, task = node.queue.popleft()
            self._start(node, job, task)
