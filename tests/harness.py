"""An in-process federation for tests: real GM, LM and worker cores, a controllable network.

Commands become messages in `network`: the events common/routing.py makes of them, with the
stimulus ids it derives. A test (or hypothesis) chooses which message is delivered next, so
stale views, reordered replies and late heartbeats are all reachable. Workers' `RunTask`
commands become entries in `executing`; `finish(attempt)` ends one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from common.cluster import ClusterTopology
from common.commands import JobEnded, KillTask, Log, ReportToLM, RunTask
from common.constraint_model import machine_constraints
from common.events import TaskRunEnded, Tick, WorkerHeartbeat
from common.gm import GlobalMaster, GMConfig
from common.lm import LocalMaster
from common.models import NodeSpec
from common.policies.copies import reprioritizes
from common.policies.fairness import UserQueue
from common.reasons import Reason
from common.resources import Resources
from common.routing import ROUTES, StimulusIds
from common.worker import WorkerAgent

DEFAULT_CAPACITY = Resources(4000, 8192)


@dataclass
class Message:
    role: str  # "gm" | "lm" | "worker"
    target: str
    event: object


def make_topologies(
    num_lms: int,
    nodes_per_lm: int,
    gms: list[str],
    capacity: Resources = DEFAULT_CAPACITY,
    rng: random.Random | None = None,
    workers_per_lm: int = 1,
    constraints: frozenset[int] | None = None,
) -> list[ClusterTopology]:
    """LMs `lm-1..`, nodes `lm-1/n0..`, workers `lm-1/w0..`; random machine constraints
    from the constraint model unless `constraints` fixes them for every node."""
    rng = rng or random.Random(0)
    topologies = []
    for number in range(1, num_lms + 1):
        lm = f"lm-{number}"
        nodes = [
            NodeSpec(f"{lm}/n{i}", lm, f"{lm}/w{i % workers_per_lm}", capacity,
                     machine_constraints(rng) if constraints is None else constraints)
            for i in range(nodes_per_lm)
        ]
        topologies.append(ClusterTopology(lm, nodes, gms))
    return topologies


@dataclass
class Federation:
    topologies: list[ClusterTopology]
    gm_configs: list[GMConfig]
    heartbeat_interval: float = 1.0
    worker_timeout: float = 3.0
    now: float = 0.0
    network: list[Message] = field(default_factory=list)
    executing: dict[str, str] = field(default_factory=dict)  # attempt -> worker
    logs: list[tuple[str, Log]] = field(default_factory=list)
    ended_jobs: list[JobEnded] = field(default_factory=list)
    finished_reports: list[str] = field(default_factory=list)  # attempts workers finished
    validate: bool = True
    queue_depth: int = 0  # [policies.local_queues] depth: attempts may wait on busy nodes
    redundancy: str = "none"  # [policies.redundancy] policy: copies on LMs' idle nodes
    max_copies: int = 4

    def __post_init__(self) -> None:
        self.gms = {c.gm_id: GlobalMaster(c, topologies=self.topologies) for c in self.gm_configs}
        self.lms = {t.lm: LocalMaster(t, heartbeat_interval=self.heartbeat_interval,
                                      worker_timeout=self.worker_timeout,
                                      **self.lm_options())
                    for t in self.topologies}
        self.workers: dict[str, WorkerAgent] = {}
        self.worker_lm: dict[str, str] = {}
        for topology in self.topologies:
            by_worker: dict[str, list[NodeSpec]] = {}
            for node in topology.nodes:
                by_worker.setdefault(node.worker, []).append(node)
            for worker, nodes in by_worker.items():
                self.workers[worker] = WorkerAgent(worker, nodes)
                self.worker_lm[worker] = topology.lm
        self._ids = StimulusIds()

    def lm_options(self) -> dict:
        return {"queue_depth": self.queue_depth, "redundancy": self.redundancy,
                "max_copies": self.max_copies}

    @classmethod
    def simple(cls, num_gms: int = 2, num_lms: int = 2, nodes_per_lm: int = 4,
               job_policy: str = "fifo", fairness: str = "fair_share", seed: int = 0,
               queues: list[UserQueue] | None = None, **kwargs) -> Federation:
        gms = [f"gm-{g}" for g in range(1, num_gms + 1)]
        queues = queues or [UserQueue(f"u{g}", round(1 / num_gms, 6), gm)
                            for g, gm in enumerate(gms, start=1)]
        topology_kwargs = {k: kwargs.pop(k) for k in ("capacity", "constraints", "workers_per_lm")
                           if k in kwargs}
        topologies = make_topologies(num_lms, nodes_per_lm, gms, rng=random.Random(seed),
                                     **topology_kwargs)
        # as `Federation.gm_config` (common/federation.py): GMs send reprioritizations only
        # where workers order by priority
        reprioritize = reprioritizes(kwargs.get("queue_depth", 0), kwargs.get("redundancy", "none"))
        configs = [GMConfig(gm, tuple(queues), job_policy=job_policy, fairness=fairness,
                            seed=seed, reprioritize=reprioritize) for gm in gms]
        return cls(topologies, configs, **kwargs)

    # -- delivery -------------------------------------------------------------------------------

    def stimulus(self, kind: str) -> str:
        """The id of a stimulus from outside the cores (a submission, a tick, a run's end)."""
        return self._ids.new(kind)

    def submit(self, gm: str, job) -> None:
        from common.events import JobSubmitted

        self._run("gm", gm, JobSubmitted(self.stimulus("submit"), job))

    def deliver(self, index: int = 0) -> None:
        message = self.network.pop(index)
        self._run(message.role, message.target, message.event)

    def run_until_quiet(self, limit: int = 100_000) -> None:
        for _ in range(limit):
            if not self.network:
                return
            self.deliver(0)
        raise AssertionError("network never went quiet")

    def tick(self, dt: float = 0.0) -> None:
        """Advance time and tick every role; LMs publish heartbeats when due."""
        self.now += dt
        for lm in list(self.lms):
            self._run("lm", lm, Tick(self.stimulus("tick")))
        for gm in list(self.gms):
            self._run("gm", gm, Tick(self.stimulus("tick")))

    def heartbeat_workers(self) -> None:
        for worker, agent in self.workers.items():
            event = WorkerHeartbeat(self.stimulus("whb"), worker, agent.running_placements(),
                                    agent.queued_ids())
            self._run("lm", self.worker_lm[worker], event)

    def finish(self, attempt_id: str, runtime: float = 1.0) -> None:
        worker = self.executing.pop(attempt_id)
        self._run("worker", worker, TaskRunEnded(self.stimulus("ran"), attempt_id, runtime))

    def finish_all(self, runtime: float = 1.0) -> None:
        for attempt_id in list(self.executing):
            self.finish(attempt_id, runtime)

    def drain(self, rounds: int = 1000) -> None:
        """Deliver, finish and heartbeat until every job ended or nothing moves."""
        for _ in range(rounds):
            self.run_until_quiet()
            if not self.executing:
                self.tick(self.heartbeat_interval)
                self.run_until_quiet()
                if not self.executing:
                    return
            self.finish_all()

    # -- routing ----------------------------------------------------------------------------------

    def _run(self, role: str, target: str, event) -> None:
        actor = {"gm": self.gms, "lm": self.lms, "worker": self.workers}[role][target]
        for command in actor.handle(event, self.now):
            self._route(role, target, command, event.stimulus_id)
        if self.validate:
            actor.validate()

    def _send(self, role: str, target: str, event) -> None:
        self.network.append(Message(role, target, event))

    def _route(self, role: str, source: str, command, cause: str | None = None) -> None:
        """A command of `source` (of `role`) to another core becomes a message in `network`
        (common/routing.py says which); the others are this driver's own effects. `cause`:
        the id of the stimulus whose handling produced it (None: a test hands it in)."""
        route = ROUTES.get(type(command))
        if route is None:
            self._own_effect(source, command)
            return
        if type(command) is ReportToLM and command.kind is Reason.FINISHED:
            self.finished_reports.append(command.attempt_id)
        event = route.deliver(source, command, cause, self._ids)
        receiver = route.receiver(source, command, self.worker_lm)
        for target in (self.gms if receiver is None else (receiver,)):
            self._send(route.role, target, event)

    def _own_effect(self, source: str, command) -> None:
        match command:
            case Log():
                self.logs.append((source, command))
            case JobEnded():
                self.ended_jobs.append(command)
            case RunTask(attempt_id=attempt):
                self.executing[attempt] = source
            case KillTask(attempt_id=attempt):
                self.executing.pop(attempt, None)
            case _:
                raise AssertionError(f"unrouted command {command!r}")
