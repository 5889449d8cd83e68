"""Benchmark: what refusing a bad submission costs a real GM, in time and memory.

The bad bodies are the largest that pass the GM's body cap for `POST /v1/jobs`
(services/job_body.py: 64 KiB plus 1 KiB per task of `limits.max_tasks_per_job`):

- `wide`: as many of the smallest tasks as fit (`{"cpu_m":1,"mem_mib":1}`), so more than the
  task cap: refused by the streaming count before a task is built;
- `long_id`: one task whose id fills the cap: refused by the field limits (ID_MAX);
- `deep_tasks`: max_tasks_per_job tasks, each with a placement set of repeated node ids
  filling its budget: refused by the scan at the job's bound on placement-set entries;
- `largest_parsed`: the largest body the scan lets through to pydantic (every task at the
  job's entry bounds, a long id, the last task bad): pydantic builds it all, then refuses it.

For each, the answer's wall time (median of `--repeat` posts) and the GM's peak resident
memory growth (VmHWM from /proc, which never goes down: each case runs on a fresh GM so the
peaks do not hide each other). Targets: under 100 ms and 50 MiB. Prints `name=value` lines.

    python benchmarks/bench_admission.py [--max-tasks 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.job_body import (  # noqa: E402
    MAX_PLACEMENT_ENTRIES_PER_JOB,
    submission_body_cap,
)
from services.local import LocalFederation, free_port_block  # noqa: E402


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def bodies(max_tasks: int) -> dict[str, bytes]:
    cap = submission_body_cap(max_tasks)
    tiny = b'{"cpu_m":1,"mem_mib":1},'
    count = (cap - 100) // len(tiny)
    wide = b'{"job_id":"wide","user":"u1","tasks":[' + tiny * (count - 1) + tiny[:-1] + b"]}"
    head = b'{"job_id":"long","user":"u1","tasks":[{"cpu_m":1,"mem_mib":1,"task_id":"'
    long_id = head + b"x" * (cap - len(head) - 10) + b'"}]}'
    per_task = (cap - 1000) // max_tasks
    node = b'"lm-1/n0",'
    nodes = node * max(1, (per_task - 60) // len(node))
    task = b'{"cpu_m":1,"mem_mib":1,"nodes":[' + nodes[:-1] + b"]},"
    deep = b'{"job_id":"deep","user":"u1","tasks":[' + task * (max_tasks - 1) + task[:-1] + b"]}"
    # the largest body the scan lets through to pydantic: every task at the per-job entry
    # bounds and the rest of its budget in a long id, and the last task bad (cpu_m 0)
    entries = MAX_PLACEMENT_ENTRIES_PER_JOB // max_tasks
    ids = b",".join(b'"n%d"' % k for k in range(entries))
    spare = max(1, min(128, per_task - 80 - len(ids) * 2))
    full = (b'{"cpu_m":1,"mem_mib":1,"task_id":"%s","nodes":[%s],"constraints":[%s]},'
            % (b"%s", ids, b",".join(b"%d" % k for k in range(entries))))
    tasks = b"".join(full % (b"t%d" % k + b"x" * (spare - len(b"t%d" % k))) for k in
                     range(max_tasks - 1))
    last = full % b"last"
    last = last.replace(b'"cpu_m":1', b'"cpu_m":0')
    largest = b'{"job_id":"largest","user":"u1","tasks":[' + tasks + last[:-1] + b"]}"
    made = {"wide": wide, "long_id": long_id, "deep_tasks": deep, "largest_parsed": largest}
    for name, body in made.items():
        assert len(body) <= cap, (name, len(body), cap)
    return made


def measure(name: str, body: bytes, args, folder: Path) -> tuple[float, float, int]:
    text = (ROOT / "deploy" / "federation-small.toml").read_text().replace(
        "[policies]", f"[limits]\nmax_tasks_per_job = {args.max_tasks}\n\n[policies]", 1)
    config = folder / f"{name}.toml"
    config.write_text(text)
    with LocalFederation(config, folder / f"logs-{name}", base_port=free_port_block(6)) as fed:
        pid = fed.processes["gm-1"].pid
        url = fed.endpoints.url("gm-1") + "/v1/jobs"
        with httpx.Client(timeout=60, headers={**fed.headers("u1"),
                                               "content-type": "application/json"}) as client:
            client.post(url, json={"user": "u1", "tasks": [{"cpu_m": 1, "mem_mib": 1}]})
            before = peak_rss_mib(pid)
            walls, status = [], 0
            for _ in range(args.repeat):
                started = time.perf_counter()
                status = client.post(url, content=body).status_code
                walls.append(time.perf_counter() - started)
            return statistics.median(walls) * 1000, peak_rss_mib(pid) - before, status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tasks", type=int, default=10_000,
                        help="limits.max_tasks_per_job (default 10000, the federation's)")
    parser.add_argument("--repeat", type=int, default=5, help="posts per case (median)")
    args = parser.parse_args()
    print(f"# bad bodies at the cap of {submission_body_cap(args.max_tasks)} bytes "
          f"(max_tasks_per_job {args.max_tasks})", file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        for name, body in bodies(args.max_tasks).items():
            wall_ms, grown_mib, status = measure(name, body, args, Path(folder))
            print(f"bad_body_bytes.{name}={len(body)}")
            print(f"bad_body_status.{name}={status}")
            print(f"bad_body_refusal_ms.{name}={wall_ms:.1f}")
            print(f"bad_body_peak_rss_growth_mib.{name}={grown_mib:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
