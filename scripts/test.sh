#!/usr/bin/env bash
# Runs every test of the project: the README's test command, and what CI runs.
# Installs what it needs into .venv first (idempotent), and Debian's chromium when missing
# (scripts/chromium.sh: the HTML report's test renders it). The integration tests install and start
# the project's own RabbitMQ (scripts/rabbitmq.sh) when none runs; the e2e tests prepare Docker
# (deploy/prepare.sh: engine, Compose v2, base images) and bring up their own compose project.
# Whatever this run started, it stops: the broker, the compose projects, and a Docker engine
# that was not running before.
# Extra arguments go to pytest, e.g. `scripts/test.sh tests/unit -k gm` or `-m "not e2e"`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

engine_was_running=0
if bash deploy/engine.sh status >/dev/null 2>&1; then engine_was_running=1; fi
stop_engine_we_started() {
  if [ "$engine_was_running" = 0 ]; then bash deploy/engine.sh stop >/dev/null 2>&1 || true; fi
}
trap stop_engine_we_started EXIT

bash scripts/venv.sh
bash scripts/chromium.sh >/dev/null
echo "== ruff"
.venv/bin/ruff check common api services loadgen inspection simulator megha twin tests benchmarks
echo "== pytest"
.venv/bin/pytest -q "$@"
