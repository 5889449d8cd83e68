#!/usr/bin/env bash
# The testbed in one command: prepare what this machine lacks, bring the compose project up,
# follow the load generator's replay and print its summary. The testbed stays up afterwards so
# its logs and APIs can be read; `scripts/testbed.sh down` removes every container and network.
#
#   scripts/testbed.sh [up]     prepare, build, start, replay the sample, print the summary
#   scripts/testbed.sh replay   replay again on the running testbed (MEGHA_REPLAY_ARGS applies)
#   scripts/testbed.sh down     stop and remove everything the project created
#   scripts/testbed.sh status   what runs, and whether it is healthy
#   --tls / --no-tls            (with up or replay) HTTPS between the services, with a CA and
#                               certificates made in build/tls/; remembered in .env
#                               (MEGHA_TLS=1, MEGHA_SCHEME=https)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# Compose would look for buildx to build with Bake; the engine's own BuildKit is enough here.
export COMPOSE_BAKE="${COMPOSE_BAKE:-false}"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

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

# The services' bearer tokens (services/auth.py), the same way: the operator's cluster token,
# one token per role (what GMs, LMs and workers send each other; each route takes only the
# roles that call it), and one per user queue of the federation file for job submissions and
# reads. A token already in the environment or .env is kept. Each token's SHA-256 digest
# (NAME_SHA256) is written beside it, afresh every time so it never goes stale: a service
# checks a token it does not send by its digest, and need not hold the token itself.
ensure_tokens() {
  local federation="${MEGHA_FEDERATION:-}"
  [ -n "$federation" ] || federation="$(sed -n 's/^MEGHA_FEDERATION=//p' .env 2>/dev/null | tail -1)"
  python3 - "deploy/${federation:-federation.toml}" .env <<'PY'
import hashlib, os, re, secrets, sys, tomllib
from pathlib import Path
config, dotenv = Path(sys.argv[1]), Path(sys.argv[2])
queues = [queue["name"] for queue in tomllib.loads(config.read_text())["queues"]]
have = dotenv.read_text() if dotenv.exists() else ""

def current(name):
    """The value compose would use: the environment's, else the last line of .env."""
    found = re.findall(rf"^{name}=(.*)$", have, re.M)
    return os.environ.get(name) or (found[-1].strip().strip("'\"") if found else "")

tokens = ["MEGHA_CLUSTER_TOKEN", "MEGHA_GM_TOKEN", "MEGHA_LM_TOKEN", "MEGHA_WORKER_TOKEN"]
made = []
values = {}
for name in tokens:
    values[name] = current(name)
    if not values[name]:
        values[name] = secrets.token_urlsafe(24)
        made.append(f"{name}={values[name]}")
if not current("MEGHA_USER_TOKENS"):
    made.append("MEGHA_USER_TOKENS=" + ",".join(f"{queue}={secrets.token_urlsafe(24)}"
                                                 for queue in queues))
digests = [f"{name}_SHA256={hashlib.sha256(values[name].encode()).hexdigest()}"
           for name in tokens]
kept = [line for line in have.splitlines()
        if not re.match(r"^MEGHA_(CLUSTER|GM|LM|WORKER)_TOKEN_SHA256=", line)]
dotenv.write_text("".join(line + "\n" for line in [*kept, *made, *digests]))
dotenv.chmod(0o600)
if made:
    print(f"testbed: wrote {', '.join(line.split('=')[0] for line in made)} to .env "
          f"(user queues {', '.join(queues)} of {config})", file=sys.stderr)
PY
}

# TLS between the services, if asked (--tls) or asked before (MEGHA_TLS=1 in .env): a CA and a
# certificate per service (scripts/make-certs.sh) in build/tls/, which git and the image build
# both ignore. The services run as uid 10001 (deploy/Dockerfile) and read the keys through a
# bind mount, so the keys are that user's (or, without root here to give them away,
# readable by all: a throwaway testbed CA, never a real one).
ensure_tls() {
  local choice="$1"
  if [ "$choice" = on ] || [ "$choice" = off ]; then
    local kept
    kept="$(grep -v -e '^MEGHA_TLS=' -e '^MEGHA_SCHEME=' .env 2>/dev/null || true)"
    # compose reads both: MEGHA_SCHEME for the endpoints, MEGHA_TLS for the certificates' paths
    { [ -z "$kept" ] || printf '%s\n' "$kept"
      [ "$choice" = off ] || printf 'MEGHA_TLS=1\nMEGHA_SCHEME=https\n'; } > .env
    chmod 600 .env
  fi
  grep -qs '^MEGHA_TLS=1' .env || return 0
  if ! grep -q 'MEGHA_TLS' docker-compose.yml; then
    echo "testbed: --tls needs docker-compose.yml to pass MEGHA_TLS_CERT, MEGHA_TLS_KEY," \
         "MEGHA_TLS_CA and https:// endpoints, which it does not yet; run with --no-tls" >&2
    exit 2
  fi
  local names
  names="$(docker compose config --services | grep -vx -e rabbitmq -e loadgen)"
  # shellcheck disable=SC2086  # one argument per service name
  bash scripts/make-certs.sh build/tls $names
  chmod 755 build/tls
  if [ "$(id -u)" = 0 ]; then
    chown 10001:10001 build/tls/*.key
  else
    chmod 644 build/tls/*.key
  fi
}

follow_loadgen() {
  # `logs -f` ends when the container stops; its exit status is the replay's verdict.
  docker compose logs -f --no-log-prefix loadgen
  local container status
  container="$(docker compose ps -aq loadgen)"
  status="$(docker inspect -f '{{.State.ExitCode}}' "$container")"
  cat >&2 <<EOF

The testbed is still up. Try (tokens in .env; /healthz and /metrics need none; with TLS,
https:// and curl --cacert build/tls/ca.pem):
  TOKEN=\$(sed -n 's/^MEGHA_CLUSTER_TOKEN=//p' .env)
  curl -s -H "Authorization: Bearer \$TOKEN" http://127.0.0.1:${MEGHA_GM1_PORT:-8001}/v1/queues
  docker compose logs --no-log-prefix gm-1 | tail   # JSON event lines of one service
  scripts/testbed.sh replay                         # replay again
  scripts/testbed.sh down                           # remove every container and network
EOF
  return "$status"
}

command=""
tls=keep
for argument in "$@"; do
  case "$argument" in
    --tls) tls=on ;;
    --no-tls) tls=off ;;
    -h|--help|help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) [ -z "$command" ] || { usage >&2; exit 2; }; command="$argument" ;;
  esac
done

case "${command:-up}" in
  up)
    bash deploy/prepare.sh
    ensure_password
    ensure_tokens
    ensure_tls "$tls"
    docker compose up -d --build --remove-orphans
    follow_loadgen
    ;;
  replay)
    ensure_password
    ensure_tokens
    ensure_tls "$tls"
    docker compose up -d --no-deps --force-recreate loadgen
    follow_loadgen
    ;;
  down)
    docker compose down --remove-orphans --volumes
    ;;
  status)
    docker compose ps -a
    ;;
  *)
    usage >&2
    exit 2
    ;;
esac
