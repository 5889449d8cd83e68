"""One app of each role (GM, LM, worker agent) on the small federation, built and not started:
for tests that read their routes or call them in process. `auth_for(role)` gives each its
AuthConfig."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

from api.endpoints import Endpoints
from common.federation import Federation, load_federation
from services import gm, lm, worker
from services.auth import AuthConfig
from services.eventlog import EventLog

ROOT = Path(__file__).resolve().parents[1]


def small_federation() -> Federation:
    text = (ROOT / "deploy" / "federation-small.toml").read_text()
    return load_federation(text, "federation-small.toml")


def role_apps(state: Path, auth_for: Callable[[str], AuthConfig],
              federation: Federation | None = None) -> dict[str, object]:
    """{"gm": gm-1's app, "lm": lm-1's, "worker": lm-1/w0's}; the GM's store in `state`."""
    federation = federation or small_federation()
    ids = [*federation.gms, *(cluster.id for cluster in federation.lms),
           *sorted(federation.workers())]
    endpoints = Endpoints({name: f"http://127.0.0.1:{9000 + n}" for n, name in enumerate(ids)})

    def log(name: str) -> EventLog:
        return EventLog(name, io.StringIO())

    return {
        "gm": gm.create_app(gm.GMService(federation, "gm-1", endpoints, "amqp://unused", state,
                                         auth=auth_for("gm"), log=log("gm-1"))),
        "lm": lm.create_app(federation, "lm-1", endpoints, "amqp://unused",
                            auth=auth_for("lm"), log=log("lm-1")),
        "worker": worker.create_app(federation, "lm-1/w0", endpoints, auth=auth_for("worker"),
                                    log=log("lm-1/w0")),
    }
