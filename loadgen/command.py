"""`megha replay`: read a trace, fit it to the federation, replay it over HTTP, summarize.

Where the GMs are: `--gm gm-1=http://...` options, else the `MEGHA_ENDPOINTS` variable the
services read (in the compose testbed it names every service). Which GM serves which user
queue, and how much cpu the cluster has, come from the federation file (`--config`, else
`MEGHA_CONFIG`, else deploy/federation.toml).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import httpx

from common.errors import InvalidInput
from common.federation import Federation, load_federation
from loadgen.jobfile import read_jobs, write_jobs
from loadgen.replay import Replayer
from loadgen.summary import job_record, render, summarize
from loadgen.trace import read_trace
from loadgen.workload import ReplayJob, Scaling, from_trace, offered_load, scale

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT / "deploy" / "workloads" / "YH_small.tr"
DEFAULT_CONFIG = ROOT / "deploy" / "federation.toml"
READY_TIMEOUT = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("workload")
    source.add_argument("--trace", type=Path, default=DEFAULT_TRACE,
                        help="Sparrow/Eagle trace file, or a JSON-lines job file (*.jsonl, "
                             "loadgen/jobfile.py) (default: the bundled YH_small.tr)")
    source.add_argument("--skip-bad-lines", action="store_true",
                        help="skip malformed trace lines (counted) instead of stopping")
    source.add_argument("--cpu-m", type=int, default=500,
                        help="cpu request of every task, millicores (default 500)")
    source.add_argument("--mem-mib", type=int, default=512,
                        help="memory request of every task, MiB (default 512)")
    source.add_argument("--users", default=None,
                        help="comma-separated user queues to draw from (default: every queue "
                             "of the federation file)")
    source.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")

    fit = parser.add_argument_group("scaling (applied in this order)")
    fit.add_argument("--sample", type=float, default=None,
                     help="keep each job with this probability")
    fit.add_argument("--jobs", type=int, default=None, help="keep the first N jobs")
    fit.add_argument("--max-width", type=int, default=None, help="cap tasks per job at N")
    fit.add_argument("--duration-scale", type=float, default=1.0,
                     help="multiply task durations (default 1)")
    fit.add_argument("--time-scale", type=float, default=None,
                     help="multiply inter-arrival times")
    fit.add_argument("--target-load", type=float, default=None,
                     help="instead of --time-scale: offered cpu load as a fraction of the "
                          "cluster's capacity (1.0 = all of it)")

    run = parser.add_argument_group("replay")
    run.add_argument("--config", type=Path, default=None,
                     help="federation file (default: $MEGHA_CONFIG, else "
                          "deploy/federation.toml)")
    run.add_argument("--gm", action="append", default=[], metavar="ID=URL",
                     help="a GM's address, repeatable (default: from $MEGHA_ENDPOINTS)")
    run.add_argument("--run-id", default=None,
                     help="prefix of the job ids; replaying with the same run id resubmits "
                          "the same jobs, which the GMs do not run twice (default: random)")
    run.add_argument("--timeout", type=float, default=600.0,
                     help="seconds to wait for accepted jobs to finish (default 600)")
    run.add_argument("--results", type=Path, default=None,
                     help="write the summary and every job's outcome to this JSON file")
    run.add_argument("--save", type=Path, default=None,
                     help="write the fitted workload as a JSON-lines job file (replayable "
                          "with --trace FILE.jsonl)")
    run.add_argument("--dry-run", action="store_true",
                     help="print what would be replayed and stop")


def load_config(path: Path | None) -> tuple[Federation, Path]:
    path = path or Path(os.environ.get("MEGHA_CONFIG") or DEFAULT_CONFIG)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput("--config", f"cannot read {path}: {error.strerror}") from None
    return load_federation(text, str(path)), path


def gm_addresses(options: list[str], federation: Federation) -> dict[str, str]:
    """GM id -> base URL, from --gm options or MEGHA_ENDPOINTS; every GM must have one."""
    table: dict[str, str] = {}
    if options:
        for option in options:
            gm, sep, url = option.partition("=")
            if not sep or not url.startswith(("http://", "https://")):
                raise InvalidInput("--gm", f"expected ID=http://host:port, got {option!r}")
            table[gm.strip()] = url.rstrip("/")
    else:
        from services.endpoints import Endpoints  # the services' own parser of the variable

        table = {gm: url for gm, url in Endpoints.from_env().table.items()
                 if gm in federation.gms}
    missing = [gm for gm in federation.gms if gm not in table]
    if missing:
        raise InvalidInput("--gm", f"no address for {', '.join(missing)} (give --gm ID=URL "
                                   f"or set MEGHA_ENDPOINTS)")
    return table


def wait_ready(gms: dict[str, str], nodes: int, timeout: float) -> None:
    """Until every GM answers /healthz and sees every node: allocation times measured from a
    cold view would show the testbed's start-up, not its scheduling."""
    deadline = time.monotonic() + timeout
    waiting = dict(gms)
    last = ""
    with httpx.Client(timeout=2.0) as client:
        while waiting:
            for gm, url in list(waiting.items()):
                try:
                    response = client.get(url + "/healthz")
                    body = response.json()
                except (httpx.HTTPError, ValueError) as error:
                    last = f"{gm}: {type(error).__name__}"
                    continue
                if response.status_code == 200 and body.get("nodes_up_in_view", 0) >= nodes:
                    del waiting[gm]
                else:
                    last = f"{gm}: sees {body.get('nodes_up_in_view', 0)} of {nodes} nodes"
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"GMs not ready after {timeout:.0f} s ({last})")
            if waiting:
                time.sleep(0.5)


class LineProgress:
    """One rewritten line on a terminal; a line every few seconds in a log."""

    def __init__(self, stream=sys.stderr, every: float = 5.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every
        self.last = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        final = done == total
        if self.tty:
            end = "\n" if final else ""
            self.stream.write(f"\r{phase:8s} {done}/{total} jobs{end}")
            self.stream.flush()
        elif final or now - self.last >= self.every:
            self.last = now
            self.stream.write(f"{phase}: {done}/{total} jobs\n")
            self.stream.flush()


def read_workload(args: argparse.Namespace, users: list[str], run_id: str) -> list[ReplayJob]:
    """The jobs of `--trace`: a job file as it is, a trace with the resource options and
    users; job ids prefixed with the run id either way, so two runs never collide."""
    if args.trace.suffix == ".jsonl":
        jobs, skipped, errors = read_jobs(args.trace, skip_bad=args.skip_bad_lines)
        jobs = [replace(job, job_id=f"{run_id}-{job.job_id}") for job in jobs]
    else:
        read = read_trace(args.trace, skip_bad=args.skip_bad_lines)
        skipped, errors = read.skipped, read.errors
        jobs = from_trace(read.jobs, users, cpu_m=args.cpu_m, mem_mib=args.mem_mib,
                          seed=args.seed, prefix=run_id)
    if skipped:
        print(f"skipped {skipped} malformed line(s) of {args.trace}; first: {errors[0]}",
              file=sys.stderr)
    if not jobs:
        raise InvalidInput(str(args.trace), "has no jobs")
    return jobs


def run(args: argparse.Namespace) -> int:
    federation, config_path = load_config(args.config)
    queues = {queue.name: queue.gm for queue in federation.queues}
    users = [u.strip() for u in args.users.split(",")] if args.users else list(queues)
    unknown = [u for u in users if u not in queues]
    if unknown:
        raise InvalidInput("--users", f"not a queue of {config_path}: {', '.join(unknown)} "
                                      f"(queues: {', '.join(queues)})")
    run_id = args.run_id or uuid.uuid4().hex[:8]
    jobs = read_workload(args, users, run_id)
    unknown = sorted({job.user for job in jobs} - set(queues))
    if unknown:
        raise InvalidInput(str(args.trace), f"user queue(s) {', '.join(unknown)} are not in "
                                            f"{config_path} (queues: {', '.join(queues)})")
    cluster_cpu = sum(node.capacity.cpu_m for lm in federation.lms for node in lm.nodes)
    plan = Scaling(max_jobs=args.jobs, sample=args.sample, max_width=args.max_width,
                   duration_scale=args.duration_scale, time_scale=args.time_scale,
                   target_load=args.target_load)
    jobs = scale(jobs, plan, seed=args.seed, cluster_cpu_m=cluster_cpu)
    if args.save:
        # saved without the run id, which the replay of the file adds afresh
        write_jobs(args.save, [replace(job, job_id=job.job_id.removeprefix(f"{run_id}-"))
                               for job in jobs])
        print(f"workload saved to {args.save}", flush=True)
    load = offered_load(jobs, cluster_cpu)
    tasks = sum(len(job.tasks) for job in jobs)
    print(f"replay {run_id}: {len(jobs)} jobs, {tasks} tasks from {args.trace.name} over "
          f"{jobs[-1].arrival:.1f} s; offered load "
          f"{'n/a' if load is None else f'{load:.2f}'} of {cluster_cpu / 1000:.0f} cores",
          flush=True)
    if args.dry_run:
        return 0

    gms = gm_addresses(args.gm, federation)
    nodes = sum(len(lm.nodes) for lm in federation.lms)
    wait_ready(gms, nodes, READY_TIMEOUT)
    replayer = Replayer(jobs, {user: (gm, gms[gm]) for user, gm in queues.items()},
                        completion_timeout=args.timeout, progress=LineProgress(),
                        log=lambda text: print(text, file=sys.stderr, flush=True))
    result = asyncio.run(replayer.run())
    summary = summarize(result)
    print(render(summary), flush=True)
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(
            {"run_id": run_id, "trace": str(args.trace), "summary": summary,
             "jobs": [job_record(o) for o in result.outcomes]}, indent=1))
        print(f"results in {args.results}", flush=True)
    ok = summary["completed"] == summary["accepted"] == summary["jobs"]
    return 0 if ok else 1
