"""Every experiment at a tiny size, for a refactoring that must not change what they compute.

Prints one `name=sha256` line per experiment: the hash of its results.json with the figures
that measure this machine (wall seconds, memory) taken out, and the checkout's own folder in
paths written as <root>. Run it on two checkouts and diff.

    python benchmarks/guard_experiments.py /tmp/before > before.txt
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--workers", "1", "--no-log"]
EXPERIMENTS = {
    "baselines": ["baselines", "--jobs", "15", "--nodes", "300", "--gms", "2", "--lms", "3"],
    "cluster-size": ["cluster-size", "--values", "200,400", "--jobs", "10"],
    "gms-lms": ["gms-lms", "--values", "1x2,2x2", "--nodes", "200", "--jobs", "10"],
    "heartbeat": ["heartbeat", "--values", "1,5", "--nodes", "200", "--gms", "2", "--lms", "2",
                  "--jobs", "10"],
    "components": ["components", "--nodes", "300", "--gms", "2", "--lms", "3", "--jobs", "10"],
    "centralized": ["centralized", "--values", "200,400", "--gms", "2", "--lms", "2",
                    "--jobs", "10"],
    "slearn": ["slearn", "--nodes", "40", "--gms", "1", "--lms", "2", "--count", "30",
               "--jobs", "20", "--values", "slearn,fifo,oracle"],
    "redundancy": ["redundancy", "--machines", "10", "--rates", "0.1,0.25", "--horizon", "200",
                   "--seeds", "2"],
    "redundancy-federated": ["redundancy-cluster", "--jobs", "20", "--nodes", "40", "--lms",
                             "2", "--loads", "0.5,1.2", "--seeds", "2"],
    "packing": ["packing", "--offline-jobs", "6", "--jobs", "12", "--machines", "3",
                "--weights", "equal,priority", "--loads", "1.2"],
    "packing-federated": ["packing-cluster", "--jobs", "40", "--nodes", "12", "--loads", "1.3",
                          "--weights", "random", "--values", "wspt,lp"],
    "fairness": ["fairness", "--sizes", "10,20", "--jobs", "3", "--values",
                 "paper,default,none"],
}
MACHINE_KEYS = {"wall_s", "wall", "peak_rss_mib", "rss_mib", "seconds", "lp_seconds",
                "lp_max_seconds", "solve_s", "elapsed_s", "cpu_s", "handle_s", "steps_per_s",
                "events_per_s"}


def _strip(value):
    if isinstance(value, dict):
        return {key: _strip(item) for key, item in value.items() if key not in MACHINE_KEYS}
    if isinstance(value, list):
        return [_strip(item) for item in value]
    if isinstance(value, str):  # a path into the checkout: the same file in another checkout
        return value.replace(str(ROOT), "<root>")
    return value


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "guard-experiments")
    for name, argv in EXPERIMENTS.items():
        folder = out / name
        done = subprocess.run([sys.executable, "-m", "megha", "experiment", *argv, *TINY,
                               "--out", str(folder)], cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        files = sorted(folder.rglob("results.json"))
        digest = hashlib.sha256()
        for path in files:
            digest.update(json.dumps(_strip(json.loads(path.read_text())),
                                     sort_keys=True).encode())
        print(f"{name}={digest.hexdigest()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
