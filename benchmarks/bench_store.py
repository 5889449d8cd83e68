"""Benchmark of the GM store alone (services/store.py): commits per second of `add_job` (one
commit per job, as the job consumer makes them) and of `tasks_done` (one commit per batch of
finished tasks, as the task-event consumer makes them), with SQLite's `synchronous=NORMAL`
(fsync only at checkpoints: the store's old setting) and `FULL` (fsync on every commit: its
setting now). Rounds alternate the two modes so a neighbour's load hits both alike; each
figure is the median over the rounds. Prints one `name=value` line per figure.

The folder decides what an fsync costs: on tmpfs it is free and the two modes tie. Run it on
the disk the GM's state folder would be on (`--dir`).

    python benchmarks/bench_store.py [--seconds 1.0] [--rounds 3] [--batch 20] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.store import GMStore  # noqa: E402

MODES = ("NORMAL", "FULL")
BODY = '{"user": "q0", "tasks": [{"cpu_m": 500, "mem_mib": 256, "duration": 0.2}]}'


def opened(folder: Path, mode: str, name: str) -> GMStore:
    """A fresh store in `mode`. The store has no knob for it on purpose (FULL is the only
    durable choice), so the benchmark sets the pragma on its connection itself."""
    store = GMStore(folder / f"{name}.sqlite")
    store._db.execute(f"PRAGMA synchronous={mode}")
    return store


def add_jobs(store: GMStore, seconds: float, prefix: str) -> float:
    """`add_job` commits per second for `seconds`."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        store.add_job(f"{prefix}-{count}", "q0", BODY, float(count))
        count += 1
    return count / elapsed


def finish_tasks(store: GMStore, seconds: float, batch: int, prefix: str) -> float:
    """`tasks_done` commits (of `batch` tasks each) per second for `seconds`."""
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        store.tasks_done([(f"{prefix}-job", f"{prefix}-{count}-{k}", 0.2) for k in range(batch)])
        count += 1
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="per mode, per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=20, help="finished tasks per commit")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the databases go (default: a temporary folder)")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        folder = Path(scratch)
        for round_ in range(args.rounds):
            # alternate which mode goes first, so a drift in load does not favour one
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                store = opened(folder, mode, f"{mode}-{round_}")
                try:
                    rates.setdefault(f"add_job_commits_per_s_{mode.lower()}", []).append(
                        add_jobs(store, args.seconds, f"r{round_}"))
                    rates.setdefault(f"tasks_done_commits_per_s_{mode.lower()}", []).append(
                        finish_tasks(store, args.seconds, args.batch, f"r{round_}"))
                finally:
                    store.close()
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in median.items():
        spread = max(rates[name]) - min(rates[name])
        print(f"{name}={value:.0f}")
        print(f"{name}_spread={spread:.0f}")  # max - min over the rounds: the noise
    for call in ("add_job", "tasks_done"):
        full = median[f"{call}_commits_per_s_full"]
        normal = median[f"{call}_commits_per_s_normal"]
        print(f"{call}_ms_per_commit_normal={1000 / normal:.3f}")
        print(f"{call}_ms_per_commit_full={1000 / full:.3f}")
        print(f"{call}_full_over_normal={full / normal:.3f}")  # the rate FULL keeps


if __name__ == "__main__":
    main()
