"""Benchmark of the compose testbed (RabbitMQ, 2 GMs, 3 LMs, 6 worker agents, 120 nodes):
what it costs idle, the task rate it sustains, and what it does when offered twice that.

1. Idle: after the testbed is up, every GM sees every node and a settle period has passed,
   the CPU time of the project's containers over a window (120 s by default: the health
   checks run every 60 s), from the engine's stats at the window's start and end, as % of one
   core. The engine's own work (health-check execs, log pipes) is outside the containers'
   cgroups: the engine's processes are counted apart (/proc/PID/stat), and the host's total
   is printed too (/proc/stat), which holds whatever else the machine runs.
2. Steps: offered rates of tasks/s (`--rates`), each for `--step-seconds` of arrivals, replayed
   with the project's own `Replayer` from the host against the GMs' published ports. A task's
   allocation time = its start on a worker minus its job's arrival at the GM (both in the
   Replayer's outcomes). A step passes when its p99 is at most `--p99-limit` and its completed
   (started) rate, tasks started / max(last arrival, last start) from the replay's start, is
   at least `--min-completed` of the rate it offered (tasks / last arrival). The sustained
   rate is the highest step that passed; stepping stops at the first that fails.
3. Overload: `--overload-factor` (2) times the sustained rate for `--overload-seconds`, and
   the tasks started per second from its start until its backlog drained (its last start),
   over the sustained rate: 1.0 means the testbed keeps its pace when pushed past it. GMs
   answer 429 with Retry-After once their backlog is full (`limits.gm_backlog_tasks`); those
   answers are counted from the GMs' own metrics.

The workload (tests/e2e/compose_project.py `synthesize`) is `megha synth --poisson`'s: Poisson
arrivals, jobs of 4 to 8 tasks (equally likely), each task 500 m cpu and 512 MiB for 0.25 to
0.75 s (uniform), constraints from the Megha constraint model with half the tasks
unconstrained, users drawn equally over the federation's queues (so both GMs get work). Jobs
with a task no node can run are left out (the GMs would refuse them; the count is printed).
Why this workload: it measures the scheduler's throughput, not the cluster's capacity. At 300
tasks/s of 0.5 s tasks about 150 of the 480 half-core slots are busy, so a task waits for the
scheduler (GM -> LM -> worker, RabbitMQ back), not for a free node; constraints keep the
GMs' searches honest. Everything, the replaying client included, shares the host's cores.

Prints one `name=value` line per figure on stdout, progress on stderr. It brings up a
testbed of its own (a project name and ports of its own, torn down at the end), or measures
a running one: `--project megha --gm gm-1=http://127.0.0.1:8001 --gm gm-2=http://...`.

    python benchmarks/bench_testbed.py [--quick] [--rates 100,200,300] [--step-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import docker
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # the testbed driver the e2e tests use

from compose_project import SERVICES, ComposeProject, synthesize  # noqa: E402

from common.federation import Federation  # noqa: E402
from loadgen.command import gm_addresses, wait_ready  # noqa: E402
from loadgen.replay import FINAL_STATES, LATE_AFTER, Replayer  # noqa: E402
from loadgen.sources import load_config  # noqa: E402
from loadgen.summary import percentile  # noqa: E402

READY_TIMEOUT = 240.0  # a cold testbed on 2 cores: image start, broker, first heartbeats
QUICK = {"rates": "50,100", "step_seconds": 10.0, "overload_seconds": 10.0, "settle": 10.0,
         "idle_window": 60.0}
DEFAULTS = {"rates": "100,200,300,400,500,600", "step_seconds": 30.0, "overload_seconds": 30.0,
            "settle": 30.0, "idle_window": 120.0}
# the engine's processes, by /proc/PID/stat name (at most 15 characters)
ENGINE_PROCESSES = {"dockerd", "containerd", "containerd-shim", "docker-proxy", "runc"}
REFUSED_METRIC = re.compile(r"^megha_gm_jobs_refused_total\s+(\S+)", re.MULTILINE)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- idle ----------------------------------------------------------------------------------------


def container_cpu(bed: ComposeProject) -> dict[str, tuple[float, int]]:
    """Each running container of the project: (when read, CPU time so far in ns). Read all
    at once, one thread each: the engine takes up to a second per answer, and a window's
    ends should be the same instant for every container."""
    running = [c for c in bed.containers() if c.status == "running"]

    def read(container) -> tuple[str, float, int | None]:
        # one_shot: the counters now, without the engine's second sample a second later
        stats = container.stats(stream=False, one_shot=True)
        usage = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage")
        return container.name, time.monotonic(), usage

    with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
        readings = list(pool.map(read, running))
    return {name: (at, usage) for name, at, usage in readings if usage is not None}


def host_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the host since boot, from the first line of /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle + iowait; guest time is already inside user
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / hz, sum(fields) / hz


def engine_cpu() -> float:
    """CPU seconds so far of the engine's own processes (dockerd, containerd, the shims, the
    port proxies), with their reaped children (runc, which starts every health-check exec):
    the part of the host's total the containers' cgroups do not hold, and unlike the host's
    total, not disturbed by anything else the machine runs."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone since the listing
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if name in ENGINE_PROCESSES:
            fields = rest.split()
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / hz


def measure_idle(bed: ComposeProject, window: float) -> dict[str, float]:
    """CPU of the project's containers, of the engine and of the host over `window` s, as %
    of one core."""
    host_before, engine_before, wall_before = host_cpu(), engine_cpu(), time.monotonic()
    before = container_cpu(bed)
    time.sleep(window)  # the window itself: nothing to poll, the testbed must stay idle
    after = container_cpu(bed)
    host_after, engine_after, wall_after = host_cpu(), engine_cpu(), time.monotonic()
    per_container, spans = {}, []
    for name, (t1, ns1) in after.items():
        if name in before:  # a container started in between has no start to count from
            t0, ns0 = before[name]
            per_container[name] = 100 * (ns1 - ns0) / 1e9 / (t1 - t0)
            spans.append(t1 - t0)
    busiest = sorted(per_container.items(), key=lambda item: -item[1])
    say("idle: " + ", ".join(f"{name.removeprefix(bed.project + '-')} {pct:.2f}%"
                             for name, pct in busiest))
    wall = wall_after - wall_before
    return {"containers_pct": sum(per_container.values()),
            "engine_pct": 100 * (engine_after - engine_before) / wall,
            "host_pct": 100 * (host_after[0] - host_before[0]) / wall,
            "window_s": sum(spans) / max(1, len(spans)), "containers": len(per_container)}


# -- load ----------------------------------------------------------------------------------------


def refused_so_far(gms: dict[str, str]) -> int | None:
    """429 answers the GMs gave since they started, from their metrics (None: not exported)."""
    total = 0
    with httpx.Client(timeout=10) as client:
        for url in gms.values():
            found = REFUSED_METRIC.search(client.get(url + "/metrics").text)
            if found is None:
                return None
            total += int(float(found.group(1)))
    return total


def wait_finished(unfinished: dict[str, str], timeout: float,
                  headers: dict[str, str]) -> None:
    """Until each job (id -> its GM's URL) is done or failed: a phase must not start behind the
    last one's backlog. Asked job by job, not from the GMs' backlog figure, which counts
    tasks a GM accepted and still holds in RabbitMQ and so depends on that bookkeeping."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=10, headers=headers) as client:
        for job, url in unfinished.items():
            while client.get(f"{url}/v1/jobs/{job}").json().get("state") not in FINAL_STATES:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job} still unfinished after {timeout:.0f} s")
                time.sleep(0.5)


def backlog_left(gms: dict[str, str]) -> dict[str, int]:
    """Each GM's backlog as it reports it (GET /healthz), when nothing of ours is waiting."""
    with httpx.Client(timeout=10) as client:
        return {gm: client.get(url + "/healthz").json().get("backlog", 0)
                for gm, url in gms.items()}


@dataclass(slots=True)
class Phase:
    rate: float  # offered tasks/s, as asked
    seconds: float  # from the replay's start to the last arrival
    tasks: int  # replayed (feasible jobs only)
    left_out: int  # jobs no node could run
    started: int  # tasks that started on a worker
    accepted: int  # jobs
    not_accepted: Counter  # jobs by what the GM last said (or the transport error)
    answers_429: int | None
    late: int  # submissions more than LATE_AFTER behind schedule
    allocation: list[float]  # s, start on a worker - arrival at the GM
    from_offer: list[float]  # s, start on a worker - when the job was due (backpressure in)
    completed_rate: float  # started tasks / max(seconds, first arrival to last start)
    drain_s: float  # from the end of the arrivals to the last start
    unfinished: dict[str, str]  # accepted jobs not ended when the replay stopped waiting:
    # job id -> its GM's URL

    def p(self, q: float, values: list[float] | None = None) -> float:
        values = sorted(self.allocation if values is None else values)
        return percentile(values, q) if values else math.nan

    @property
    def offered_rate(self) -> float:
        return self.tasks / self.seconds

    def line(self, name: str) -> str:
        refused = ", ".join(f"{n} {why[:60]}" for why, n in self.not_accepted.most_common(2))
        return (f"{name}: offered {self.rate:g}/s ({self.tasks} tasks in {self.seconds:.1f} s), "
                f"started {self.started}, completed {self.completed_rate:.1f}/s "
                f"({self.completed_rate / self.offered_rate:.0%}), allocation p50 "
                f"{self.p(50) * 1000:.0f} ms p99 {self.p(99) * 1000:.0f} ms, drain "
                f"{self.drain_s:.1f} s, late {self.late}, 429 answers {self.answers_429}, "
                f"unfinished jobs {len(self.unfinished)}"
                + (f", not accepted: {refused}" if refused else ""))


def run_phase(rate: float, seconds: float, seed: int, federation: Federation, config: Path,
              gms: dict[str, str], completion_timeout: float,
              tokens: dict[str, str]) -> Phase:
    jobs, left_out = synthesize(rate, seconds, seed, federation, config,
                                prefix=f"bench-{uuid.uuid4().hex[:6]}-{rate:g}")
    queues = {queue.name: queue.gm for queue in federation.queues}
    messages: list[str] = []
    replayer = Replayer(jobs, {user: (gm, gms[gm]) for user, gm in queues.items()},
                        completion_timeout=completion_timeout, log=messages.append,
                        tokens=tokens)
    refused_before = refused_so_far(gms)
    began = time.time()  # the replay's origin: job.arrival is seconds after it
    result = asyncio.run(replayer.run())
    refused_after = refused_so_far(gms)
    for message in messages:
        if not message.startswith("late:"):  # late ones are counted, not listed
            say(message)
    accepted = [o for o in result.outcomes if o.status == "accepted"]
    starts = [(o, s) for o in accepted for s in o.task_starts if s is not None]
    last = max((s for _, s in starts), default=began)
    # the arrivals' own span, not the nominal one: a Poisson process of N jobs ends a little
    # before or after it, and a rate over the wrong span would pass or fail a step by chance
    span = max(job.arrival for job in jobs)
    return Phase(
        rate=rate, seconds=span, tasks=sum(len(job.tasks) for job in jobs),
        left_out=left_out, started=len(starts), accepted=len(accepted),
        not_accepted=Counter(f"{o.http_status or ''} {o.detail}".strip()
                             for o in result.outcomes if o.status != "accepted"),
        answers_429=(None if refused_before is None or refused_after is None
                     else refused_after - refused_before),
        late=sum(o.late_by > LATE_AFTER for o in result.outcomes),
        allocation=[t for o in accepted for t in o.allocation_times()],
        from_offer=[s - (began + o.job.arrival) for o, s in starts],
        completed_rate=len(starts) / max(span, last - began),
        drain_s=max(0.0, last - (began + span)),
        unfinished={o.job.job_id: gms[o.gm] for o in accepted if o.state not in FINAL_STATES})


# -- the run -------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Figures (stdout): testbed_idle_cpu_pct, testbed_idle_engine_cpu_pct, "
               "testbed_idle_host_cpu_pct, "
               "testbed_sustained_tasks_per_s, testbed_p50_ms, testbed_p99_ms, "
               "testbed_overload_ratio, testbed_overload_p99_ms, testbed_429_answers, "
               "testbed_drain_s and a few more; see the module docstring for how each is "
               "measured.")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short smoke run: rates {QUICK['rates']}, "
                             f"{QUICK['step_seconds']:g} s steps and overload, "
                             f"{QUICK['idle_window']:g} s idle window (each still settable)")
    parser.add_argument("--rates", default=None,
                        help=f"offered tasks/s of the steps, comma-separated "
                             f"(default {DEFAULTS['rates']})")
    parser.add_argument("--step-seconds", type=float, default=None,
                        help=f"arrivals per step, s (default {DEFAULTS['step_seconds']:g})")
    parser.add_argument("--p99-limit", type=float, default=1.5,
                        help="a step passes with allocation p99 at most this, s (default 1.5)")
    parser.add_argument("--min-completed", type=float, default=0.9,
                        help="... and a completed rate at least this share of the offered "
                             "(default 0.9)")
    parser.add_argument("--overload-factor", type=float, default=2.0,
                        help="overload = this times the sustained rate (default 2)")
    parser.add_argument("--overload-seconds", type=float, default=None,
                        help=f"arrivals of the overload, s "
                             f"(default {DEFAULTS['overload_seconds']:g})")
    parser.add_argument("--drain-timeout", type=float, default=300.0,
                        help="s after its arrivals a phase may take to finish (default 300)")
    parser.add_argument("--settle", type=float, default=None,
                        help=f"idle s before the idle window (default {DEFAULTS['settle']:g})")
    parser.add_argument("--idle-window", type=float, default=None,
                        help=f"idle CPU window, s; 0 skips it "
                             f"(default {DEFAULTS['idle_window']:g})")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument("--config", type=Path, default=ROOT / "deploy" / "federation.toml",
                        help="the testbed's federation file (default deploy/federation.toml)")
    parser.add_argument("--gm", action="append", default=[], metavar="ID=URL",
                        help="with --project: a running testbed's GM, repeatable")
    parser.add_argument("--project", default=None,
                        help="measure this running compose project (e.g. megha, the one "
                             "scripts/testbed.sh starts) instead of starting one")
    parser.add_argument("--keep", action="store_true",
                        help="leave the testbed this script started running (it prints how "
                             "to remove it)")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("step_seconds", "overload_seconds", "overload_factor"):
        if getattr(args, name) <= 0:  # a phase of no arrivals has no rate to report
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    try:
        args.rates = [float(rate) for rate in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates: expected numbers separated by commas, got {args.rates!r}")
    if not args.rates or min(args.rates) <= 0:
        parser.error("--rates: every rate must be positive")
    if bool(args.project) != bool(args.gm):
        parser.error("--project and --gm go together: both name a running testbed")
    return args


def start_testbed(client: docker.DockerClient) -> ComposeProject:
    bed = ComposeProject(client, prefix="megha-bench")
    say(f"starting compose project {bed.project} (GMs on ports {bed.ports})")
    bed.compose("build")
    bed.compose("up", "-d", *SERVICES)  # not loadgen: it would replay the sample trace
    return bed


def main() -> None:
    args = parse_args()
    federation, config = load_config(args.config)
    if not args.project:  # an engine and Compose v2 (started and installed if missing)
        subprocess.run(["bash", str(ROOT / "deploy" / "prepare.sh")], check=True,
                       timeout=1800, stdout=sys.stderr)
    client = docker.from_env(timeout=120)
    bed = None
    figures: dict[str, str] = {}
    try:
        if args.project:
            gms = gm_addresses(args.gm, federation)
            bed = ComposeProject(client, project=args.project,
                                 ports={gm: urlsplit(url).port for gm, url in gms.items()})
            if not bed.containers():
                raise SystemExit(f"no containers of compose project {args.project!r}")
        else:
            bed = start_testbed(client)
            gms = {gm: bed.gm_url(gm) for gm in federation.gms}
        nodes = sum(len(lm.nodes) for lm in federation.lms)
        wait_ready(gms, nodes, READY_TIMEOUT)
        say(f"both GMs see all {nodes} nodes")
        measure(args, bed, federation, config, gms, figures)
    finally:
        if bed is not None and not args.project:
            if args.keep:
                say(f"left running: docker compose -p {bed.project} down --volumes")
            else:
                bed.down()
        client.close()
        # what was measured before a failure is still worth reading (the traceback follows)
        for name, value in figures.items():
            print(f"{name}={value}", flush=True)


def measure(args: argparse.Namespace, bed: ComposeProject, federation: Federation,
            config: Path, gms: dict[str, str], figures: dict[str, str]) -> None:
    """Every phase, in order; each figure goes into `figures` (name -> formatted value) as
    soon as it is known."""
    if args.idle_window > 0:
        time.sleep(args.settle)  # start-up work (imports, first heartbeats) is not idle
        idle = measure_idle(bed, args.idle_window)
        figures["testbed_idle_cpu_pct"] = f"{idle['containers_pct']:.2f}"
        figures["testbed_idle_engine_cpu_pct"] = f"{idle['engine_pct']:.2f}"
        figures["testbed_idle_host_cpu_pct"] = f"{idle['host_pct']:.2f}"
        figures["testbed_idle_window_s"] = f"{idle['window_s']:.0f}"
        figures["testbed_idle_containers"] = str(idle["containers"])

    sustained: Phase | None = None
    completion_timeout = args.drain_timeout
    for index, rate in enumerate(args.rates):
        wait_ready(gms, sum(len(lm.nodes) for lm in federation.lms), READY_TIMEOUT)
        step = run_phase(rate, args.step_seconds, args.seed + index, federation, config, gms,
                         completion_timeout, bed.user_tokens)
        passed = (step.p(99) <= args.p99_limit
                  and step.completed_rate >= args.min_completed * step.offered_rate)
        say(step.line(f"step {rate:g}/s {'passed' if passed else 'FAILED'}"))
        if step.left_out:
            say(f"  ({step.left_out} job(s) left out: a task no node can run)")
        check_backlog(gms, step)
        if not passed:
            break
        sustained = step
    else:
        say(f"every step passed: the testbed sustains at least {args.rates[-1]:g} tasks/s")
    if sustained is None:
        say("no step passed: no sustained rate, so no overload either")
        figures["testbed_sustained_tasks_per_s"] = "0"
        return
    figures["testbed_sustained_tasks_per_s"] = f"{sustained.rate:g}"
    figures["testbed_sustained_completed_tasks_per_s"] = f"{sustained.completed_rate:.1f}"
    figures["testbed_p50_ms"] = f"{sustained.p(50) * 1000:.0f}"
    figures["testbed_p99_ms"] = f"{sustained.p(99) * 1000:.0f}"

    wait_finished(step.unfinished, args.drain_timeout, bed.headers())
    overload_rate = args.overload_factor * sustained.rate
    overload = run_phase(overload_rate, args.overload_seconds, args.seed + 1000, federation,
                         config, gms, completion_timeout, bed.user_tokens)
    say(overload.line(f"overload {overload_rate:g}/s"))
    check_backlog(gms, overload)
    figures["testbed_overload_offered_tasks_per_s"] = f"{overload.offered_rate:.1f}"
    figures["testbed_overload_tasks_per_s"] = f"{overload.completed_rate:.1f}"
    figures["testbed_overload_ratio"] = f"{overload.completed_rate / sustained.rate:.2f}"
    figures["testbed_overload_p50_ms"] = f"{overload.p(50) * 1000:.0f}"
    figures["testbed_overload_p99_ms"] = f"{overload.p(99) * 1000:.0f}"
    # from when each job was due, so time spent refused (429) and retried counts too
    figures["testbed_overload_p99_from_due_ms"] = (
        f"{overload.p(99, overload.from_offer) * 1000:.0f}")
    if overload.answers_429 is not None:
        figures["testbed_429_answers"] = str(overload.answers_429)
    figures["testbed_overload_jobs_not_accepted"] = str(sum(overload.not_accepted.values()))
    figures["testbed_overload_unfinished_jobs"] = str(len(overload.unfinished))
    figures["testbed_drain_s"] = f"{overload.drain_s:.1f}"


def check_backlog(gms: dict[str, str], phase: Phase) -> None:
    """Say so when a GM reports waiting tasks after every job of the phase ended: its 429s
    come from that figure, so the phases after would be refused for tasks nobody waits for."""
    if phase.unfinished:
        return
    left = {gm: n for gm, n in backlog_left(gms).items() if n}
    if left:
        say(f"  warning: every job ended, yet the GMs report backlogs of {left} tasks; they "
            f"answer 429 once one reaches limits.gm_backlog_tasks")


if __name__ == "__main__":
    main()
