"""The invariants of docs/architecture.md (Invariants), checked on a whole in-process
federation.

A `hypothesis.stateful` machine drives real GlobalMaster, LocalMaster and WorkerAgent cores
through `tests/harness.py`: it submits jobs (with placement constraints, so repartitions
and preemptions happen), delivers in-flight messages in any order (so GMs act on stale
views and replies overtake heartbeats), delivers some twice (retried requests, redelivered
events), finishes running attempts, advances time, and kills and revives worker agents;
one variant also restarts LMs. It runs with the fifo and the slearn job policies, with local
queues, and with redundant copies (srpt+r: finishes of copies and originals race, and
cancels cross finishes), two or three GMs, two LMs of three small nodes. After every step it
checks:

1. no LM over-commits a node;
2. no task is DONE twice and no attempt id is started twice by workers;
5. a task lands in a GM's external partition only through a repartition (or preemption)
   the LM approved, and the LM's `logical` flag says so;
6. a preemption stops only victims the GM named and the LM had running on that node;
7. every GM's estimate of every queue's usage is a fraction: within [0, 1].

At the end it revives every worker and drains the federation, then checks:

3. every submitted job ended exactly once, done, or failed with a reason;
4. one heartbeat interval after activity stops, every GM's view equals every LM's truth
   (and nothing is left holding resources).

Plain tests at the bottom replay the same invariants on hand-built races, and pin the core
bugs these tests found (each docstring says what went wrong).
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from common.cluster import ClusterTopology
from common.commands import Log
from common.events import (
    HeartbeatReceived,
    LaunchRequested,
    LMReplied,
    LMRequestFailed,
    PreemptRequested,
    TaskEventReceived,
    WorkerHeartbeat,
)
from common.gm import GMConfig
from common.lm import LocalMaster
from common.messages import Placement, RequestKind
from common.models import JobSpec, NodeSpec, TaskSpec
from common.policies.copies import makes_copies, reprioritizes
from common.policies.fairness import UserQueue
from common.reasons import Reason
from common.resources import Resources
from common.worker import WorkerAgent

# The harness lives next to this folder and is not a package: make it importable however
# pytest was started.
_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from harness import Federation, Message, make_topologies  # noqa: E402

NODE = Resources(2000, 4096)
CPU_CHOICES = (500, 1000, 1500, 2000)  # all fit a node: contention, never infeasibility
MEM_CHOICES = (512, 1024, 2048, 4096)
MAX_CONSTRAINTS_PER_TASK = 2  # more would leave most tasks a single candidate node
LM_END_EVENTS = {f"task_{kind}" for kind in (Reason.FINISHED, Reason.FAILED, Reason.LOST,
                                             Reason.PREEMPTED, Reason.CANCELLED)}


# -- helpers shared by the machine and the plain tests -----------------------------------------


def make_job(job_id: str, user: str, demands: list[tuple[int, int, frozenset[int]]],
             arrival: float = 0.0, estimate: float | None = None) -> JobSpec:
    tasks = tuple(
        TaskSpec(f"{job_id}/{i}", job_id, Resources(cpu, mem), constraints, 1.0)
        for i, (cpu, mem, constraints) in enumerate(demands)
    )
    return JobSpec(job_id, user, tasks, arrival, estimated_task_duration=estimate)


def owner_of(fed: Federation, lm: str, node_id: str) -> str:
    topology = fed.lms[lm].topology
    return topology.gms[topology.owner[topology.index[node_id]]]


class LogAudit:
    """Reads `fed.logs` incrementally and checks invariants 2, 5 and 6 on every new record.

    It rebuilds, from the logs alone, what the LMs run where, so a preemption can be checked
    against the truth the LM had when it applied it.
    """

    def __init__(self) -> None:
        self.cursor = 0
        self.task_done: Counter[str] = Counter()
        self.worker_started: Counter[str] = Counter()
        self.requested: dict[str, tuple[str, str]] = {}  # attempt -> (gm, how it was asked)
        self.preempts: list[tuple[str, str, frozenset[str]]] = []  # (lm, node, victims)
        self.lm_running: dict[tuple[str, str], str] = {}  # (lm, attempt) -> node
        self.preempted = 0
        self.copy_won: Counter[str] = Counter()  # original attempt -> wins declared

    def lm_restarted(self, lm: str) -> None:
        """A restarted LM knows nothing it ran: it learns again from `attempt_adopted`."""
        self.lm_running = {key: node for key, node in self.lm_running.items() if key[0] != lm}

    def consume(self, fed: Federation) -> None:
        new = fed.logs[self.cursor:]
        self.cursor = len(fed.logs)
        for source, record in new:
            if source in fed.gms:
                self._gm(record)
            elif source in fed.lms:
                self._lm(fed, source, record)
            elif source in fed.workers:
                self._worker(record)

    def _gm(self, record: Log) -> None:
        f = record.fields
        if record.event == "task_done":
            self.task_done[f["task"]] += 1
            assert self.task_done[f["task"]] <= 1, f"task {f['task']} DONE twice: {f}"
        elif record.event == "task_placed":
            self.requested[f["attempt"]] = (f["gm"], f["kind"])
        elif record.event == "preemption_requested":
            self.requested[f["attempt"]] = (f["gm"], "preempt")
            self.preempts.append((f["lm"], f["node"], frozenset(f["victims"])))

    def _worker(self, record: Log) -> None:
        if record.event == "task_started":
            attempt = record.fields["attempt"]
            self.worker_started[attempt] += 1
            assert self.worker_started[attempt] <= 1, f"attempt {attempt} started twice"

    def _lm(self, fed: Federation, lm: str, record: Log) -> None:
        f = record.fields
        if record.event == "copy_won":
            self.copy_won[f["original"]] += 1
            assert self.copy_won[f["original"]] == 1, f"{f['original']} won twice: {f}"
        elif record.event == "task_launched":
            self._check_launch(fed, lm, f)
            self.lm_running[(lm, f["attempt"])] = f["node"]
        elif record.event == "attempt_adopted":
            self.lm_running[(lm, f["attempt"])] = f["node"]
        elif record.event in LM_END_EVENTS:
            node = self.lm_running.pop((lm, f["attempt"]), None)
            assert node == f["node"], f"{lm} ended {f['attempt']} it was not running: {f}"
            if record.event == "task_preempted":
                self.preempted += 1
                # invariant 6: some GM asked this LM to preempt exactly this victim here
                assert any(
                    (plm, pnode) == (lm, node) and f["attempt"] in victims
                    for plm, pnode, victims in self.preempts
                ), f"{lm} preempted {f['attempt']} on {node} without a matching request"

    def _check_launch(self, fed: Federation, lm: str, f: dict) -> None:
        """Invariant 5: external placements are logical and were asked for as such."""
        gm, logical = f["gm"], f.get("logical")
        external = owner_of(fed, lm, f["node"]) != gm
        assert logical is external, f"{lm} launched {f} with logical={logical!r}"
        asked = self.requested.get(f["attempt"])
        assert asked is not None and asked[0] == gm, f"{lm} launched {f} nobody asked for"
        allowed = {"repartition", "preempt"} if external else {"launch", "queue", "preempt"}
        assert asked[1] in allowed, f"{lm} launched {f} on a {asked[1]} request"


def restart_lm(fed: Federation, lm_id: str) -> None:
    """The LM process dies and comes back: same nodes, next epoch, nothing in memory.

    Messages to it stay in flight (the shells retry until it answers again); it refuses
    launches until its workers have told it what they run (`recovering`).
    """
    old = fed.lms[lm_id]
    fed.lms[lm_id] = LocalMaster(old.topology, now=fed.now, epoch=old.epoch + 1,
                                 heartbeat_interval=fed.heartbeat_interval,
                                 worker_timeout=fed.worker_timeout, recovering=True,
                                 **fed.lm_options())


def check_no_overcommit(fed: Federation) -> None:
    """Invariant 1, recomputed from the LM's running attempts rather than its counters."""
    for lm in fed.lms.values():
        topology = lm.topology
        used_cpu = [0] * len(topology)
        used_mem = [0] * len(topology)
        for attempt in lm.running.values():
            if attempt.queued:  # waits in its node's local queue: holds nothing yet
                continue
            used_cpu[attempt.node_index] += attempt.placement.task.demand.cpu_m
            used_mem[attempt.node_index] += attempt.placement.task.demand.mem_mib
        for i, node_id in enumerate(topology.node_ids):
            assert used_cpu[i] <= topology.cap_cpu[i], f"{node_id} cpu over-committed"
            assert used_mem[i] <= topology.cap_mem[i], f"{node_id} memory over-committed"
            assert lm.state.free_cpu[i] == topology.cap_cpu[i] - used_cpu[i], node_id
            assert lm.state.free_mem[i] == topology.cap_mem[i] - used_mem[i], node_id


def check_logical_flags(fed: Federation) -> None:
    """Invariant 5 on the LM's own records: logical exactly when outside the GM's partition."""
    for lm in fed.lms.values():
        for attempt_id, attempt in lm.running.items():
            owner = lm.topology.gms[lm.topology.owner[attempt.node_index]]
            assert attempt.logical is (owner != attempt.placement.gm), (
                f"{lm.lm}: {attempt_id} of {attempt.placement.gm} on a node of {owner} "
                f"has logical={attempt.logical}")


def check_views_converged(fed: Federation) -> None:
    """Invariant 4: every GM's view of every LM is the LM's truth, with nothing in flight."""
    for gm_id, gm in fed.gms.items():
        assert not gm.view.inflight, f"{gm_id} still reserves {gm.view.inflight}"
        for lm_id, lm in fed.lms.items():
            slot = gm.view.slots.get(lm_id)
            assert slot is not None, f"{gm_id} has no view of {lm_id}"
            free_cpu, free_mem, up = gm.view.free_of(slot)
            assert list(free_cpu) == lm.state.free_cpu, (gm_id, lm_id, "cpu")
            assert list(free_mem) == lm.state.free_mem, (gm_id, lm_id, "mem")
            assert up == lm.state.up, (gm_id, lm_id, "up")


def check_jobs_ended(fed: Federation, submitted: list[str]) -> None:
    """Invariant 3: each accepted job ended exactly once, done or failed with a reason."""
    ended = Counter(end.job_id for end in fed.ended_jobs)
    for job_id in submitted:
        assert ended[job_id] == 1, f"job {job_id} ended {ended[job_id]} times"
    for end in fed.ended_jobs:
        assert end.state in ("done", "failed"), end
        if end.state == "failed":
            assert end.reason, f"job {end.job_id} failed without a reason"


# -- the stateful machine ----------------------------------------------------------------------


class FederationMachine(RuleBasedStateMachine):
    """Random interleavings of submissions, deliveries, completions, time and worker faults."""

    job_policy = "fifo"
    queue_depth = 0  # [policies.local_queues] depth
    redundancy = "none"  # [policies.redundancy] policy
    # a trace's per-task estimate: fifo's worker priority is then the job's remaining work,
    # which shrinks as its tasks finish (GMs reprioritize); None: its arrival, fixed
    task_estimate: float | None = None

    def __init__(self) -> None:
        super().__init__()
        self.fed: Federation | None = None
        self.audit = LogAudit()
        self.dead: set[str] = set()
        self.submitted: list[str] = []
        self.worker_nodes: dict[str, list[NodeSpec]] = {}
        self.all_nodes: list[NodeSpec] = []

    @initialize(
        num_gms=st.sampled_from([2, 3]),
        workers_per_lm=st.sampled_from([1, 3]),
        best_fit=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def build(self, num_gms: int, workers_per_lm: int, best_fit: bool, seed: int) -> None:
        gms = [f"gm-{g}" for g in range(1, num_gms + 1)]
        queues = tuple(UserQueue(f"u{g}", round(1 / num_gms, 6), gm)
                       for g, gm in enumerate(gms, start=1))
        # random machine constraints from the constraint model: constrained tasks then have
        # few candidate nodes, often in another GM's partition
        topologies = make_topologies(2, 3, gms, capacity=NODE, rng=random.Random(seed),
                                     workers_per_lm=workers_per_lm)
        placement = "best_fit" if best_fit else "first_fit"
        # as `Federation.gm_config`: reprioritizations only where workers order by priority
        reprioritize = reprioritizes(self.queue_depth, self.redundancy)
        configs = [GMConfig(gm, queues, job_policy=self.job_policy, placement=placement,
                            seed=seed, reprioritize=reprioritize) for gm in gms]
        self.fed = Federation(topologies, configs, queue_depth=self.queue_depth,
                              redundancy=self.redundancy, max_copies=3)
        for topology in topologies:
            for node in topology.nodes:
                self.worker_nodes.setdefault(node.worker, []).append(node)
                self.all_nodes.append(node)
        # first heartbeats are published but left in flight: GMs may start with no view
        self.fed.tick()

    # -- rules --------------------------------------------------------------------------------

    @rule(
        gm_pick=st.integers(0, 2),
        tasks=st.lists(
            st.tuples(st.sampled_from(CPU_CHOICES), st.sampled_from(MEM_CHOICES),
                      st.integers(0, 63), st.integers(0, 2**21 - 1)),
            min_size=1, max_size=6,
        ),
    )
    def submit(self, gm_pick: int, tasks: list[tuple[int, int, int, int]]) -> None:
        fed = self.fed
        gm = sorted(fed.gms)[gm_pick % len(fed.gms)]
        user = next(q.name for q in fed.gms[gm].config.queues if q.gm == gm)
        demands = []
        for cpu, mem, node_pick, mask in tasks:
            # constraints some node has, so the job is always accepted
            node = self.all_nodes[node_pick % len(self.all_nodes)]
            chosen = [c for c in sorted(node.constraints) if mask >> c & 1]
            demands.append((cpu, mem, frozenset(chosen[:MAX_CONSTRAINTS_PER_TASK])))
        job_id = f"j{len(self.submitted) + 1}"
        fed.submit(gm, make_job(job_id, user, demands, fed.now, self.task_estimate))
        self.submitted.append(job_id)

    @precondition(lambda self: self.fed is not None and self.fed.network)
    @rule(pick=st.integers(0, 1000))
    def deliver_one(self, pick: int) -> None:
        """Any in-flight message next: replies, heartbeats and task events reorder."""
        self._deliver(pick % len(self.fed.network))

    @precondition(lambda self: self.fed is not None and self.fed.network)
    @rule(count=st.integers(1, 30))
    def deliver_in_order(self, count: int) -> None:
        """A burst in send order: enough progress for work to complete between faults."""
        for _ in range(min(count, len(self.fed.network))):
            self._deliver(0)

    @precondition(lambda self: self.fed is not None and self.fed.network)
    @rule(pick=st.integers(0, 1000))
    def duplicate_one(self, pick: int) -> None:
        """At-least-once delivery: a shell retries a request, the broker redelivers an event.

        Replies are not duplicated: an HTTP answer reaches its caller once (a retried
        request gets its own).
        """
        network = self.fed.network
        candidates = [m for m in network if not isinstance(m.event, LMReplied)]
        if candidates:
            message = candidates[pick % len(candidates)]
            network.append(Message(message.role, message.target, message.event))

    @precondition(lambda self: self.fed is not None and self.fed.executing)
    @rule(pick=st.integers(0, 1000), runtime=st.sampled_from([0.5, 1.0, 4.0]))
    def finish(self, pick: int, runtime: float) -> None:
        attempts = list(self.fed.executing)
        self.fed.finish(attempts[pick % len(attempts)], runtime)

    @rule(dt=st.sampled_from([0.5, 1.0]))
    def tick(self, dt: float) -> None:
        self.fed.tick(dt)
        self._heartbeat_live_workers()

    @precondition(lambda self: self.fed is not None)
    @rule(pick=st.integers(0, 100), settle=st.booleans())
    def kill_worker(self, pick: int, settle: bool) -> None:
        """A worker agent dies: its tasks vanish, its messages are lost, it goes silent.

        With `settle`, time runs past the LM's worker timeout at once so the LM marks its
        nodes down; otherwise later ticks (or a revival) decide what the LM learns first.
        """
        live = sorted(set(self.fed.workers) - self.dead)
        if not live:
            return
        worker = live[pick % len(live)]
        self.dead.add(worker)
        self._drop_messages_to(worker)
        for attempt, host in list(self.fed.executing.items()):
            if host == worker:
                del self.fed.executing[attempt]
        if settle:
            self._run_past_worker_timeout()

    @precondition(lambda self: self.fed is not None and self.dead)
    @rule(pick=st.integers(0, 100))
    def revive_worker(self, pick: int) -> None:
        self._revive(sorted(self.dead)[pick % len(self.dead)])

    # -- invariants after every step ------------------------------------------------------------

    @invariant()
    def lms_never_overcommit(self) -> None:
        if self.fed is not None:
            check_no_overcommit(self.fed)

    @invariant()
    def logs_obey_invariants(self) -> None:
        if self.fed is not None:
            self.audit.consume(self.fed)

    @invariant()
    def usage_is_a_fraction(self) -> None:
        """Every GM's estimate of every queue's usage is within [0, 1], whatever the order
        of heartbeats, replies and preemptions (it once went negative in the testbed)."""
        for gm_id, gm in self.fed.gms.items():
            for queue, (cpu, mem) in gm.placer.usage().items():
                assert -1e-9 <= cpu <= 1 + 1e-9 and -1e-9 <= mem <= 1 + 1e-9, (
                    gm_id, queue, cpu, mem)

    @invariant()
    def logical_flags_agree(self) -> None:
        if self.fed is not None:
            check_logical_flags(self.fed)

    # -- the end: revive, drain, converge -----------------------------------------------------

    def teardown(self) -> None:
        # A step already failed: let hypothesis report that failure, not a drain's.
        if self.fed is None or sys.exc_info()[1] is not None:
            return
        fed = self.fed
        for worker in sorted(self.dead):
            self._revive(worker)
        self._drain()
        self.audit.consume(fed)
        check_jobs_ended(fed, self.submitted)
        # invariant 4: the workers' news in (it may change an LM's state), then one more
        # heartbeat interval with everything delivered: every view equals the truth
        self._heartbeat_live_workers()
        self._deliver_all()
        fed.tick(fed.heartbeat_interval)
        self._deliver_all()
        check_views_converged(fed)
        # nothing of an ended job may keep holding resources
        for lm in fed.lms.values():
            assert not lm.running, f"{lm.lm} still runs {sorted(lm.running)} after the drain"
            assert lm.copies is None or not lm.copies.copies, f"{lm.lm} still has copies"
        self.audit.consume(fed)
        check_no_overcommit(fed)
        self._report_coverage()

    def _report_coverage(self) -> None:
        """What this run exercised (`pytest --hypothesis-show-statistics` tallies these)."""
        logs = Counter(record.event for _, record in self.fed.logs)
        event(f"jobs: {min(len(self.submitted), 5)}{'+' if len(self.submitted) > 5 else ''}")
        names = ["repartition", "task_preempted", "task_lost", "launch_refused", "task_queued",
                 "preemption_refused", "node_down", "job_failed", "job_reprioritized",
                 "worker_reprioritized"]
        if makes_copies(self.redundancy):
            names += ["copy_launched", "copy_finished_late", "task_restored"]
            event(f"a copy won: {'yes' if any(r.event == 'copy_won' and r.fields['by_copy'] for _, r in self.fed.logs) else 'no'}")  # noqa: E501
        for name in names:
            event(f"{name}: {'yes' if logs[name] else 'no'}")

    # -- mechanics --------------------------------------------------------------------------------

    def _deliver(self, index: int) -> None:
        fed = self.fed
        message = fed.network[index]
        if message.role == "worker" and message.target in self.dead:
            del fed.network[index]  # a dead process receives nothing
            return
        if isinstance(message.event, PreemptRequested):
            self._deliver_preemption(index, message)
            return
        fed.deliver(index)

    def _deliver_preemption(self, index: int, message: Message) -> None:
        """Invariant 6 at the moment it is applied: the LM stops only verified victims."""
        fed = self.fed
        event: PreemptRequested = message.event
        lm = fed.lms[message.target]
        before = {attempt: run.node_index for attempt, run in lm.running.items()}
        target = lm.topology.index.get(event.placement.node_id, -1)
        cursor = len(fed.logs)
        fed.deliver(index)
        preempted = [record.fields["attempt"] for source, record in fed.logs[cursor:]
                     if source == lm.lm and record.event == "task_preempted"]
        for victim in preempted:
            assert victim in event.victims, f"{victim} preempted but not requested"
            assert before.get(victim) == target, f"{victim} was not running on the node"
        if preempted:
            assert event.placement.attempt_id in lm.running, "preempted for nothing"

    def _deliver_all(self, limit: int = 20_000) -> None:
        for _ in range(limit):
            if not self.fed.network:
                return
            self._deliver(0)
        raise AssertionError("the network never went quiet")

    def _heartbeat_live_workers(self) -> None:
        """`fed.heartbeat_workers` without the dead ones, delivered at once as it does."""
        fed = self.fed
        for worker, agent in fed.workers.items():
            if worker not in self.dead:
                beat = WorkerHeartbeat(fed.stimulus("whb"), worker, agent.running_placements(),
                                       agent.queued_ids())
                fed._run("lm", fed.worker_lm[worker], beat)

    def _run_past_worker_timeout(self) -> None:
        fed = self.fed
        steps = int(fed.worker_timeout / fed.heartbeat_interval) + 2
        for _ in range(steps):
            fed.tick(fed.heartbeat_interval)
            self._heartbeat_live_workers()

    def _drop_messages_to(self, worker: str) -> None:
        self.fed.network[:] = [m for m in self.fed.network
                               if not (m.role == "worker" and m.target == worker)]

    def _revive(self, worker: str) -> None:
        """A fresh agent for the same nodes: it remembers nothing of its previous life."""
        self._drop_messages_to(worker)
        self.fed.workers[worker] = WorkerAgent(worker, self.worker_nodes[worker])
        self.dead.discard(worker)
        self._heartbeat_live_workers()

    def _drain(self, rounds: int = 300) -> None:
        """Deliver, finish and heartbeat until every job ended and nothing holds resources.

        Worker heartbeats go on throughout (the harness's own `drain` sends none, so a long
        drain there would time every worker out).
        """
        fed = self.fed
        ended = {end.job_id for end in fed.ended_jobs}
        hold = max(lm.unlisted_hold for lm in fed.lms.values())
        quiet_rounds = 0
        for _ in range(rounds):
            self._deliver_all()
            self.audit.consume(fed)
            ended = {end.job_id for end in fed.ended_jobs}
            idle = not fed.executing and not any(lm.running for lm in fed.lms.values())
            if ended >= set(self.submitted) and idle:
                return
            # once every job ended, leftovers must clear within the longest an LM holds an
            # attempt its worker does not list (a lost call to a worker: dispatch_timeout)
            quiet_rounds = quiet_rounds + 1 if ended >= set(self.submitted) else 0
            if quiet_rounds > 2 * hold / fed.heartbeat_interval + 2:
                return
            fed.finish_all()
            fed.tick(fed.heartbeat_interval)
            self._heartbeat_live_workers()
        waiting = sorted(set(self.submitted) - ended)
        statuses = [gm.job_status(job) for gm in fed.gms.values() for job in waiting
                    if gm.job_status(job)]
        raise AssertionError(f"jobs never ended: {waiting}\n{statuses}")


class LMRestartFederationMachine(FederationMachine):
    """The same, and LMs may crash and restart (their workers keep running)."""

    @precondition(lambda self: self.fed is not None)
    @rule(pick=st.integers(0, 1))
    def restart_an_lm(self, pick: int) -> None:
        lm_id = sorted(self.fed.lms)[pick % len(self.fed.lms)]
        restart_lm(self.fed, lm_id)
        self.audit.lm_restarted(lm_id)


class SLearnFederationMachine(FederationMachine):
    """The same, with pilot sampling: held tasks, pilots first, work conservation."""

    job_policy = "slearn"


class LocalQueueFederationMachine(LMRestartFederationMachine):
    """The same with local queues two deep: GMs queue tasks on busy nodes, workers start
    them as room frees, LMs take their resources on the start reports however they are
    ordered, and LMs restart and adopt queued attempts. Jobs carry an estimate, so GMs
    re-key their queued tasks (`job_reprioritized`) as their remaining work shrinks."""

    queue_depth = 2
    task_estimate = 1.0


class RedundancyFederationMachine(LMRestartFederationMachine):
    """The same with redundant copies (srpt+r, at most 3 copies a task): idle nodes run
    copies of running tasks, GMs' launches take those nodes back, the first attempt to
    finish wins and the others are cancelled; finishes and cancels cross, workers die and
    LMs restart. A task is done once (invariant 2), and copies sit on idle nodes only, one
    a node (`LocalMaster.validate` after every event)."""

    redundancy = "srpt+r"
    task_estimate = 1.0  # srpt+r favours the least remaining work: reprioritized ones too

    @precondition(lambda self: self.fed is not None and any(
        "~" in attempt for attempt in self.fed.executing))
    @rule(pick=st.integers(0, 1000))
    def finish_a_copy(self, pick: int) -> None:
        """A copy's run ends (a fast node): it races its original's end and the cancels."""
        copies = sorted(attempt for attempt in self.fed.executing if "~" in attempt)
        self.fed.finish(copies[pick % len(copies)], 0.5)

    def teardown(self) -> None:
        # copies still running end first: their wins race what is still in flight
        if self.fed is not None and sys.exc_info()[1] is None:
            for attempt in [a for a in self.fed.executing if "~" in a]:
                self.fed.finish(attempt, 0.5)
        super().teardown()


# About 3-4 s per machine on one core; a failure prints the steps that reproduce it.
MACHINE_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestFifoFederation = FederationMachine.TestCase
TestFifoFederation.settings = MACHINE_SETTINGS
TestSLearnFederation = SLearnFederationMachine.TestCase
TestSLearnFederation.settings = MACHINE_SETTINGS
TestLMRestartFederation = LMRestartFederationMachine.TestCase
TestLocalQueueFederation = LocalQueueFederationMachine.TestCase
TestLocalQueueFederation.settings = MACHINE_SETTINGS
TestRedundancyFederation = RedundancyFederationMachine.TestCase
# copies race in a fraction of runs only (a copy needs an idle node and a running task):
# three times the examples
TestRedundancyFederation.settings = settings(MACHINE_SETTINGS, max_examples=300)
TestLMRestartFederation.settings = MACHINE_SETTINGS


# -- hand-built scenarios ------------------------------------------------------------------------


RARE = 5  # a constraint id only the nodes named in a scenario carry
SMALL_NODE = Resources(1000, 1024)  # one 1000/1024 task fills it


def federation_of(node_constraints: dict[str, list[frozenset[int]]], num_gms: int = 2,
                  capacity: Resources = SMALL_NODE, **kwargs) -> Federation:
    """LMs with the given nodes (one worker per node), every GM with one queue."""
    gms = [f"gm-{g}" for g in range(1, num_gms + 1)]
    topologies = [
        ClusterTopology(lm, [NodeSpec(f"{lm}/n{i}", lm, f"{lm}/w{i}", capacity, constraints)
                             for i, constraints in enumerate(nodes)], gms)
        for lm, nodes in node_constraints.items()
    ]
    queues = tuple(UserQueue(f"u{g}", round(1 / num_gms, 6), gm)
                   for g, gm in enumerate(gms, start=1))
    # as `Federation.gm_config`: reprioritizations only where workers order by priority
    reprioritize = reprioritizes(kwargs.get("queue_depth", 0), kwargs.get("redundancy", "none"))
    fed = Federation(topologies, [GMConfig(gm, queues, reprioritize=reprioritize)
                                  for gm in gms], **kwargs)
    fed.tick()
    fed.run_until_quiet()  # every GM starts with a fresh view of every LM
    return fed


def replies(fed: Federation, gm: str) -> list[LMReplied]:
    return [m.event for m in fed.network
            if m.role == "gm" and m.target == gm and isinstance(m.event, LMReplied)]


def index_of(fed: Federation, predicate) -> int:
    return next(i for i, m in enumerate(fed.network) if predicate(m))


def launched(fed: Federation) -> list[dict]:
    return [r.fields for source, r in fed.logs if source in fed.lms and r.event == "task_launched"]


def drain_and_check(fed: Federation, submitted: list[str]) -> LogAudit:
    """Every invariant, on a hand-built scenario run to the end."""
    audit = LogAudit()
    for _ in range(50):
        fed.run_until_quiet()
        audit.consume(fed)
        check_no_overcommit(fed)
        check_logical_flags(fed)
        if {end.job_id for end in fed.ended_jobs} >= set(submitted) and not fed.executing:
            break
        fed.finish_all()
        fed.tick(fed.heartbeat_interval)
        fed.heartbeat_workers()
    check_jobs_ended(fed, submitted)
    fed.heartbeat_workers()
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)
    fed.run_until_quiet()
    audit.consume(fed)
    check_views_converged(fed)
    return audit


@pytest.mark.parametrize("first", ["gm-1", "gm-2"])
def test_two_gms_race_for_the_last_slot(first: str) -> None:
    """Both GMs see lm-1/n0 free; the LM launches one, refuses the other as stale_view.

    Only the n0 nodes carry the constraint; they belong to gm-1, so gm-1 launches
    internally and gm-2 asks for a repartition, both on lm-1/n0 (first in round-robin).
    """
    fed = federation_of({"lm-1": [frozenset({RARE}), frozenset()],
                         "lm-2": [frozenset({RARE}), frozenset()]})
    rare = frozenset({RARE})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, rare)]))
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1024, rare)]))
    requests = [m.event for m in fed.network if isinstance(m.event, LaunchRequested)]
    assert [(r.gm, r.kind, r.placements[0].node_id) for r in requests] == [
        ("gm-1", RequestKind.LAUNCH, "lm-1/n0"),
        ("gm-2", RequestKind.REPARTITION, "lm-1/n0"),
    ]
    loser = "gm-2" if first == "gm-1" else "gm-1"
    fed.deliver(index_of(fed, lambda m: getattr(m.event, "gm", None) == first))
    fed.deliver(index_of(fed, lambda m: getattr(m.event, "gm", None) == loser))
    assert [r.results[0].reason for r in replies(fed, first)] == [Reason.LAUNCHED]
    assert [r.results[0].reason for r in replies(fed, loser)] == [Reason.STALE_VIEW]
    assert [(f["gm"], f["node"]) for f in launched(fed)] == [(first, "lm-1/n0")]

    fed.run_until_quiet()  # the loser learns from the reply and goes to lm-2/n0
    assert [(f["gm"], f["node"]) for f in launched(fed)] == [
        (first, "lm-1/n0"), (loser, "lm-2/n0")]
    assert [f["logical"] for f in launched(fed)] == [first == "gm-2", loser == "gm-2"]
    audit = drain_and_check(fed, ["a", "b"])
    assert audit.task_done == Counter({"a/0": 1, "b/0": 1})


def test_duplicate_launch_runs_once() -> None:
    """A replayed launch request is idempotent while it runs and refused after it ended."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(500, 512, frozenset())]))
    request = next(m for m in fed.network if isinstance(m.event, LaunchRequested))
    fed.network.append(Message(request.role, request.target, request.event))
    for _ in range(2):  # the request and its replay reach the LM before any answer is read
        fed.deliver(index_of(fed, lambda m: isinstance(m.event, LaunchRequested)))
    assert [r.results[0].reason for r in replies(fed, "gm-1")] == [
        Reason.LAUNCHED, Reason.ALREADY_RUNNING]
    fed.run_until_quiet()
    started = [r.fields["attempt"] for source, r in fed.logs
               if source in fed.workers and r.event == "task_started"]
    assert len(started) == 1
    assert len(fed.lms["lm-1"].running) == 1
    fed.finish_all()
    fed.run_until_quiet()
    fed.network.append(Message(request.role, request.target, request.event))
    fed.deliver(len(fed.network) - 1)
    reply = fed.network[-1].event
    assert isinstance(reply, LMReplied)
    assert [res.reason for res in reply.results] == [Reason.DUPLICATE]
    fed.run_until_quiet()
    assert not fed.lms["lm-1"].running
    audit = drain_and_check(fed, ["a"])
    assert audit.task_done == Counter({"a/0": 1})
    assert set(audit.worker_started.values()) == {1}


def test_external_partition_only_by_repartition() -> None:
    """The LM refuses a plain launch into another GM's node and marks repartitions logical."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    lm = fed.lms["lm-1"]
    task = TaskSpec("x/0", "x", Resources(500, 512), frozenset(), 1.0)

    def ask(attempt: str, node: str, kind: RequestKind) -> Reason:
        placement = Placement(attempt, task, node, "gm-2", "u2")
        commands = lm.handle(LaunchRequested("s", "gm-2", f"r-{attempt}", kind, (placement,)),
                             fed.now)
        lm.validate()
        return next(c for c in commands if hasattr(c, "results")).results[0].reason

    assert owner_of(fed, "lm-1", "lm-1/n0") == "gm-1"
    assert ask("x/0#0.1", "lm-1/n0", RequestKind.LAUNCH) is Reason.NOT_OWNER
    assert ask("x/0#0.2", "lm-1/n1", RequestKind.REPARTITION) is Reason.OWNED_BY_REQUESTER
    assert not lm.running
    assert ask("x/0#0.3", "lm-1/n0", RequestKind.REPARTITION) is Reason.LAUNCHED
    assert lm.running["x/0#0.3"].logical is True
    assert [info.logical for info in lm.snapshot().running] == [True]


def _fill_then_contend(fed: Federation) -> PreemptRequested:
    """u1 takes both nodes of lm-1; u2 (below its share) then asks to preempt one of them."""
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())] * 2))
    fed.run_until_quiet()
    assert len(fed.lms["lm-1"].running) == 2
    fed.tick(fed.heartbeat_interval)  # gm-2 learns what runs where
    fed.heartbeat_workers()
    fed.run_until_quiet()
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1024, frozenset())]))
    preempts = [m.event for m in fed.network if isinstance(m.event, PreemptRequested)]
    assert len(preempts) == 1
    return preempts[0]


def test_preemption_applied_after_lm_verifies() -> None:
    """The LM stops exactly the named victim, on the named node, then launches the task."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    request = _fill_then_contend(fed)
    (victim,) = request.victims
    victim_node = fed.lms["lm-1"].running[victim].placement.node_id
    assert victim_node == request.placement.node_id
    fed.run_until_quiet()
    preempted = [r.fields for s, r in fed.logs if s == "lm-1" and r.event == "task_preempted"]
    assert [(f["attempt"], f["node"]) for f in preempted] == [(victim, victim_node)]
    assert request.placement.attempt_id in fed.lms["lm-1"].running
    audit = drain_and_check(fed, ["a", "b"])
    assert audit.preempted == 1
    assert audit.task_done == Counter({"a/0": 1, "a/1": 1, "b/0": 1})


def test_preemption_refused_when_victim_already_gone() -> None:
    """The victim finished while the request was in flight: the LM stops nothing."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    request = _fill_then_contend(fed)
    (victim,) = request.victims
    fed.finish(victim)
    # the worker's report reaches the LM before the preemption request does
    fed.deliver(index_of(fed, lambda m: m.role == "lm" and getattr(m.event, "attempt_id", "")
                         == victim))
    fed.deliver(index_of(fed, lambda m: isinstance(m.event, PreemptRequested)))
    assert not [r for s, r in fed.logs if r.event == "task_preempted"]
    reply = next(e for e in replies(fed, "gm-2"))
    assert [res.reason for res in reply.results] == [Reason.VICTIM_GONE]
    audit = drain_and_check(fed, ["a", "b"])
    assert audit.preempted == 0


def test_lost_worker_requeues_and_revived_worker_is_empty() -> None:
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())]))
    fed.run_until_quiet()
    (attempt,) = fed.lms["lm-1"].running
    dead = fed.executing.pop(attempt)
    live = {w: a for w, a in fed.workers.items() if w != dead}
    for _ in range(int(fed.worker_timeout / fed.heartbeat_interval) + 2):
        fed.tick(fed.heartbeat_interval)
        for worker, agent in live.items():
            beat = WorkerHeartbeat(fed.stimulus("whb"), worker, agent.running_placements())
            fed._run("lm", fed.worker_lm[worker], beat)
        fed.run_until_quiet()
    events = [(r.event, r.fields.get("attempt")) for s, r in fed.logs if s == "lm-1"]
    assert ("task_lost", attempt) in events
    assert not fed.lms["lm-1"].state.up[0 if dead.endswith("w0") else 1]
    (retry,) = fed.lms["lm-1"].running  # requeued onto the surviving node
    assert retry != attempt and fed.executing[retry] != dead
    fed.workers[dead] = WorkerAgent(dead, [n for n in fed.lms["lm-1"].topology.nodes
                                           if n.worker == dead])
    audit = drain_and_check(fed, ["a"])
    assert all(fed.lms["lm-1"].state.up)
    assert audit.task_done == Counter({"a/0": 1})


# -- regressions: core bugs these tests found -----------------------------------------------------


def _settle(fed: Federation) -> None:
    """One heartbeat interval: every GM hears every LM (and the LMs their workers)."""
    fed.tick(fed.heartbeat_interval)
    fed.heartbeat_workers()
    fed.run_until_quiet()


def test_preemption_reservation_never_makes_the_view_optimistic() -> None:
    """A heartbeat that already shows a preemption must not free its victims a second time.

    In-flight reservations are re-applied on every newer snapshot, so the view is "briefly
    pessimistic, never optimistic". A preemption used to reserve its victims' release as a
    negative amount too: re-applied on a snapshot taken after the LM stopped the victims,
    it freed them twice and the GM believed in room the node did not have.
    """
    fed = federation_of({"lm-1": [frozenset(), frozenset()]}, capacity=Resources(2000, 2048))
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())] * 4))
    fed.run_until_quiet()
    _settle(fed)  # u1 fills the federation; gm-2 knows it
    fed.submit("gm-2", make_job("b", "u2", [(500, 512, frozenset())]))
    request = next(m.event for m in fed.network if isinstance(m.event, PreemptRequested))
    fed.deliver(index_of(fed, lambda m: m.event is request))
    assert [r.fields["attempt"] for s, r in fed.logs if r.event == "task_preempted"] == list(
        request.victims)
    fed.tick(fed.heartbeat_interval)  # the heartbeat overtakes the preemption's reply
    fed.deliver(index_of(fed, lambda m: m.target == "gm-2"
                         and isinstance(m.event, HeartbeatReceived)))
    view = fed.gms["gm-2"].view
    free_cpu, free_mem, _ = view.free_of(view.slots["lm-1"])
    truth = fed.lms["lm-1"].state
    for i in range(2):
        assert free_cpu[i] <= truth.free_cpu[i] and free_mem[i] <= truth.free_mem[i], (
            f"gm-2 believes n{i} has {free_cpu[i]}m/{free_mem[i]}MiB free, the LM "
            f"{truth.free_cpu[i]}m/{truth.free_mem[i]}MiB")
    drain_and_check(fed, ["a", "b"])


def test_refused_preemption_releases_its_victims() -> None:
    """Victims named in a refused preemption may be named again once the view is fresh.

    gm-2's stale view shows only v (600m) on n0 with 400m free, so it asks to preempt v
    alone; w (400m) has meanwhile taken the free room and the LM refuses with
    victims_insufficient. Once a heartbeat shows v and w, gm-2 should preempt both (u2 stays
    within its share, u1 does not fall below its own). The GM used to keep v claimed
    forever (the reply released the preempting attempt's id, not the victims').
    """
    fed = federation_of({"lm-1": [frozenset(), frozenset()]}, capacity=Resources(1000, 1000))
    fed.submit("gm-1", make_job("v", "u1", [(600, 600, frozenset())]))
    fed.submit("gm-1", make_job("y", "u1", [(1000, 1000, frozenset())]))
    fed.run_until_quiet()
    _settle(fed)  # gm-2 sees v on n0 and y on n1
    fed.submit("gm-1", make_job("w", "u1", [(400, 400, frozenset())]))
    fed.run_until_quiet()  # no heartbeat: gm-2 does not hear of w
    assert fed.lms["lm-1"].state.free_cpu == [0, 0]
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1000, frozenset())]))
    fed.run_until_quiet()
    refused = [r.fields["reason"] for s, r in fed.logs if r.event == "preemption_refused"]
    assert refused == [str(Reason.VICTIMS_INSUFFICIENT)]
    for _ in range(2):  # fresh heartbeats: gm-2 now sees v and w running on n0
        _settle(fed)
    asked = [sorted(r.fields["victims"]) for s, r in fed.logs
             if r.event == "preemption_requested"]
    assert asked == [["v/0#0.1"], ["v/0#0.1", "w/0#0.1"]], f"gm-2 asked: {asked}"
    drain_and_check(fed, ["v", "y", "w", "b"])


def test_refused_preemption_does_not_spin_on_a_stale_running_list() -> None:
    """After victim_gone the GM must wait for fresher news, not name the same victim again.

    Reply snapshots carry no running list, so after the refusal gm-2's view still shows the
    victim running. A first fix released claims on the answer; gm-2 then named the gone
    victim again in the same pass, endlessly, with no time passing (the stateful machine's
    drain caught it as a network that never went quiet).
    """
    fed = federation_of({"lm-1": [frozenset(), frozenset()]}, capacity=Resources(1000, 1000))
    fed.submit("gm-1", make_job("v", "u1", [(1000, 1000, frozenset())]))
    fed.submit("gm-1", make_job("y", "u1", [(1000, 1000, frozenset())]))
    fed.run_until_quiet()
    _settle(fed)  # gm-2 sees v on n0, y on n1
    fed.submit("gm-1", make_job("x", "u1", [(1000, 1000, frozenset())]))
    fed.finish("v/0#0.1")
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)
    # gm-2 misses this heartbeat; gm-1 learns n0 is free and x runs where v ran
    del fed.network[index_of(fed, lambda m: m.target == "gm-2")]
    fed.run_until_quiet()
    assert sorted(fed.lms["lm-1"].running) == ["x/0#0.1", "y/0#0.1"]
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1000, frozenset())]))
    for _ in range(200):
        if not fed.network:
            break
        fed.deliver(0)
    asked = [victim for s, r in fed.logs if r.event == "preemption_requested"
             for victim in r.fields["victims"]]
    assert not fed.network, f"still {len(fed.network)} messages in flight; asked {asked[:6]}"
    assert len(asked) == len(set(asked)), f"a victim was named twice on one view: {asked}"
    drain_and_check(fed, ["v", "y", "x", "b"])


def test_late_finish_of_an_attempt_given_up_on_completes_the_task() -> None:
    """`LMRequestFailed`: "requeue under new attempt ids and let the first to finish win".

    The LM launched a/0#0.1 but its answer was lost, and so far its start event too; the
    shell reports the request failed, the GM requeues a/0 and, its view showing the node
    full, leaves it pending. When #0.1 then finished, the GM moved the pending task to DONE,
    which the task lifecycle table used to forbid: IllegalTransition, i.e. a crashed GM.
    (Had the start arrived first, the GM would keep the attempt and not requeue at all.)
    """
    fed = federation_of({"lm-1": [frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())]))
    (request,) = [m.event for m in fed.network if isinstance(m.event, LaunchRequested)]
    fed.deliver(0)  # the LM launches a/0#0.1 ...
    del fed.network[index_of(fed, lambda m: isinstance(m.event, LMReplied))]  # ... unanswered
    held_back = []  # task events to gm-1, delayed in the broker
    while fed.network:
        message = fed.network.pop(0)
        if message.role == "gm" and isinstance(message.event, TaskEventReceived):
            held_back.append(message)
        else:
            fed._run(message.role, message.target, message.event)
    fed.tick(fed.heartbeat_interval)  # gm-1's view: the node is full
    fed.run_until_quiet()
    fed.network.append(Message("gm", "gm-1", LMRequestFailed(fed.stimulus("failed"), "lm-1",
                                                              request.request_id)))
    fed.run_until_quiet()
    assert fed.gms["gm-1"].job_status("a")["tasks"][0]["state"] == "pending"
    fed.network.extend(held_back)
    fed.finish("a/0#0.1")
    fed.run_until_quiet()
    assert [(end.job_id, end.state) for end in fed.ended_jobs] == [("a", "done")]
    audit = drain_and_check(fed, ["a"])
    assert audit.task_done == Counter({"a/0": 1})


def test_retried_preemption_request_is_idempotent() -> None:
    """A preemption request the shell retries is answered like a retried launch.

    The LM applied the first copy (the victim stopped, b/0#0.1 runs). The retry used to find
    the victim gone and be refused (victim_gone), so gm-2 requeued a task that was running
    and preempted a second, innocent u1 task for a second copy of b/0.
    """
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    request = _fill_then_contend(fed)
    message = next(m for m in fed.network if m.event is request)
    fed.network.append(Message(message.role, message.target, message.event))  # the retry
    fed.run_until_quiet()
    refused = [r.fields for s, r in fed.logs if r.event == "preemption_refused"]
    assert refused == [], f"the retry was refused: {refused}"
    preempted = [r.fields["attempt"] for s, r in fed.logs if r.event == "task_preempted"]
    assert preempted == list(request.victims)
    assert sorted(a for a in fed.lms["lm-1"].running if a.startswith("b/")) == ["b/0#0.1"]
    drain_and_check(fed, ["a", "b"])


def test_fair_share_preemption_lets_long_tasks_finish() -> None:
    """Invariant 3 with tasks that outlive a heartbeat interval: both jobs must end.

    One node, two queues with half a share each, one task each that needs the whole node.
    Whichever runs holds 100% of the federation and the other 0%; by the paper's rule alone
    the waiting queue preempted the running one at every heartbeat, and back, so a task
    longer than one interval never finished.
    """
    fed = federation_of({"lm-1": [frozenset()]}, capacity=Resources(1000, 1000))
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1000, frozenset())]))
    fed.run_until_quiet()
    _settle(fed)
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1000, frozenset())]))
    task_seconds = 3 * fed.heartbeat_interval
    started: dict[str, float] = {}
    for _ in range(40):
        _settle(fed)
        for attempt in list(fed.executing):
            started.setdefault(attempt, fed.now)
            if fed.now - started[attempt] >= task_seconds:
                fed.finish(attempt, task_seconds)
        fed.run_until_quiet()
        if {end.job_id for end in fed.ended_jobs} == {"a", "b"}:
            break
    preempted = [r.fields["attempt"] for s, r in fed.logs if r.event == "task_preempted"]
    assert {end.job_id for end in fed.ended_jobs} == {"a", "b"}, (
        f"after {fed.now:.0f}s: ended {[e.job_id for e in fed.ended_jobs]}, "
        f"{len(preempted)} preemptions: {preempted[:6]}...")


def test_task_finishing_while_its_lm_restarts_still_ends_its_job() -> None:
    """Invariant 3 across an LM restart: a completion the new LM never saw is not lost.

    a/0#0.1 runs when lm-1 crashes. Its worker finishes it before the restarted LM has heard
    from that worker, so the worker's next heartbeat lists nothing to adopt and its finish
    report names an attempt the new LM does not know (`worker_report_ignored`). gm-1 still
    believes a/0#0.1 runs on lm-1, and no one ever tells it otherwise: job a never ends.
    """
    fed = federation_of({"lm-1": [frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())]))
    fed.run_until_quiet()
    assert fed.gms["gm-1"].job_status("a")["tasks"][0]["state"] == "running"
    restart_lm(fed, "lm-1")
    fed.finish("a/0#0.1")  # its report reaches the new LM, which has not adopted it
    fed.run_until_quiet()
    drain_and_check(fed, ["a"])


def test_a_launch_planned_before_an_lm_restart_is_refused_by_the_new_lm() -> None:
    """Found by the redundancy machine: a launch request delivered twice (a retried POST),
    the second copy after lm-1 and its worker agent had both restarted. Neither remembered
    the attempt id, so the new LM launched a/0#0.1 again and its worker started it a second
    time. A request now carries the LM epoch its GM planned on; a later incarnation refuses
    it (`lm_restarted`) and the GM places the task again under a new attempt id."""
    fed = federation_of({"lm-1": [frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())]))
    [request] = [m for m in fed.network if isinstance(m.event, LaunchRequested)]
    fed.run_until_quiet()
    restart_lm(fed, "lm-1")
    worker = next(iter(fed.workers))
    fed.workers[worker] = WorkerAgent(worker, list(fed.lms["lm-1"].topology.nodes))
    fed.executing.clear()  # the old worker's run died with it
    fed.heartbeat_workers()  # the new LM hears an empty worker: its recovery ends
    fed.network.append(Message(request.role, request.target, request.event))  # the retry
    fed.run_until_quiet()
    refused = [r.fields for s, r in fed.logs if s == "lm-1" and r.event == "launch_refused"]
    assert [f["reason"] for f in refused] == ["lm_restarted"]
    drain_and_check(fed, ["a"])
    started = Counter(r.fields["attempt"] for _, r in fed.logs if r.event == "task_started")
    assert started["a/0#0.1"] == 1


def test_tasks_queued_at_a_worker_take_their_jobs_new_priority() -> None:
    """Local queues: w's tasks wait at the node's worker keyed by w's remaining work as the
    GM sent it (4 tasks of 5 s: 20, then 15). When half of it is done, the GM sends 10 to the
    LM, which re-keys the one still waiting at the worker; the federation then ends as every
    invariant says."""
    fed = federation_of({"lm-1": [frozenset()]}, num_gms=1, queue_depth=2)
    gm, worker = fed.gms["gm-1"], fed.workers["lm-1/w0"]
    fed.submit("gm-1", make_job("w", "u1", [(1000, 1024, frozenset())] * 4, estimate=5.0))
    fed.run_until_quiet()

    def queued() -> dict[str, float]:
        waiting = worker.queued_ids()
        return {p.attempt_id: p.priority for p in worker.running_placements()
                if p.attempt_id in waiting}

    assert queued() == {"w/1#0.1": 20.0, "w/2#0.1": 20.0}
    fed.finish("w/0#0.1")
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)  # the room the finish left shows: w/3 joins the queue
    fed.run_until_quiet()
    assert queued() == {"w/2#0.1": 20.0, "w/3#0.1": 15.0}  # 15: within 2x of 20, not sent
    fed.finish("w/1#0.1")  # the worker starts w/3 (15 before 20), and hears of 10
    fed.run_until_quiet()
    assert gm.policy.worker_priority(gm.jobs["w"].progress) == 10.0
    assert queued() == {"w/2#0.1": 10.0} and "w/3#0.1" in fed.executing
    assert [r.fields["previous"] for _, r in fed.logs if r.event == "job_reprioritized"] == [
        20.0]
    drain_and_check(fed, ["w"])
