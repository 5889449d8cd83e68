"""Small helpers the HTTP services share: wire bodies in and out of FastAPI, reachability of a
peer as log events, and starting a service (its environment, then uvicorn). Requests to peers
are api/peers.py.

TLS, as an option: with MEGHA_TLS_CERT, MEGHA_TLS_KEY and MEGHA_TLS_CA (PEM paths: this
service's certificate and key, and the CA that signed every service's) a service serves HTTPS
and its client verifies its peers against the CA (api/peers.py); its own address in
MEGHA_ENDPOINTS must then be https://. All three or none: a half-set or unreadable one, or a
scheme that disagrees, stops the service at start with a `config_error` naming the variable.
scripts/make-certs.sh makes a CA and the certificates.

Wire bodies are parsed with the wire model's own JSON parser (`model_validate_json`), not
FastAPI's body binding: the wire models are written for JSON mode (infinite priorities travel
as the string "Infinity"), and a refusal is the usual 422 with pydantic's detail, its `loc`
starting with "body" as FastAPI's own would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import uvicorn
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse
from prometheus_client import generate_latest
from pydantic import BaseModel, ValidationError

from api.auth import read_secret
from api.endpoints import ENV as ENDPOINTS_ENV
from api.endpoints import Endpoints
from api.peers import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, client_ssl_context
from common.errors import InvalidInput
from common.federation import Federation, load_federation
from services.auth import OPEN_PATHS
from services.eventlog import BackgroundWriter, EventLog

JSON = "application/json"
M = TypeVar("M", bound=BaseModel)


class PeerLink:
    """Whether a peer answers, logged once per change: one `down_event` per outage (not one
    per failed heartbeat) and one `up_event` when it answers again."""

    def __init__(self, log: EventLog, down_event: str, up_event: str, fields: dict) -> None:
        self._log = log
        self._down_event = down_event
        self._up_event = up_event
        self._fields = fields
        self.reachable = True
        self.outages = 0

    def failed(self, error: str, **extra: object) -> None:
        if self.reachable:
            self.reachable = False
            self.outages += 1
            self._log.emit(self._down_event, self._fields | extra | {"error": error[:300]})

    def answered(self, **extra: object) -> None:
        if not self.reachable:
            self.reachable = True
            self._log.emit(self._up_event, self._fields | extra)


ECHO_BODY_MAX = 64 * 1024  # bytes of a body whose bad values a 422 quotes


async def parse_body(request: Request, model: type[M]) -> M:
    """The request's JSON body as `model`; a 422 with pydantic's detail if it does not fit."""
    raw = await request.body()
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        # `error.json()` renders contexts that hold exceptions as text; `errors()` would
        # hand FastAPI objects it cannot encode. A body that is not UTF-8 cannot be echoed
        # back as the error's input (found by benchmarks/fuzz_api.py: it was a 500).
        try:
            # a value is echoed back only from a small body: a 10 MB id would cost the
            # service more to echo than to refuse (benchmarks/bench_admission.py)
            details = json.loads(error.json(include_url=False,
                                            include_input=len(raw) <= ECHO_BODY_MAX))
        except ValueError:
            details = json.loads(error.json(include_url=False, include_input=False))
        for detail in details:
            detail["loc"] = ["body", *detail["loc"]]
        raise RequestValidationError(details) from None


# FastAPI's own 422 body (`HTTPValidationError`), written out: routes that parse their body
# with `parse_body` answer it too, and FastAPI documents it only for bodies it binds itself.
VALIDATION_ERROR_SCHEMA = {
    "type": "object", "required": ["detail"],
    "properties": {"detail": {"type": "array", "items": {
        "type": "object", "required": ["loc", "msg", "type"],
        "properties": {"loc": {"type": "array",
                               "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                       "msg": {"type": "string"}, "type": {"type": "string"}}}}}}
DETAIL_SCHEMA = {"type": "object", "required": ["detail"]}


def _inline_refs(node: object, defs: dict) -> object:
    """A pydantic JSON schema with its `#/$defs/...` references replaced by the definitions
    (the wire models are not recursive), so it can stand in an OpenAPI operation."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline_refs(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline_refs(value, defs) for key, value in node.items() if key != "$defs"}
    if isinstance(node, list):
        return [_inline_refs(value, defs) for value in node]
    return node


def wire_body(model: type[BaseModel]) -> dict:
    """`openapi_extra` for a route that reads `model` with `parse_body`: the body's schema and
    its 422 in the OpenAPI document, which FastAPI cannot see (clients and the API fuzzer,
    benchmarks/fuzz_api.py, read them there)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {JSON: {
                "schema": _inline_refs(schema, schema.get("$defs", {}))}}},
            "responses": {"422": {"description": f"The body is not a valid {model.__name__}.",
                                  "content": {JSON: {"schema": VALIDATION_ERROR_SCHEMA}}}}}


def document_refusals(app, open_paths: frozenset[str] = OPEN_PATHS) -> None:
    """Put in `app`'s OpenAPI document the answers any route may give before its handler runs:
    401 and 403 from the token check (services/auth.py; not on `open_paths`) and 413 from the
    body cap (services/bodylimit.py), so that every status a service answers is documented."""
    build = app.openapi
    refusals = {
        "401": "No token, a malformed `Authorization` header, or an unknown token.",
        "403": "A user's or a role's token on a route (or a queue) it may not use.",
        "413": "The request body is over the service's limit (MEGHA_MAX_BODY_BYTES).",
    }

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for status, description in refusals.items():
                    if status != "413" and path in open_paths:
                        continue
                    responses.setdefault(status, {"description": description, "content": {
                        JSON: {"schema": DETAIL_SCHEMA}}})
        return schema

    app.openapi = openapi


def body_error(field: str, message: str, value: object = None) -> RequestValidationError:
    """A 422 naming one body field, shaped like pydantic's own errors."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ["body", field], "msg": message, "input": value}]
    )


def wire_response(model: BaseModel, status_code: int = 200) -> Response:
    """Serialize with the wire model's own JSON encoder (infinities become "Infinity")."""
    return Response(model.model_dump_json(), status_code=status_code, media_type=JSON)


def listen_address(base_url: str) -> tuple[str, int]:
    """Where to bind for a service whose peers reach it at `base_url`.

    An IP address or `localhost` is bound as given (local processes on 127.0.0.1); a name is a
    container's service name, which resolves to one interface of several, so bind them all.
    `MEGHA_LISTEN_HOST` overrides the host.
    """
    url = urlsplit(base_url)
    host = url.hostname or ""
    is_address = host == "localhost" or host.replace(".", "").isdigit() or ":" in host
    default_port = 443 if url.scheme == "https" else 80
    return os.environ.get("MEGHA_LISTEN_HOST", host if is_address else "0.0.0.0"), (
        url.port or default_port
    )


def log_crashes(task: asyncio.Task, log: EventLog) -> asyncio.Task:
    """asyncio keeps a background task's exception to itself: make it an event instead."""

    def done(finished: asyncio.Task) -> None:
        if not finished.cancelled() and finished.exception() is not None:
            log.emit("background_task_failed",
                     {"task": finished.get_name(), "error": repr(finished.exception())[:500]})

    task.add_done_callback(done)
    return task


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """The PEM files a service serves HTTPS with, and the CA its peers' certificates carry."""

    cert: str
    key: str
    ca: str


def server_tls_from_env(environ: Mapping[str, str] | None = None) -> ServerTLS | None:
    """MEGHA_TLS_CERT, MEGHA_TLS_KEY and MEGHA_TLS_CA, all three or none (None: plain HTTP).

    Loaded here, not first by uvicorn, so that a key that does not match its certificate or a
    file that cannot be read is an InvalidInput naming the variable and the path."""
    environ = os.environ if environ is None else environ
    names = (TLS_CERT_ENV, TLS_KEY_ENV, TLS_CA_ENV)
    values = {name: environ.get(name, "").strip() for name in names}
    given = [name for name in names if values[name]]
    if not given:
        return None
    missing = [name for name in names if not values[name]]
    if missing:
        raise InvalidInput(missing[0], f"is not set, but {', '.join(given)} "
                                       f"{'is' if len(given) == 1 else 'are'}: a service "
                                       f"with TLS needs {', '.join(names)} (its certificate, "
                                       f"its key and the CA that signed every service's)")
    for name in (TLS_CERT_ENV, TLS_KEY_ENV):
        try:
            with open(values[name], "rb"):
                pass
        except OSError as error:
            raise InvalidInput(name, f"cannot read {values[name]}: {error.strerror}") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(values[TLS_CERT_ENV],
                                                                values[TLS_KEY_ENV])
    except ssl.SSLError as error:
        raise InvalidInput(TLS_KEY_ENV, f"{values[TLS_KEY_ENV]} and {TLS_CERT_ENV} "
                                        f"{values[TLS_CERT_ENV]} do not make a PEM key and its "
                                        f"certificate ({error.reason or error})") from None
    client_ssl_context(environ)  # the CA: refused here if it cannot be loaded
    return ServerTLS(values[TLS_CERT_ENV], values[TLS_KEY_ENV], values[TLS_CA_ENV])


def check_scheme(service_id: str, url: str, tls: ServerTLS | None) -> None:
    """A service's own address must say what it serves: peers would otherwise speak plain
    HTTP to its TLS port, or TLS to its plain one."""
    https = url.startswith("https://")
    if tls is not None and not https:
        raise InvalidInput(ENDPOINTS_ENV, f"gives {service_id!r} the address {url}, but "
                                          f"{TLS_CERT_ENV} is set: a service with TLS serves "
                                          f"https://")
    if tls is None and https:
        raise InvalidInput(TLS_CERT_ENV, f"is not set, but {ENDPOINTS_ENV} gives "
                                         f"{service_id!r} the address {url}: an https:// "
                                         f"service needs {TLS_CERT_ENV}, {TLS_KEY_ENV} and "
                                         f"{TLS_CA_ENV}")


@dataclass(frozen=True, slots=True)
class ServiceEnv:
    """What a service's `main()` reads from its environment."""

    service_id: str
    log: EventLog
    federation: Federation
    endpoints: Endpoints
    tls: ServerTLS | None = None


def read_service_env() -> ServiceEnv:
    """MEGHA_ID, MEGHA_CONFIG (the federation file), MEGHA_ENDPOINTS and the TLS files, with
    logging set up first so that even a configuration error is a JSON line (`config_error`,
    exit status 2)."""
    service_id = os.environ.get("MEGHA_ID", "")
    sys.stdout.flush()
    log = EventLog(service_id or "unknown", BackgroundWriter(sys.stdout.fileno()))
    log.install_logging()
    try:
        if not service_id:
            raise InvalidInput("MEGHA_ID", "is not set")
        path = os.environ.get("MEGHA_CONFIG", "")
        if not path:
            raise InvalidInput("MEGHA_CONFIG", "is not set")
        with open(path, encoding="utf-8") as file:
            federation = load_federation(file.read(), path)
        endpoints = Endpoints.from_env()
        own_url = endpoints.url(service_id)  # where this service listens: missing is fatal
        tls = server_tls_from_env()
        check_scheme(service_id, own_url, tls)
    except (InvalidInput, OSError) as error:
        log.emit("config_error", {"error": str(error)})
        raise SystemExit(2) from None
    return ServiceEnv(service_id, log, federation, endpoints, tls)


def lifespan_of(service) -> Callable:
    """FastAPI's lifespan for a service object with `start()` and `stop()` coroutines."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    return lifespan


def add_shared_routes(app, core, registry, on_request: Callable[[], None] | None = None) -> None:
    """What every service answers: the story of an id and its Prometheus metrics; and the
    refusals of any route, in its OpenAPI document (`document_refusals`). `on_request` is
    called for each request but those two and /healthz (CoreRunner.received)."""
    document_refusals(app)
    if on_request is not None:
        app.add_middleware(CountRequests, on_request=on_request)

    # Starlette's path convertor does not match a line break: a key holding one finds no route
    @app.get("/v1/debug/story/{key:path}", responses={404: {
        "description": "No route matched: the key holds a line break."}})
    async def story(key: str) -> list[dict]:
        return core.story(key)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode())


class CountRequests:
    """A pure ASGI middleware (no per-request task, unlike @app.middleware): counts the
    requests that do the service's work."""

    NOT_COUNTED = ("/metrics", "/healthz")

    def __init__(self, app, on_request: Callable[[], None]) -> None:
        self.app = app
        self.on_request = on_request

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("path") not in self.NOT_COUNTED:
            self.on_request()
        await self.app(scope, receive, send)


def required_env(name: str) -> str:
    """A variable that must be set; it may be given as NAME_FILE instead (api/auth.py,
    `read_secret`), as secrets such as MEGHA_AMQP_URL are in Kubernetes."""
    value = read_secret(name).value
    if not value:
        raise InvalidInput(name, f"is not set (nor {name}_FILE)")
    return value


def build_and_serve(env: ServiceEnv, build_app: Callable[[], object]) -> None:
    """A service's `main()` after `read_service_env()`: build its app, where a bad setting is
    a `config_error` event and exit status 2 rather than a traceback, then serve it."""
    try:
        app = build_app()
    except InvalidInput as error:
        env.log.emit("config_error", {"error": str(error)})
        raise SystemExit(2) from None
    serve(app, env.endpoints.url(env.service_id), env.tls)


class QuietServer(uvicorn.Server):
    """uvicorn's server, waking once a second instead of ten times when nothing happens.

    uvicorn's main loop sleeps 0.1 s between looks at its exit flag and its Date header. On a
    machine where one event-loop wake-up costs about a quarter of a millisecond (measured on
    this project's 2-core VMs), those ten wake-ups a second were a third of an idle
    service's CPU, in a testbed of eleven services. A signal still stops the server within
    a second; the Date header is refreshed on every look.
    """

    LOOK_EVERY = 1.0

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # tick 0 refreshes the Date header
            await asyncio.sleep(self.LOOK_EVERY)


def serve(app, base_url: str, tls: ServerTLS | None = None) -> None:
    """Run `app` with uvicorn (uvloop, httptools), over HTTPS with `tls`; its own logging goes
    through the root logger (JSON lines)."""
    host, port = listen_address(base_url)
    options = {} if tls is None else {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
    config = uvicorn.Config(app, host=host, port=port, access_log=False, log_config=None,
                            loop="uvloop", http="httptools", **options)
    QuietServer(config).run()
