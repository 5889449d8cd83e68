"""A cap on request bodies, for every service: 413 with the reason before the body is held.

Why: a service reads a whole body into memory before parsing it, so one huge request (or a
slow endless one) could take a service's memory. The declared `Content-Length` is checked
before anything is read; a body sent without one (chunked) is counted as it arrives and the
request refused once it passes the cap. The cap is `MEGHA_MAX_BODY_BYTES` (default 16 MiB:
an LM's batch to a worker holds at most 500 starts of about 500 bytes, a job of 10,000 tasks
about 1 MB).
"""

from __future__ import annotations

import os

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


def too_large(limit: int, size: str) -> str:
    return f"request body of {size} is over this service's limit of {limit} bytes ({MAX_BODY_ENV})"


class BodyLimit:
    """ASGI middleware: refuse bodies over `max_bytes` with 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = JSONResponse({"detail": too_large(self.max_bytes,
                                                         f"{int(declared)} bytes")}, 413)
            await response(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # raised where the route reads its body: FastAPI answers the 413
                    raise HTTPException(413, detail=too_large(self.max_bytes,
                                                              f"more than {self.max_bytes} bytes"))
            return message

        await self.app(scope, counting_receive, send)
