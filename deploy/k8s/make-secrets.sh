#!/usr/bin/env bash
# Writes the secrets of the Kubernetes testbed, random, into deploy/k8s/secrets.env (or FILE),
# which the kustomization's secretGenerator reads and git ignores:
#   MEGHA_CLUSTER_TOKEN       shared secret of the services' internal endpoints
#   MEGHA_USER_TOKENS         "q1=TOKEN,q2=TOKEN,...", one per user queue of federation.toml
#   MEGHA_RABBITMQ_PASSWORD   the broker user `megha`'s password
#
#   deploy/k8s/make-secrets.sh [--force] [FILE]
#
# An existing file is kept (so running this before every `kubectl apply -k deploy/k8s` is
# harmless); --force writes new values, and the next apply restarts every pod with them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
force=0
if [ "${1:-}" = --force ]; then force=1; shift; fi
case "${1:-}" in -h|--help) sed -n '2,11p' "$0"; exit 0 ;; -*) sed -n '2,11p' "$0" >&2; exit 2 ;; esac
out="${1:-$here/secrets.env}"
if [ -e "$out" ] && [ "$force" = 0 ]; then
  echo "make-secrets: $out exists, kept (--force writes new values)" >&2
  exit 0
fi
umask 077
python3 - "$here/federation.toml" "$out" <<'PY'
import os
import secrets
import sys
import tomllib

federation, out = sys.argv[1], sys.argv[2]
with open(federation, "rb") as file:
    queues = [queue["name"] for queue in tomllib.load(file)["queues"]]
# hex only: safe in an env file, an HTTP header and the userinfo of MEGHA_AMQP_URL
values = {
    "MEGHA_CLUSTER_TOKEN": secrets.token_hex(32),
    "MEGHA_USER_TOKENS": ",".join(f"{queue}={secrets.token_hex(24)}" for queue in queues),
    "MEGHA_RABBITMQ_PASSWORD": secrets.token_hex(24),
}
partial = f"{out}.tmp"
with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
    file.writelines(f"{key}={value}\n" for key, value in values.items())
os.replace(partial, out)
print(f"make-secrets: wrote {', '.join(values)} ({len(queues)} user queues) into {out}",
      file=sys.stderr)
PY
