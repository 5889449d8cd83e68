"""A cap on request bodies, for every service: 413 with the reason before the body is held.

Why: a service reads a whole body into memory before parsing it, so one huge request (or a
slow endless one) could take a service's memory. The declared `Content-Length` is checked
before anything is read; a body sent without one (chunked) is counted as it arrives and the
request refused once it passes the cap. The cap is `MEGHA_MAX_BODY_BYTES` (default 16 MiB:
an LM's batch to a worker holds at most 500 starts of about 500 bytes, a job of 10,000 tasks
about 1 MB).

A route may have its own cap, derived from the limits that bound what it accepts: a service
sets `app.state.body_caps = {path: RouteCap(bytes, source)}` (the GM's `POST /v1/jobs`, from
`limits.max_tasks_per_job`: services/job_body.py), and the 413 names that source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fastapi import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from common.errors import InvalidInput

MAX_BODY_ENV = "MEGHA_MAX_BODY_BYTES"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


def max_body_bytes_from_env(environ=None) -> int:
    text = (os.environ if environ is None else environ).get(MAX_BODY_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BODY_BYTES
    try:
        value = int(text)
    except ValueError:
        raise InvalidInput(MAX_BODY_ENV, f"expected a number of bytes, got {text!r}") from None
    if value < 1024:
        raise InvalidInput(MAX_BODY_ENV, f"must be at least 1024 bytes, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class RouteCap:
    """One route's own body cap, and what it is derived from (named in the 413)."""

    max_bytes: int
    source: str


def too_large(limit: int, size: str, source: str = MAX_BODY_ENV) -> str:
    return f"request body of {size} is over this route's limit of {limit} bytes ({source})"


class BodyLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, source = self._cap_of(scope)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            response = JSONResponse({"detail": too_large(limit, f"{int(declared)} bytes",
                                                         source)}, 413)
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # raised where the route reads its body: FastAPI answers the 413
                    raise HTTPException(413, detail=too_large(limit, f"more than {limit} bytes",
                                                              source))
            return message

        await self.app(scope, counting_receive, send)

    def _cap_of(self, scope: Scope) -> tuple[int, str]:
        app = scope.get("app")
        caps = getattr(getattr(app, "state", None), "body_caps", None) or {}
        route = caps.get(scope.get("path"))
        return (self.max_bytes, MAX_BODY_ENV) if route is None else (route.max_bytes,
                                                                     route.source)
