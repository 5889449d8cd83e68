"""How fast `megha inspect` reads a log of a million events, and how much memory it needs.

Writes a synthetic log shaped like the services' (per task: placed, launched, started and
finished at the worker, running and finished at the LM, done at the GM; per job: arrived and
done; 10 tasks a job, so 72 events a job), then runs `megha inspect FILE --json -` as a child
process and reports its wall time and peak resident memory:

    inspect_events=...
    inspect_events_per_s=...
    inspect_peak_rss_mb=...

`--events N` changes the size (default 1,000,000).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS_PER_JOB = 10
EVENTS_PER_JOB = 2 + 7 * TASKS_PER_JOB


def write_log(path: Path, events: int) -> int:
    """A log of about `events` events; returns how many it wrote."""
    written = 0
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with path.open("w") as out:
        job_number = 0
        while written + EVENTS_PER_JOB <= events:
            job_number += 1
            job, user = f"r-{job_number}", f"q{job_number % 4 + 1}"
            arrival = job_number * 0.01
            lines = [{"ts": arrival, "svc": "gm-1", "event": "job_arrived", "job": job,
                      "user": user, "gm": "gm-1", "tasks": TASKS_PER_JOB, "arrival": arrival}]
            for k in range(TASKS_PER_JOB):
                attempt, task = f"{job}/{k}#1", f"{job}/{k}"
                ids = {"attempt": attempt, "task": task, "job": job, "user": user,
                       "gm": "gm-1", "lm": "lm-1", "node": f"lm-1/n{k}"}
                t = arrival + 0.001 * k
                lines += [
                    {"ts": t + 0.002, "svc": "gm-1", "event": "task_placed", **ids,
                     "kind": "launch", "request": f"gm-1.1.{job_number}", "handle_s": 0.0004},
                    {"ts": t + 0.010, "svc": "lm-1", "event": "task_launched", **ids,
                     "logical": False, "cpu_m": 500, "mem_mib": 512, "handle_s": 0.0002},
                    {"ts": t + 0.020, "svc": "lm-1/w0", "event": "task_started", **ids,
                     "worker": "lm-1/w0", "duration": 1.0, "queued_seconds": 0.0,
                     "priority": 1.0, "pilot": False, "handle_s": 0.0001},
                    {"ts": t + 0.025, "svc": "lm-1", "event": "task_running", **ids},
                    {"ts": t + 1.020, "svc": "lm-1/w0", "event": "task_finished", **ids,
                     "worker": "lm-1/w0", "runtime": 1.0},
                    {"ts": t + 1.025, "svc": "lm-1", "event": "task_finished", **ids,
                     "runtime": 1.0},
                    {"ts": t + 1.030, "svc": "gm-1", "event": "task_done", **ids,
                     "runtime": 1.0},
                ]
            lines.append({"ts": arrival + 1.1, "svc": "gm-1", "event": "job_done", "job": job,
                          "user": user, "gm": "gm-1", "tasks": TASKS_PER_JOB,
                          "arrival": arrival, "reason": ""})
            out.write("".join(dumps(line) + "\n" for line in lines))
            written += len(lines)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "events.log"
        events = write_log(log, args.events)
        size_mb = log.stat().st_size / 2**20
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "megha", "inspect", str(log), "--json",
                               "-"], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
        elapsed = time.perf_counter() - started
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB
        read = json.loads(done.stdout)["runs"][0]["read"]
        assert read["events"] == events, read
    print(f"inspect_events={events}")
    print(f"inspect_log_mb={size_mb:.0f}")
    print(f"inspect_seconds={elapsed:.2f}")
    print(f"inspect_events_per_s={events / elapsed:.0f}")
    print(f"inspect_peak_rss_mb={peak_kib / 1024:.0f}")


if __name__ == "__main__":
    main()
