#!/bin/sh
# Entrypoint of megha/rabbitmq:bookworm, the local stand-in for the official rabbitmq image
# (built by deploy/prepare.sh from Debian's rabbitmq-server; copied into the image as
# /usr/local/bin/docker-entrypoint.sh).
#
# It honours the official image's variables for the first user, so one compose file serves
# both images:
#   RABBITMQ_DEFAULT_USER (guest), RABBITMQ_DEFAULT_PASS (guest), RABBITMQ_DEFAULT_VHOST (/)
# The default user is created when the node first boots on an empty data folder, as with the
# official image. Like the official image it accepts logins from other hosts
# (loopback_users = none): guest/guest works from outside only if no other user is given.
# Extra settings: mount *.conf files into /etc/rabbitmq/conf.d/ (read after rabbitmq.conf).
#
# `rabbitmq-server` (the default command) runs in the foreground as the rabbitmq user, logging
# to stdout; any other command runs as given (e.g. `docker run --rm -it IMAGE bash`).
set -eu

write_config() {
  # cuttlefish takes the rest of the line as the value: no quoting needed, no newlines allowed
  cat >/etc/rabbitmq/rabbitmq.conf <<CONF
# written by docker-entrypoint.sh at container start: edits here are lost
listeners.tcp.default = 5672
loopback_users = none
default_user = ${RABBITMQ_DEFAULT_USER:-guest}
default_pass = ${RABBITMQ_DEFAULT_PASS:-guest}
default_vhost = ${RABBITMQ_DEFAULT_VHOST:-/}
CONF
  chown rabbitmq:rabbitmq /etc/rabbitmq/rabbitmq.conf
  chmod 640 /etc/rabbitmq/rabbitmq.conf
}

if [ "${1:-}" = rabbitmq-server ] && [ "$(id -u)" = 0 ]; then
  write_config
  mkdir -p /etc/rabbitmq/conf.d /var/lib/rabbitmq /var/log/rabbitmq
  # a volume mounted over the data folder arrives owned by root
  chown -R rabbitmq:rabbitmq /var/lib/rabbitmq /var/log/rabbitmq
  shift
  # the same environment the CLI tools get (rabbitmq-diagnostics runs as rabbitmq with this
  # HOME, so both find the same Erlang cookie); RABBITMQ_LOGS=- logs to stdout for docker logs
  cd /var/lib/rabbitmq
  exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
    env HOME=/var/lib/rabbitmq RABBITMQ_LOGS=- /usr/lib/rabbitmq/bin/rabbitmq-server "$@"
fi
exec "$@"
