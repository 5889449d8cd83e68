#!/usr/bin/env bash
# A Docker engine for the testbed on a machine that may have none (CI, a fresh developer box).
#
#   deploy/engine.sh start    install Debian's docker.io if dockerd is missing, start dockerd
#                             in the background unless an engine already answers
#   deploy/engine.sh stop     stop dockerd, but only if `start` started it
#   deploy/engine.sh status   exit 0 if an engine answers
#
# An engine we did not start (systemd's, another developer's) is used as it is and never
# stopped: we remember our own by its pid in $MEGHA_DOCKERD_PIDFILE.
# Environment: MEGHA_DOCKERD_PIDFILE (/run/megha-dockerd.pid),
# MEGHA_DOCKERD_LOG (/var/log/megha-dockerd.log), MEGHA_DOCKERD_TIMEOUT (60 seconds).
set -euo pipefail
pidfile="${MEGHA_DOCKERD_PIDFILE:-/run/megha-dockerd.pid}"
log="${MEGHA_DOCKERD_LOG:-/var/log/megha-dockerd.log}"
timeout="${MEGHA_DOCKERD_TIMEOUT:-60}"
apt_log=/var/log/megha-apt-docker.log

say() { echo "engine: $*" >&2; }
die() { say "$*"; exit 1; }
answers() { docker info >/dev/null 2>&1; }
our_pid() { [ -f "$pidfile" ] && cat "$pidfile"; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

install_engine() {
  command -v dockerd >/dev/null && return
  [ "$(id -u)" = 0 ] || die "dockerd is missing and we are not root: install docker.io first"
  say "installing Debian's docker.io (log: $apt_log) ..."
  # apt prints pages of progress: keep it in a file and show only its end when it fails
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends docker.io iptables; } >"$apt_log" 2>&1; then
    tail -n 20 "$apt_log" >&2
    die "apt-get install docker.io failed (full log: $apt_log)"
  fi
  # the package's own service may have started an engine already (on a systemd machine)
}

launch() {
  mkdir -p "$(dirname "$log")" "$(dirname "$pidfile")"
  # setsid: the engine outlives this shell and the terminal that ran it
  setsid dockerd >>"$log" 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo $!
}

start() {
  if answers; then say "ok, an engine already answers"; return; fi
  install_engine
  command -v docker >/dev/null || die "dockerd is there but the docker client is not"
  local pid how="started"
  pid="$(our_pid || true)"
  if ! alive "$pid"; then
    # a dockerd still starting (the package's init script, another shell) would make a
    # second one fail on its lock: wait for that one instead
    pid="$(pidof -s dockerd || true)"
    if [ -n "$pid" ]; then how="found"; else pid="$(launch)"; fi
  fi
  local waited=0
  until answers; do
    if ! alive "$pid"; then
      tail -n 15 "$log" >&2 2>/dev/null || true
      [ "$how" = found ] || rm -f "$pidfile"
      die "dockerd exited (log: $log)"
    fi
    [ "$waited" -lt "$timeout" ] || die "dockerd (pid $pid) did not answer within ${timeout}s (log: $log)"
    sleep 1
    waited=$((waited + 1))
  done
  if [ "$how" = started ]; then say "started dockerd (pid $pid, log: $log)"; else say "found dockerd (pid $pid) starting"; fi
}

stop() {
  local pid
  pid="$(our_pid || true)"
  if [ -z "$pid" ]; then
    if answers; then say "leaving alone an engine this script did not start"
    else say "no engine running"; fi
    return
  fi
  if alive "$pid"; then
    kill -TERM "$pid"
    # dockerd stops its containers first (10 s grace each, in parallel): give it time
    local waited=0
    while alive "$pid" && [ "$waited" -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
    if alive "$pid"; then kill -KILL "$pid"; say "dockerd (pid $pid) killed after 60s"; fi
    say "stopped dockerd (pid $pid)"
  else
    say "dockerd (pid $pid) was not running"
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  -h|--help) sed -n '2,13p' "$0" ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
