"""Soak test of the services as local processes: a steady replay while components are killed.

A federation of local processes (services/local.py) on a RabbitMQ of this run's own
(scripts/rabbitmq.sh on `--rabbitmq-port`, its data in a scratch folder deleted at the end,
so killing it troubles no one else) replays a steady workload through the load generator's
replayer, as benchmarks/bench_services.py does: Poisson arrivals at `--rate` jobs per second,
`--tasks` small tasks each, alternating over the user queues, for `--seconds`. Meanwhile,
every `--every` seconds, one component is killed with SIGKILL and restarted after `--pause`
seconds, as tests/integration/test_failures.py does: a GM, an LM or a worker agent
(`LocalFederation.kill`, then `start_service`, then `/healthz`), or RabbitMQ itself (its
Erlang VM, then `scripts/rabbitmq.sh start`, then every GM's `/healthz`, which needs its broker
connection). The kinds come in rounds: each round of four kills takes every kind once, in an
order drawn from the seeded RNG (`--seed`), and the component of that kind at random; so any
four consecutive kills hit every kind. When `--seconds` are up the killing stops, the replay
runs on until every accepted job has ended (or `--grace` seconds after the last arrival), and
the run is checked from the GMs' answers and the services' JSON event logs.

One `name=value` line per figure on stdout, after a first `#` line that says what runs;
progress (each kill, each restart) on stderr:

- `soak_jobs_accepted`: jobs a GM answered 202; `soak_jobs_not_accepted`: the others (the
  replayer gave up while a GM or the broker was away: never the federation's to lose).
- `soak_jobs_completed`, `soak_jobs_failed`: accepted jobs whose GM, asked afterwards
  (`GET /v1/jobs/{id}`), says done, or failed (ended, with a reason).
- `soak_jobs_lost`: accepted jobs that never ended, or that their GM does not know afterwards.
- `soak_duplicates`: the sum of three counts from the logs, each also printed:
  `soak_duplicates_task_done`, tasks with more than one `task_done` line in the logs of their
  GM, every incarnation of it together (the GM completed the task twice: invariant 2, "the
  first finish of a task wins"); `soak_duplicates_lm_finish`, attempts with more than one
  `task_finished` line in the logs of the LMs, every incarnation together (an attempt's work
  counted done twice by the LM that tells its GM); `soak_duplicates_worker_start`, attempts
  with more than one `task_started` line at workers that is not a resumption after a
  suspension (`resumed`), every worker incarnation together (an attempt id run twice:
  invariant 2, "an attempt id is never run twice"). A task that two attempts ran is not a
  duplicate as long as only one of them counted: a later finish is ignored by design.
- `soak_overcommits`: the takes after which a node held more cpu or memory than it has, by
  two replays of the logs, each also printed. `soak_overcommits_lm`: each LM's books, by the
  rules of the e2e tests' check (tests/e2e/conftest.py, `no_node_overcommitted`): an LM's own
  lines in its order, `task_launched` takes its demand on its node (a launch into a local
  queue, `queued`, takes nothing), any end of the attempt at that LM (`task_finished`,
  `task_failed`, `task_lost`, `task_preempted`, `task_cancelled`) gives it back,
  `attempt_adopted` takes it again with the demand of its launch, and `lm_started` (a new
  incarnation) holds nothing until it adopts. `soak_overcommits_worker`: what really runs, by
  each worker's own lines in its order: `task_started` takes the attempt's demand (from its
  LM's `task_launched`), `task_finished`, `task_suspended` and a `task_cancelled` of a running
  attempt give it back, and `worker_started` (a new incarnation: the killed one's tasks died
  with it) holds nothing. `soak_check_anomalies` counts what makes those sums doubtful (an end
  of an attempt a book did not hold, a second take of one it holds, a demand not found): the
  e2e check fails on them; here they are counted and shown.
- `soak_kills`, and `soak_kills_gm`, `_lm`, `_worker`, `_rabbitmq`; `soak_restart_failures`.
- `soak_seconds`: wall time from the start of the arrivals until the replayer had seen every
  accepted job end (after a GM restart it asks about the jobs it has not seen end one by one,
  32 a second, so this lags behind the federation); `soak_drain_seconds`: from the end of the
  arrivals to the last end of a job in the GMs' logs, the federation's own catching up.

Exit status 1 if a job was lost, or any duplicate, over-commit or failed restart was found;
each finding is then shown on stderr with its evidence (the job, task or attempt, its last
lines in the logs, the kill that preceded it) and the logs are kept.

    python benchmarks/soak.py [--seconds 600] [--every 20] [--seed 1] [--rate 5] [--tasks 4]
                              [--duration 2.0] [--config deploy/federation.toml]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.federation import Federation, load_federation  # noqa: E402
from loadgen.replay import FINAL_STATES, Replayer, ReplayResult  # noqa: E402
from loadgen.workload import ReplayJob, ReplayTask  # noqa: E402
from services.local import (  # noqa: E402
    LocalFederation,
    free_port_block,
    rabbitmq,
    rabbitmq_running,
)

KINDS = ("gm", "lm", "worker", "rabbitmq")
# The ends of an attempt at its LM (common/lm.py `_end` logs `task_{reason}`), as in the e2e
# tests' over-commit check: each gives the attempt's resources back to its node.
LM_ENDS = frozenset({"task_finished", "task_failed", "task_lost", "task_preempted",
                     "task_cancelled"})
SHOWN = 10  # findings of one kind shown with their evidence


def say(line: str) -> None:
    print(f"# {line}", file=sys.stderr, flush=True)


# -- the broker of this run ------------------------------------------------------------------------


class OwnBroker:
    """scripts/rabbitmq.sh on a port and data folder of this run's own (its environment
    variables, which services.local's `rabbitmq()` passes on), killed and restarted at will."""

    def __init__(self, port: int, home: Path) -> None:
        self.port, self.home = port, home
        self.started = False  # only a broker this run started is ever stopped
        os.environ["MEGHA_RABBITMQ_PORT"] = str(port)
        os.environ["MEGHA_RABBITMQ_HOME"] = str(home)

    def start(self) -> str:
        if rabbitmq_running():
            raise RuntimeError(f"a RabbitMQ already answers as node megha-{self.port}: this "
                               f"run kills its broker, pick another --rabbitmq-port")
        for port in (self.port, self.port + 1):  # AMQP, and Erlang distribution
            with socket.socket() as probe:
                # as the broker binds: a port held only by closed connections is free
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError as error:
                    raise RuntimeError(f"port {port} is taken: pick another --rabbitmq-port"
                                       ) from error
        self.started = True
        rabbitmq("start")
        return rabbitmq("url")

    def pid(self) -> int:
        """The Erlang VM's (scripts/rabbitmq.sh has it write $MEGHA_RABBITMQ_HOME/pid)."""
        return int((self.home / "pid").read_text().strip())

    def kill(self) -> None:
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)

    def restart(self) -> None:
        rabbitmq("start")

    def stop(self) -> None:
        """Stop it and delete its data."""
        if not self.started:
            return
        try:
            pid = self.pid()
        except (OSError, ValueError):
            pid = None
        try:
            rabbitmq("stop")
        finally:
            if pid is not None and not _wait_gone(pid, timeout=30):
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid)
            shutil.rmtree(self.home, ignore_errors=True)


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Until the process is gone (or a zombie: it is detached, not ours to reap)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


# -- the killer ------------------------------------------------------------------------------------


@dataclass
class Kill:
    kind: str
    target: str
    at: float  # wall clock of the SIGKILL
    restarted: float | None = None  # wall clock when it served again
    error: str = ""


@dataclass
class Killer:
    """Kills a component every `every` seconds from `t0` (wall clock) until `seconds` have
    passed, each restarted after `pause` seconds and waited for before the next kill; a kill
    whose time came during a slow restart follows it at once."""

    fed: LocalFederation
    broker: OwnBroker
    rng: random.Random
    every: float
    seconds: float
    pause: float
    t0: float = 0.0
    kills: list[Kill] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _round: list[str] = field(default_factory=list)

    def targets(self, kind: str) -> list[str]:
        if kind == "rabbitmq":
            return ["rabbitmq"]
        return [service for service, role in self.fed.roles.items() if role == kind]

    def next_kill(self) -> tuple[str, str]:
        if not self._round:
            self._round = list(KINDS)
            self.rng.shuffle(self._round)
        kind = self._round.pop()
        return kind, self.rng.choice(self.targets(kind))

    def run(self) -> None:
        k = 1
        while k * self.every < self.seconds:
            if self.stop.wait(max(0.0, self.t0 + k * self.every - time.time())):
                return
            kind, target = self.next_kill()
            kill = Kill(kind, target, time.time())
            self.kills.append(kill)
            try:
                self.kill_and_restart(kill)
            except Exception as error:  # noqa: BLE001 - recorded, shown, and the soak fails
                kill.error = f"{type(error).__name__}: {error}"
                say(f"t={time.time() - self.t0:6.1f}s restart of {target} FAILED: {kill.error}")
                return  # a federation missing a part is no longer the one under test
            k += 1

    def kill_and_restart(self, kill: Kill) -> None:
        fed, target = self.fed, kill.target
        t = kill.at - self.t0
        if kill.kind == "rabbitmq":
            self.broker.kill()
        else:
            fed.kill(target, signal.SIGKILL)
        say(f"t={t:6.1f}s kill #{len(self.kills)}: {target} ({kill.kind}) with SIGKILL")
        time.sleep(self.pause)
        say(f"t={time.time() - self.t0:6.1f}s restarting {target}")
        if kill.kind == "rabbitmq":
            self.broker.restart()
            fed.wait_healthy(list(fed.federation.gms), timeout=120)  # reconnected
        else:
            fed.start_service(target)
            fed.wait_healthy([target], timeout=120)
        kill.restarted = time.time()
        say(f"t={kill.restarted - self.t0:6.1f}s {target} serves again, "
            f"{kill.restarted - kill.at:.1f} s after its kill")


# -- the replay ------------------------------------------------------------------------------------


def workload(fed: LocalFederation, args) -> list[ReplayJob]:
    """Poisson arrivals at `--rate` jobs/s for `--seconds`, alternating over the user queues
    (benchmarks/bench_services.py's)."""
    rng = random.Random(args.seed)
    users = [q.name for q in fed.federation.queues]
    task = ReplayTask(cpu_m=args.cpu, mem_mib=256, duration=args.duration)
    jobs: list[ReplayJob] = []
    at = rng.expovariate(args.rate)
    while at < args.seconds:
        jobs.append(ReplayJob(job_id=f"soak-{len(jobs)}", user=users[len(jobs) % len(users)],
                              arrival=at, tasks=(task,) * args.tasks))
        at += rng.expovariate(args.rate)
    return jobs


def final_states(fed: LocalFederation, result: ReplayResult) -> dict[str, str]:
    """Each accepted job's state as its GM tells it afterwards (`unknown`: a 404)."""
    states = {}
    with fed.http_client(timeout=10, headers=fed.headers()) as client:
        for outcome in result.outcomes:
            if outcome.status != "accepted":
                continue
            job = outcome.job.job_id
            url = fed.endpoints.url(outcome.gm) + f"/v1/jobs/{job}"
            for attempt in range(5):
                try:
                    response = client.get(url)
                    break
                except httpx.HTTPError:
                    time.sleep(1.0 + attempt)
            else:
                states[job] = "unanswered"
                continue
            states[job] = (response.json()["state"] if response.status_code == 200
                           else "unknown" if response.status_code == 404
                           else f"http_{response.status_code}")
    return states


# -- the checks from the logs ----------------------------------------------------------------------


def read_events(logs: Path) -> tuple[list[dict], int]:
    """Every service's events in its own order, and the lines that are not events."""
    events, other = [], 0
    for path in sorted(logs.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                other += 1
                continue
            if isinstance(record, dict) and {"ts", "svc", "event"} <= record.keys():
                events.append(record)
            else:
                other += 1
    return events, other


@dataclass
class Findings:
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # kind -> ids
    overcommits: dict[str, list[dict]] = field(default_factory=dict)  # book -> the takes
    anomalies: list[str] = field(default_factory=list)
    checked: Counter = field(default_factory=Counter)  # what the checks went through


# duplicate kind -> (the line counted, the role that writes it, the id it is counted by)
DUPLICATE_LINES = {"task_done": ("task_done", "gm", "task"),
                   "lm_finish": ("task_finished", "lm", "attempt"),
                   "worker_start": ("task_started", "worker", "attempt")}


def duplicates(events: list[dict], roles: dict[str, str],
               checked: Counter | None = None) -> dict[str, list[str]]:
    """Per kind of duplicate (DUPLICATE_LINES), the ids counted more than once; `checked`
    counts the lines counted, per kind."""
    counts: dict[str, Counter] = {kind: Counter() for kind in DUPLICATE_LINES}
    for e in events:
        role = roles.get(e["svc"])
        for kind, (name, writer, key) in DUPLICATE_LINES.items():
            if e["event"] == name and role == writer and not e.get("resumed"):
                counts[kind][e.get(key)] += 1
    if checked is not None:
        checked.update({kind: sum(counted.values()) for kind, counted in counts.items()})
    return {kind: sorted(k for k, n in counted.items() if n > 1)
            for kind, counted in counts.items()}


def overcommits(events: list[dict], federation: Federation, roles: dict[str, str],
                findings: Findings) -> None:
    """Replay the LMs' books and the workers' nodes from their own lines (the module's
    docstring has the rules); the takes that over-commit a node, per book, into `findings`."""
    capacity = {node.node_id: (node.capacity.cpu_m, node.capacity.mem_mib)
                for topology in federation.topologies() for node in topology.nodes}
    demand = {e["attempt"]: (e["cpu_m"], e["mem_mib"]) for e in events
              if e["event"] == "task_launched" and roles.get(e["svc"]) == "lm"}
    books = {"lm": (("task_launched", "attempt_adopted"), "lm_started"),
             "worker": (("task_started",), "worker_started")}
    for role, (takes, restart) in books.items():
        over: list[dict] = []
        for service in (s for s, r in roles.items() if r == role):
            used: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            held: dict[str, tuple[str, int, int]] = {}
            for e in (e for e in events if e["svc"] == service):
                name, attempt = e["event"], e.get("attempt")
                if name == restart:
                    used.clear()
                    held.clear()
                elif name in takes and not e.get("queued"):
                    if attempt not in demand:
                        findings.anomalies.append(f"{service}: no launch gives the demand of "
                                                  f"{attempt} ({name})")
                        continue
                    if attempt in held:
                        findings.anomalies.append(f"{service} took {attempt} twice ({name})")
                        continue
                    findings.checked[f"{role}_takes"] += 1
                    cpu, mem = demand[attempt]
                    held[attempt] = (e["node"], cpu, mem)
                    total = used[e["node"]]
                    total[0] += cpu
                    total[1] += mem
                    cap = capacity[e["node"]]
                    if total[0] > cap[0] or total[1] > cap[1]:
                        over.append({**e, "held_cpu_m": total[0], "held_mem_mib": total[1],
                                     "capacity": cap})
                elif _gives_back(role, name, e):
                    if attempt not in held:
                        findings.anomalies.append(f"{service} ended {attempt}, which it did "
                                                  f"not hold ({name})")
                        continue
                    node, cpu, mem = held.pop(attempt)
                    used[node][0] -= cpu
                    used[node][1] -= mem
        findings.overcommits[role] = over


def _gives_back(role: str, name: str, event: dict) -> bool:
    if role == "lm":
        return name in LM_ENDS
    return name in ("task_finished", "task_suspended") or (
        name == "task_cancelled" and event.get("was") == "running")


def drain_seconds(events: list[dict], roles: dict[str, str], arrivals_end: float) -> float:
    """From the end of the arrivals to the last end of a job at its GM, by the GMs' logs."""
    ends = [e["ts"] for e in events if e["event"] in ("job_done", "job_failed")
            and roles.get(e["svc"]) == "gm"]
    return max(ends, default=arrivals_end) - arrivals_end


# -- evidence ------------------------------------------------------------------------------------


def kill_before(kills: list[Kill], ts: float, t0: float) -> str:
    before = [k for k in kills if k.at <= ts]
    if not before:
        return "no kill before it"
    k = before[-1]
    return (f"last kill before it: {k.target} ({k.kind}) at t={k.at - t0:.1f}s, "
            f"{ts - k.at:.1f} s earlier")


def lines_about(events: list[dict], key: str, value: str, t0: float, last: int = 12) -> list[str]:
    about = [e for e in events if e.get(key) == value or e.get("job") == value]
    about.sort(key=lambda e: e["ts"])
    return [f"    t={e['ts'] - t0:8.2f} {e['svc']:8s} {e['event']:22s} "
            + " ".join(f"{k}={e[k]}" for k in ("attempt", "node", "reason", "detail", "kind",
                                                "state", "ended") if e.get(k) not in (None, ""))
            for e in about[-last:]]


def show(findings: Findings, lost: dict[str, str], failed: dict[str, str],
         events: list[dict], roles: dict[str, str], kills: list[Kill], t0: float) -> None:
    for label, jobs in (("LOST", lost), ("failed", failed)):
        for job, state in list(jobs.items())[:SHOWN]:
            accepted = [e["ts"] for e in events if e["event"] == "job_accepted"
                        and e.get("job") == job]
            when = accepted[0] if accepted else t0
            say(f"{label} job {job}: its GM says {state!r}; accepted at t={when - t0:.1f}s; "
                f"kills since: {[k.target for k in kills if k.at >= when][:5]}")
            for line in lines_about(events, "job", job, t0):
                say(line)
    for kind, ids in findings.duplicates.items():
        name, role, key = DUPLICATE_LINES[kind]
        for ident in ids[:SHOWN]:
            counted = sorted(e["ts"] for e in events if e["event"] == name
                             and e.get(key) == ident and roles.get(e["svc"]) == role)
            say(f"DUPLICATE ({kind}) {key} {ident}: a second {name} at "
                f"t={counted[1] - t0:.2f}s; {kill_before(kills, counted[1], t0)}")
            for line in lines_about(events, key, ident, t0, last=20):
                say(line)
    for book, over in findings.overcommits.items():
        for e in over[:SHOWN]:
            say(f"OVER-COMMIT ({book} books) {e['node']} held {e['held_cpu_m']} m / "
                f"{e['held_mem_mib']} MiB, capacity {e['capacity']}, after {e['svc']} "
                f"{e['event']} {e['attempt']} at t={e['ts'] - t0:.2f}s; "
                f"{kill_before(kills, e['ts'], t0)}")
    for anomaly in findings.anomalies[:SHOWN]:
        say(f"check anomaly: {anomaly}")


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "deploy" / "federation.toml")
    parser.add_argument("--seconds", type=float, default=600.0,
                        help="how long arrivals come and components are killed")
    parser.add_argument("--every", type=float, default=20.0, help="seconds between kills")
    parser.add_argument("--pause", type=float, default=1.0,
                        help="seconds a killed component stays down")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=5.0, help="job arrivals per second")
    parser.add_argument("--tasks", type=int, default=4, help="tasks per job")
    parser.add_argument("--duration", type=float, default=2.0, help="task duration, seconds")
    parser.add_argument("--cpu", type=int, default=500, help="task cpu, millicores")
    parser.add_argument("--grace", type=float, default=180.0,
                        help="seconds after the last arrival for every job to end")
    parser.add_argument("--base-port", type=int, default=None,
                        help="first port of the services (default: a free block)")
    parser.add_argument("--rabbitmq-port", type=int, default=27672,
                        help="this run's own RabbitMQ (and the next port, Erlang's)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the services' event logs in this folder (by default they "
                             "are kept only when something is found)")
    args = parser.parse_args(argv)

    config = args.config.resolve()
    federation = load_federation(config.read_text(), str(config))
    shown = config.relative_to(ROOT) if config.is_relative_to(ROOT) else config
    print(f"# soak: federation {shown} ({len(federation.gms)} GMs, {len(federation.lms)} LMs, "
          f"{len(federation.workers())} worker agents, RabbitMQ on port {args.rabbitmq_port}); "
          f"Poisson arrivals at {args.rate:g} jobs/s of {args.tasks} tasks ({args.cpu} m, "
          f"{args.duration:g} s) for {args.seconds:g} s; a SIGKILL every {args.every:g} s, "
          f"restart after {args.pause:g} s; seed {args.seed}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="megha-soak-"))
    logs = args.logs or scratch / "logs"
    broker = OwnBroker(args.rabbitmq_port, scratch / "rabbitmq")
    keep = True  # an exception leaves the logs for a look
    try:
        status, keep = soak(args, broker, logs, federation)
    finally:
        broker.stop()
        if args.logs is not None or not keep:  # what is left in it: only logs
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            say(f"logs kept in {logs}")
    return status


def soak(args, broker: OwnBroker, logs: Path, federation: Federation) -> tuple[int, bool]:
    """Run, check and print; the exit status, and whether the logs are worth keeping."""
    amqp_url = broker.start()
    services = len(federation.gms) + len(federation.lms) + len(federation.workers())
    base = args.base_port or free_port_block(services)
    with LocalFederation(args.config, logs, base_port=base, amqp_url=amqp_url) as fed:
        fed.wait_warm()
        say(f"{len(fed.roles)} processes and RabbitMQ up; logs in {logs}")
        killer = Killer(fed, broker, random.Random(args.seed * 7919 + 1), args.every,
                        args.seconds, args.pause)
        gms = {user.name: (user.gm, fed.endpoints.url(user.gm))
               for user in fed.federation.queues}
        replayer = Replayer(workload(fed, args), gms, completion_timeout=args.grace,
                            log=say, tokens=fed.user_tokens)
        thread = threading.Thread(target=killer.run, name="killer", daemon=True)
        killer.t0 = t0 = time.time()
        thread.start()
        try:
            result = asyncio.run(replayer.run())
        except BaseException:
            killer.stop.set()
            raise
        finally:
            thread.join()  # its last kills come before the last arrivals: it is done
        soak_seconds = time.time() - t0
        say(f"replay over after {soak_seconds:.1f} s; asking the GMs about every accepted job")
        states = final_states(fed, result)
        time.sleep(1.0)  # the last lines of the logs
        events, other = read_events(logs)
    findings = Findings()
    findings.duplicates = duplicates(events, fed.roles, findings.checked)
    overcommits(events, fed.federation, fed.roles, findings)
    say(f"checked {len(events)} log lines: " + ", ".join(
        f"{n} {what}" for what, n in sorted(findings.checked.items())))
    lost = {job: state for job, state in states.items() if state not in FINAL_STATES}
    by_kind = Counter(k.kind for k in killer.kills)
    restart_failures = sum(1 for k in killer.kills if k.error)
    figures = {
        "soak_jobs_accepted": len(states),
        "soak_jobs_not_accepted": len(result.outcomes) - len(states),
        "soak_jobs_completed": sum(1 for s in states.values() if s == "done"),
        "soak_jobs_failed": sum(1 for s in states.values() if s == "failed"),
        "soak_jobs_lost": len(lost),
        "soak_duplicates": sum(len(ids) for ids in findings.duplicates.values()),
        **{f"soak_duplicates_{kind}": len(ids) for kind, ids in findings.duplicates.items()},
        "soak_overcommits": sum(len(o) for o in findings.overcommits.values()),
        **{f"soak_overcommits_{book}": len(o) for book, o in findings.overcommits.items()},
        "soak_check_anomalies": len(findings.anomalies),
        "soak_kills": len(killer.kills),
        **{f"soak_kills_{kind}": by_kind[kind] for kind in KINDS},
        "soak_restart_failures": restart_failures,
        "soak_seconds": f"{soak_seconds:.1f}",
        "soak_drain_seconds": f"{drain_seconds(events, fed.roles, t0 + args.seconds):.1f}",
    }
    if other:
        say(f"{other} log line(s) were not events (a service's own output)")
    bad = bool(figures["soak_jobs_lost"] or figures["soak_duplicates"]
               or figures["soak_overcommits"] or restart_failures)
    failed_jobs = {job: s for job, s in states.items() if s == "failed"}
    if bad or findings.anomalies or failed_jobs:
        show(findings, lost, failed_jobs, events, fed.roles, killer.kills, t0)
    for name, value in figures.items():
        print(f"{name}={value}", flush=True)
    return (1 if bad else 0), bool(bad or findings.anomalies or failed_jobs)


if __name__ == "__main__":
    sys.exit(main())
