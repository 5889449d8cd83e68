#!/usr/bin/env bash
# The guard runs of a refactoring that must not change behaviour: four simulations whose event
# logs must stay byte-identical. Prints one `name=sha256` line per run; compare two checkouts with
#   bash benchmarks/guard_runs.sh /tmp/before > before.txt  (on the old commit)
#   bash benchmarks/guard_runs.sh /tmp/after > after.txt && diff before.txt after.txt
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-guard-logs}
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
sim() { local name=$1; shift
  "$py" -m megha simulate "$@" --log "$out/$name.log" > "$out/$name.txt" 2>&1 \
    || { cat "$out/$name.txt" >&2; exit 1; }
  echo "$name=$(sha256sum "$out/$name.log" | cut -d' ' -f1)"
}
# YH1_sub on 10,000 one-slot nodes, 4 GMs, 25 LMs: the Megha paper's default shape
sim yh1-10k --trace deploy/workloads/YH1_sub.tr --slots --nodes 10000 --gms 4 --lms 25
# saturated, constrained, four user queues preempting for their fair share
sim saturated-preempting --trace deploy/workloads/YH1_sub.tr --slots --nodes 500 --gms 2 \
  --lms 4 --jobs 1000 --constraints --processing model
# redundant copies on machines of varying speed
sim copies --poisson 2 --count 400 --width uniform:1,8 --nodes 200 --gms 2 --lms 4 \
  --redundancy srpt+r --variability two-state
# local queues at the workers, SRPT order, jobs sized by slearn
sim local-queues --trace deploy/workloads/recurring-200.jsonl --nodes 200 --gms 4 --lms 4 \
  --queue-depth 4 --job-policy slearn --target-load 1.2
# the worker's preemptive local queues: a far shorter arrival suspends a running task
sed 's/^\[\[queues\]\]$/[policies.local_queues]\ndepth = 4\npreemptive = true\n\n&/;T;:a;n;ba' \
  deploy/federation-slearn.toml > "$out/preemptive.toml"
sim preemptive-queues --config "$out/preemptive.toml" --trace deploy/workloads/recurring-200.jsonl \
  --target-load 1.5
