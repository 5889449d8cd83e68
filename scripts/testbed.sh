#!/usr/bin/env bash
# The testbed in one command: prepare what this machine lacks, bring the compose project up,
# follow the load generator's replay and print its summary. The testbed stays up afterwards so
# its logs and APIs can be read; `scripts/testbed.sh down` removes every container and network.
#
#   scripts/testbed.sh [up]     prepare, build, start, replay the sample, print the summary
#   scripts/testbed.sh replay   replay again on the running testbed (MEGHA_REPLAY_ARGS applies)
#   scripts/testbed.sh down     stop and remove everything the project created
#   scripts/testbed.sh status   what runs, and whether it is healthy
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# Compose would look for buildx to build with Bake; the engine's own BuildKit is enough here.
export COMPOSE_BAKE="${COMPOSE_BAKE:-false}"

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }

# Broker credentials come from the environment; the first run writes a random password to .env
# (which compose reads, and git ignores) so that no default password is ever in use.
ensure_password() {
  if [ -n "${MEGHA_RABBITMQ_PASSWORD:-}" ] || grep -qs '^MEGHA_RABBITMQ_PASSWORD=' .env; then
    return
  fi
  local password
  password="$(python3 -c 'import secrets; print(secrets.token_urlsafe(18))')"
  printf 'MEGHA_RABBITMQ_PASSWORD=%s\n' "$password" >> .env
  echo "testbed: wrote a random MEGHA_RABBITMQ_PASSWORD to .env" >&2
}

follow_loadgen() {
  # `logs -f` ends when the container stops; its exit status is the replay's verdict.
  docker compose logs -f --no-log-prefix loadgen
  local container status
  container="$(docker compose ps -aq loadgen)"
  status="$(docker inspect -f '{{.State.ExitCode}}' "$container")"
  cat >&2 <<EOF

The testbed is still up. Try:
  curl -s http://127.0.0.1:${MEGHA_GM1_PORT:-8001}/v1/queues     # gm-1's user queues
  docker compose logs --no-log-prefix gm-1 | tail   # JSON event lines of one service
  scripts/testbed.sh replay                         # replay again
  scripts/testbed.sh down                           # remove every container and network
EOF
  return "$status"
}

case "${1:-up}" in
  up)
    bash deploy/prepare.sh
    ensure_password
    docker compose up -d --build --remove-orphans
    follow_loadgen
    ;;
  replay)
    ensure_password
    docker compose up -d --no-deps --force-recreate loadgen
    follow_loadgen
    ;;
  down)
    docker compose down --remove-orphans --volumes
    ;;
  status)
    docker compose ps -a
    ;;
  -h|--help|help)
    usage
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
