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

# The services' bearer tokens (services/auth.py), the same way: the cluster token every service
# sends the others, and one token per user queue of the federation file for job submissions
# and reads. Compose refuses to start without them; the loadgen container gets the user tokens.
ensure_tokens() {
  if { [ -n "${MEGHA_CLUSTER_TOKEN:-}" ] || grep -qs '^MEGHA_CLUSTER_TOKEN=' .env; } &&
     { [ -n "${MEGHA_USER_TOKENS:-}" ] || grep -qs '^MEGHA_USER_TOKENS=' .env; }; then
    return
  fi
  local federation="${MEGHA_FEDERATION:-}"
  [ -n "$federation" ] || federation="$(sed -n 's/^MEGHA_FEDERATION=//p' .env 2>/dev/null | tail -1)"
  python3 - "deploy/${federation:-federation.toml}" .env <<'PY'
import re, secrets, sys, tomllib
from pathlib import Path
config, dotenv = Path(sys.argv[1]), Path(sys.argv[2])
queues = [queue["name"] for queue in tomllib.loads(config.read_text())["queues"]]
have = dotenv.read_text() if dotenv.exists() else ""
lines = []
if not re.search(r"^MEGHA_CLUSTER_TOKEN=", have, re.M):
    lines.append(f"MEGHA_CLUSTER_TOKEN={secrets.token_urlsafe(24)}")
if not re.search(r"^MEGHA_USER_TOKENS=", have, re.M):
    tokens = ",".join(f"{queue}={secrets.token_urlsafe(24)}" for queue in queues)
    lines.append(f"MEGHA_USER_TOKENS={tokens}")
if have and not have.endswith("\n"):
    lines.insert(0, "")
with dotenv.open("a") as out:
    out.write("".join(line + "\n" for line in lines))
dotenv.chmod(0o600)
print(f"testbed: wrote {', '.join(l.split('=')[0] for l in lines if l)} to .env "
      f"(user queues {', '.join(queues)} of {config})", file=sys.stderr)
PY
}

follow_loadgen() {
  # `logs -f` ends when the container stops; its exit status is the replay's verdict.
  docker compose logs -f --no-log-prefix loadgen
  local container status
  container="$(docker compose ps -aq loadgen)"
  status="$(docker inspect -f '{{.State.ExitCode}}' "$container")"
  cat >&2 <<EOF

The testbed is still up. Try (tokens in .env; /healthz and /metrics need none):
  TOKEN=\$(sed -n 's/^MEGHA_CLUSTER_TOKEN=//p' .env)
  curl -s -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:${MEGHA_GM1_PORT:-8001}/v1/queues
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
    ensure_tokens
    docker compose up -d --build --remove-orphans
    follow_loadgen
    ;;
  replay)
    ensure_password
    ensure_tokens
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
