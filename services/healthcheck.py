"""Container health checks that cost almost nothing: a few lines of stdlib, no service stack.

    python -S -m services.healthcheck          this service answers GET /healthz with 200
    python3 -S healthcheck.py amqp [PORT]      RabbitMQ completes the start of an AMQP handshake

A check runs in every container for the container's whole life, so it must not import what the
service imports (FastAPI, pydantic, httpx: about half a CPU-second per call), and the broker's
must not boot an Erlang VM as `rabbitmq-diagnostics` does. This file imports nothing outside
the standard library, so it also runs as a plain script in the RabbitMQ container, where compose
mounts it; `-S` skips site-packages as well.

The service's port comes from the environment the service itself reads (MEGHA_ID and
MEGHA_ENDPOINTS, `id=url,...`); the check asks on loopback, so it cannot pass for another
container. A service whose endpoint is `https://` is asked over TLS, its certificate checked
against MEGHA_TLS_CA for the name `localhost` (every certificate scripts/make-certs.sh makes
carries it). Exit status 0 is healthy; otherwise one line on stderr says why.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
from urllib.parse import urlsplit

TIMEOUT = 2.0  # seconds for the whole probe; compose's own timeout is longer
# An AMQP 0-9-1 client opens with this header; a broker answers with a Connection.Start frame
# (frame type 1, channel 0), and we hang up before logging in.
AMQP_HEADER = b"AMQP\x00\x00\x09\x01"


def service_address(service: str, endpoints: str) -> tuple[int, bool]:
    """This service's port from MEGHA_ENDPOINTS (the same table api/endpoints.py reads), and
    whether it serves HTTPS."""
    for item in endpoints.split(","):
        name, _, url = item.strip().partition("=")
        if name.strip() == service:
            parts = urlsplit(url.strip())
            tls = parts.scheme == "https"
            return parts.port or (443 if tls else 80), tls
    raise LookupError(f"no address for {service!r} in MEGHA_ENDPOINTS")


def http_ok(port: int, path: str = "/healthz", *, tls: bool = False,
            tls_ca: str | None = None) -> None:
    """Raise unless 127.0.0.1:port answers `GET path` with status 200 (over TLS verified
    against `tls_ca`, or the system's CAs, when `tls`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as plain:
        connection = (ssl.create_default_context(cafile=tls_ca).wrap_socket(
            plain, server_hostname="localhost") if tls else plain)
        connection.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        status_line = connection.makefile("rb").readline(200).decode("latin-1").strip()
    parts = status_line.split()
    if len(parts) < 2 or parts[1] != "200":
        raise ConnectionError(f"GET {path} answered {status_line!r}")


def amqp_ok(port: int = 5672) -> None:
    """Raise unless a broker on 127.0.0.1:port answers the AMQP header with Connection.Start."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as connection:
        connection.sendall(AMQP_HEADER)
        frame = connection.recv(7)
    if len(frame) < 7 or frame[0] != 1 or frame[1:3] != b"\x00\x00":
        raise ConnectionError(f"no AMQP Connection.Start from port {port} (got {frame!r})")


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["amqp"]:
            amqp_ok(int(argv[1]) if len(argv) > 1 else 5672)
        else:
            port, tls = service_address(os.environ.get("MEGHA_ID", ""),
                                        os.environ.get("MEGHA_ENDPOINTS", ""))
            http_ok(port, tls=tls, tls_ca=os.environ.get("MEGHA_TLS_CA") or None)
    except (OSError, LookupError, ValueError) as error:
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
