#!/usr/bin/env bash
# Writes the secrets of the Kubernetes testbed, random, one file each, into
# deploy/k8s/base/secrets/ (or DIR), which base/kustomization.yaml's secretGenerator turns into
# one Secret per role and git ignores (the folder gets a .gitignore of `*` too):
#   cluster-token         the operator's token (services accept it; none sends it: no pod gets it)
#   gm-token, lm-token, worker-token   each role's token, sent by that role to its peers
#   *.sha256              each token's SHA-256 (printf %s "$TOKEN" | sha256sum), for the
#                         services that check a token they never send
#   user-tokens           "q1=TOKEN,q2=TOKEN,...", one per user queue of federation.toml
#   rabbitmq-password     the broker user `megha`'s password, and what is made of it:
#   amqp-url              amqp://megha:PASSWORD@rabbitmq:5672/%2F (GMs and LMs)
#   rabbitmq-credentials.conf   `default_pass = PASSWORD` (the broker's conf.d)
# --tls also makes a CA and a certificate per Service of MEGHA_ENDPOINTS
# (base/kustomization.yaml) with scripts/make-certs.sh, into deploy/k8s/tls/certs/, for
# `kubectl apply -k deploy/k8s/tls`.
#
#   deploy/k8s/make-secrets.sh [--force] [--tls] [DIR]
#
# Existing values are kept (so running this before every `kubectl apply -k` is harmless) and
# only missing ones made; the digests, the URL and the broker's line are always made again from
# them. --force makes every value (and with --tls every certificate) anew, and the next apply
# restarts every pod with them. RabbitMQ sets its user's password on its first boot only: after
# --force, change it there too (docs/kubernetes.md, "Secrets").
# MEGHA_MAKE_CERTS names another make-certs.sh (default: the repository's scripts/).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
force=0
tls=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --force) force=1; shift ;;
    --tls) tls=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) usage >&2; exit 2 ;;
    *) break ;;
  esac
done
[ "$#" -le 1 ] || { usage >&2; exit 2; }
out="${1:-$here/base/secrets}"
umask 077
mkdir -p "$out"
[ -e "$out/.gitignore" ] || printf '*\n' > "$out/.gitignore"

python3 - "$here/base/federation.toml" "$out" "$force" <<'PY'
import hashlib
import os
import secrets
import sys
import tomllib
from pathlib import Path

federation, out, force = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1"
with open(federation, "rb") as file:
    queues = [queue["name"] for queue in tomllib.load(file)["queues"]]


def write(name: str, value: str) -> None:
    """The file `name` holding exactly `value` (no newline), owner-only, replaced whole."""
    partial = out / f".{name}.tmp"
    with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(value)
    os.replace(partial, out / name)


made, kept = [], []


def value(name: str, make) -> str:
    """A kept value (unless --force), else a new one."""
    path = out / name
    if not force and path.is_file() and path.read_text().strip():
        kept.append(name)
        return path.read_text().strip()
    made.append(name)
    new = make()
    write(name, new)
    return new


# hex only: safe in a file, an HTTP header, a RabbitMQ setting and the userinfo of a URL
tokens = {name: value(name, lambda: secrets.token_hex(32))
          for name in ("cluster-token", "gm-token", "lm-token", "worker-token")}
users = value("user-tokens", lambda: ",".join(f"{queue}={secrets.token_hex(24)}"
                                              for queue in queues))
have = {pair.split("=", 1)[0] for pair in users.split(",")}
if have != set(queues):
    sys.exit(f"make-secrets: {out / 'user-tokens'} names the queues {sorted(have)}, the "
             f"federation {sorted(queues)}: --force makes new ones")
password = value("rabbitmq-password", lambda: secrets.token_hex(24))
# what is made of the values: always written again, so it always matches them
for name, token in tokens.items():
    write(f"{name}.sha256", hashlib.sha256(token.encode()).hexdigest())
write("amqp-url", f"amqp://megha:{password}@rabbitmq:5672/%2F")
write("rabbitmq-credentials.conf", f"default_pass = {password}\n")
print(f"make-secrets: {out}: made {', '.join(made) or 'nothing'}"
      f"{'; kept ' + ', '.join(kept) if kept else ''} ({len(queues)} user queues)",
      file=sys.stderr)
PY

if [ "$tls" = 1 ]; then
  certs="$here/tls/certs"
  make_certs="${MEGHA_MAKE_CERTS:-$here/../../scripts/make-certs.sh}"
  [ -x "$make_certs" ] || { echo "make-secrets: no $make_certs to make certificates" >&2; exit 1; }
  # every host of MEGHA_ENDPOINTS: the names the services and the replay verify
  endpoints="$(sed -n 's/^ *- MEGHA_ENDPOINTS=//p' "$here/base/kustomization.yaml")"
  if [ -z "$endpoints" ]; then
    echo "make-secrets: no MEGHA_ENDPOINTS in base/kustomization.yaml" >&2
    exit 1
  fi
  mapfile -t names < <(tr ',' '\n' <<<"$endpoints" | sed -E 's#^[^=]*=[a-z]+://([^:/]+).*#\1#')
  [ "$force" = 0 ] || rm -rf "$certs"
  "$make_certs" "$certs" "${names[@]}"
fi
