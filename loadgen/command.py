"""`megha replay`: read a trace, fit it to the federation, replay it over HTTP, summarize.

Where the GMs are: `--gm gm-1=http://...` options, else the `MEGHA_ENDPOINTS` variable the
services read (in the compose testbed it names every service). Which GM serves which user
queue, and how much cpu the cluster has, come from the federation file (`--config`, else
`MEGHA_CONFIG`, else deploy/federation.toml). Each job is sent with its user queue's token
(loadgen/credentials.py says where they come from); a queue without one is an error before
anything is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import httpx

from api.endpoints import Endpoints
from api.peers import client_ssl_context
from common.errors import InvalidInput
from common.federation import Federation
from loadgen.credentials import user_tokens
from loadgen.jobfile import write_jobs
from loadgen.progress import Progress, progress_for
from loadgen.replay import Replayer
from loadgen.sources import add_workload_arguments, build_workload, load_config
from loadgen.summary import job_record, render, summarize
from loadgen.synthesis import infeasible

READY_TIMEOUT = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    run = parser.add_argument_group("replay")
    run.add_argument("--gm", action="append", default=[], metavar="ID=URL",
                     help="a GM's address, repeatable (default: from $MEGHA_ENDPOINTS)")
    run.add_argument("--tokens", type=Path, default=None, metavar="FILE",
                     help="a KEY=VALUE file with MEGHA_USER_TOKENS=q1=TOKEN,... (default: "
                          "$MEGHA_USER_TOKENS, else the repository's .env)")
    run.add_argument("--run-id", default=None,
                     help="prefix of the job ids; replaying with the same run id resubmits "
                          "the same jobs, which the GMs do not run twice (default: random)")
    run.add_argument("--timeout", type=float, default=600.0,
                     help="seconds after the last job's scheduled time until every job is "
                          "accepted (a GM's 429 is retried as told) and finished (default 600)")
    run.add_argument("--results", type=Path, default=None,
                     help="write the summary and every job's outcome to this JSON file")
    run.add_argument("--save", type=Path, default=None,
                     help="write the fitted workload as a JSON-lines job file (replayable "
                          "with --trace FILE.jsonl)")
    run.add_argument("--dry-run", action="store_true",
                     help="print what would be replayed and stop")


def gm_addresses(options: list[str], federation: Federation) -> dict[str, str]:
    """GM id -> base URL, from --gm options or MEGHA_ENDPOINTS; every GM must have one."""
    table: dict[str, str] = {}
    if options:
        for option in options:
            gm, sep, url = option.partition("=")
            if not sep or not url.startswith(("http://", "https://")):
                raise InvalidInput("--gm", f"expected ID=http://host:port, got {option!r}")
            table[gm.strip()] = url.rstrip("/")
    else:  # the services' own reading of the variable
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
    # an HTTPS GM is verified against MEGHA_TLS_CA, as the replay's own requests are
    with httpx.Client(timeout=2.0, verify=client_ssl_context() or True) as client:
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


def run(args: argparse.Namespace) -> int:
    federation, config_path = load_config(args.config)
    with progress_for(sys.stderr) as progress:
        return _replay(args, federation, config_path, progress)


def _replay(args: argparse.Namespace, federation: Federation, config_path: Path,
            progress: Progress) -> int:
    run_id = args.run_id or uuid.uuid4().hex[:8]
    workload = build_workload(args, federation, config_path, prefix=run_id, progress=progress)
    jobs = workload.jobs
    if args.save:
        # saved without the run id, which the replay of the file adds afresh
        write_jobs(args.save, [replace(job, job_id=job.job_id.removeprefix(f"{run_id}-"))
                               for job in jobs])
        print(f"workload saved to {args.save}", flush=True)
    print(f"replay {run_id}: {workload.headline()}", flush=True)
    refused = infeasible(jobs, federation)
    if refused:
        print(f"{len(refused)} job(s) have a task no node of {config_path} can run (constraints "
              f"or size); the GMs will reject them, e.g. {refused[0]}", flush=True)
    if args.dry_run:
        return 0

    gms = gm_addresses(args.gm, federation)
    tokens = user_tokens(args.tokens)
    untokened = sorted({job.user for job in jobs} - set(tokens)) if tokens is not None else []
    if untokened:  # before anything is sent
        raise InvalidInput("MEGHA_USER_TOKENS", f"no token for user queue(s) "
                                                f"{', '.join(untokened)} of this workload (it "
                                                f"has {', '.join(sorted(tokens or {})) or 'none'})")
    queues = {queue.name: queue.gm for queue in federation.queues}
    replayer = Replayer(jobs, {user: (gm, gms[gm]) for user, gm in queues.items()},
                        completion_timeout=args.timeout, progress=progress,
                        log=lambda text: print(text, file=sys.stderr, flush=True),
                        tokens=tokens)
    nodes = sum(len(lm.nodes) for lm in federation.lms)
    wait_ready(gms, nodes, READY_TIMEOUT)
    result = asyncio.run(replayer.run())
    summary = summarize(result)
    print(render(summary), flush=True)
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(
            {"run_id": run_id, "workload": workload.name, "summary": summary,
             "jobs": [job_record(o) for o in result.outcomes]}, indent=1))
        print(f"results in {args.results}", flush=True)
    ok = summary["completed"] == summary["accepted"] == summary["jobs"]
    return 0 if ok else 1
