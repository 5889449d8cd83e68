#!/usr/bin/env bash
# Runs every test of the project: the README's test command, and what CI runs.
# Installs what it needs into .venv first (idempotent); the integration tests install and
# start the project's own RabbitMQ (scripts/rabbitmq.sh) when none runs, and stop it again.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -k gm`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/venv.sh
echo "== ruff"
.venv/bin/ruff check common services tests benchmarks
echo "== pytest"
.venv/bin/pytest -q "$@"
