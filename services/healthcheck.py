"""A container health check: exit 0 when this service answers `/healthz` with 200.

    python -m services.healthcheck

It reads the same environment as the service (MEGHA_ID, MEGHA_ENDPOINTS) to find its port, and
asks on loopback: the image needs no curl, and the check cannot pass for another container.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

from services.endpoints import Endpoints
from services.http import listen_address


def main() -> int:
    service = os.environ.get("MEGHA_ID", "")
    try:
        _, port = listen_address(Endpoints.from_env().url(service))
    except Exception as error:  # noqa: BLE001 - any failure is "unhealthy", with its reason
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return 0 if answer.status == 200 else 1
    except (urllib.error.URLError, OSError) as error:
        print(f"unhealthy: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
