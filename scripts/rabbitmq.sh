#!/usr/bin/env bash
# A RabbitMQ broker owned by this project: its own node name, port, data and log folders, so
# it never clashes with a system broker and tests may stop and restart it at will.
#
#   scripts/rabbitmq.sh start     install Debian's rabbitmq-server if missing, start, create the user
#   scripts/rabbitmq.sh stop      stop it (its data stays in $MEGHA_RABBITMQ_HOME)
#   scripts/rabbitmq.sh restart
#   scripts/rabbitmq.sh status    exit 0 if it answers
#   scripts/rabbitmq.sh url       print the AMQP URL services should use
#   scripts/rabbitmq.sh vhost NAME        create a virtual host (if new), print its AMQP URL
#   scripts/rabbitmq.sh delete-vhost NAME
#   scripts/rabbitmq.sh vhosts            list the virtual hosts, one a line
#   scripts/rabbitmq.sh busy-vhosts       the virtual hosts with a client connected, one a line
#
# Environment: MEGHA_RABBITMQ_PORT (25672), MEGHA_RABBITMQ_USER (megha),
# MEGHA_RABBITMQ_PASSWORD (megha-dev), MEGHA_RABBITMQ_HOME (/tmp/megha-rabbitmq).
set -euo pipefail
port="${MEGHA_RABBITMQ_PORT:-25672}"
user="${MEGHA_RABBITMQ_USER:-megha}"
password="${MEGHA_RABBITMQ_PASSWORD:-megha-dev}"
home="${MEGHA_RABBITMQ_HOME:-/tmp/megha-rabbitmq}"
bin=/usr/lib/rabbitmq/bin
node="megha-$port@localhost"

export RABBITMQ_NODENAME="$node" RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$((port + 1))"
export RABBITMQ_MNESIA_BASE="$home/mnesia" RABBITMQ_LOG_BASE="$home/log"
export RABBITMQ_ENABLED_PLUGINS_FILE="$home/enabled_plugins" RABBITMQ_CONFIG_FILE="$home/rabbitmq"
export RABBITMQ_PID_FILE="$home/pid" HOME="$home"

install() {
  [ -x "$bin/rabbitmq-server" ] && return
  echo "installing Debian's rabbitmq-server ..." >&2
  if [ "$(id -u)" != 0 ]; then echo "rabbitmq-server is missing and we are not root" >&2; exit 1; fi
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
  # the package starts a system broker on 5672; ours is separate, and that one is not needed
  (systemctl stop rabbitmq-server || service rabbitmq-server stop || true) >/dev/null 2>&1
}

ctl() { "$bin/rabbitmqctl" -n "$node" "$@"; }

start() {
  install
  mkdir -p "$home/log" "$home/mnesia"
  echo "[]." > "$home/enabled_plugins"
  # a consumer may hold a delivery while its job runs for long: the GM acks task events
  # and jobs promptly, but keep the broker's timeout explicit rather than inherited
  cat > "$home/rabbitmq.conf" <<CONF
listeners.tcp.default = $port
loopback_users = none
consumer_timeout = 3600000
CONF
  if ! ctl status >/dev/null 2>&1; then
    "$bin/rabbitmq-server" -detached
  fi
  ctl wait "$RABBITMQ_PID_FILE" --timeout 90 >/dev/null
  if ! ctl list_users 2>/dev/null | grep -q "^$user\b"; then
    ctl add_user "$user" "$password" >/dev/null
    ctl set_permissions -p / "$user" ".*" ".*" ".*" >/dev/null
  fi
  ctl delete_user guest >/dev/null 2>&1 || true
  echo "rabbitmq ready on port $port" >&2
}

stop() {
  ctl stop >/dev/null 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) ctl status >/dev/null 2>&1 ;;
  url) echo "amqp://$user:$password@127.0.0.1:$port/%2F" ;;
  vhost)  # a virtual host of its own (a test's, apart from other runs); prints its URL
    ctl add_vhost "$2" >/dev/null 2>&1 || true
    ctl set_permissions -p "$2" "$user" ".*" ".*" ".*" >/dev/null
    echo "amqp://$user:$password@127.0.0.1:$port/$2" ;;
  delete-vhost) ctl delete_vhost "$2" >/dev/null 2>&1 || true ;;
  vhosts) ctl list_vhosts --quiet --no-table-headers 2>/dev/null ;;
  busy-vhosts) ctl list_connections vhost --quiet --no-table-headers 2>/dev/null | sort -u ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
