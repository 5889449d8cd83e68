"""Who may call what on a megha service: one cluster secret, one token per user queue, and a
short list of open paths.

Why: every service answers on the network, and an LM or a worker agent does what any caller
asks (launch, preempt, stop a task). So every route needs a bearer token unless it is in
`OPEN_PATHS` (health checks and Prometheus scrapes, which carry no secrets and are called by
tools that hold none):

- the cluster token (`MEGHA_CLUSTER_TOKEN`) is what services send each other, and an operator
  holding it may do everything, on every queue;
- a user token (`MEGHA_USER_TOKENS="q1=TOKEN,q2=TOKEN"`, GMs only) may call the GM's user
  routes (`USER_PATHS`) for its own queue: submit its jobs, read their state and the queues'
  shares (`GET /v1/queues` shows every queue: shares and usage are aggregates, no job ids).

Secure by default: a service whose token is not set refuses to start, naming the variable;
`MEGHA_AUTH=off` turns checking off and is logged as a warning (`auth_disabled`) at start.

The check is a FastAPI dependency given to the app itself (`secure_app`), so a route added
later is authenticated without anyone remembering to; `seal` refuses an app holding a route
the dependency does not cover. Tokens are compared with `hmac.compare_digest`.

The variables' names and the reading of a token list are api/auth.py's, shared with the
clients that send the tokens (`megha replay`).
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.routing import APIRoute
from starlette.routing import Route

from api.auth import AUTH_ENV, CLUSTER_TOKEN_ENV, USER_TOKENS_ENV, check_token, parse_user_tokens
from common.errors import InvalidInput
from services.bodylimit import BodyLimit, max_body_bytes_from_env

# The only paths answered without a token, on every service.
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
# The GM's routes a user token may call (route templates, any method); the rest need the
# cluster token.
USER_PATHS = frozenset({"/v1/jobs", "/v1/jobs/{job_id}", "/v1/queues"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: the operator (cluster token; every queue) or one queue."""

    name: str  # "cluster" or the queue's name; the key of its submission rate bucket
    queue: str | None  # None: every queue

    def may_use(self, queue: str) -> bool:
        return self.queue is None or self.queue == queue


OPERATOR = Principal("cluster", None)


def generate_token() -> str:
    return secrets.token_urlsafe(24)


def generate_env(queues: Collection[str]) -> dict[str, str]:
    """Fresh tokens for a federation's processes: the cluster token and one per queue."""
    return {CLUSTER_TOKEN_ENV: generate_token(),
            USER_TOKENS_ENV: ",".join(f"{queue}={generate_token()}" for queue in queues)}


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """A service's tokens; `enabled=False` only with MEGHA_AUTH=off."""

    enabled: bool
    cluster_token: str = ""
    user_tokens: Mapping[str, str] = field(default_factory=dict)  # queue -> token

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 queues: Collection[str] | None = None,
                 own_queues: Collection[str] = ()) -> AuthConfig:
        """Read the tokens; InvalidInput naming the variable if one is missing or bad.

        `queues`: the federation's user queues, for a GM (None: a service without user
        routes, which reads no user tokens). Every queue in `own_queues` (the GM's) needs a
        token, and a token for a queue the federation does not have is a typo, refused.
        """
        environ = os.environ if environ is None else environ
        switch = environ.get(AUTH_ENV, "on").strip().lower()
        if switch not in ("on", "off"):
            raise InvalidInput(AUTH_ENV, f'must be "on" or "off", got {switch!r}')
        if switch == "off":
            return cls(enabled=False)
        cluster = environ.get(CLUSTER_TOKEN_ENV, "").strip()
        if not cluster:
            raise InvalidInput(CLUSTER_TOKEN_ENV, f"is not set: every service needs the "
                                                  f"cluster token (or set {AUTH_ENV}=off to run "
                                                  f"without authentication)")
        check_token(CLUSTER_TOKEN_ENV, cluster)
        if queues is None:
            return cls(enabled=True, cluster_token=cluster)
        text = environ.get(USER_TOKENS_ENV, "").strip()
        if not text:
            raise InvalidInput(USER_TOKENS_ENV, f"is not set: a GM needs one token per user "
                                                f"queue, e.g. q1=TOKEN1,q2=TOKEN2 (or set "
                                                f"{AUTH_ENV}=off)")
        users = parse_user_tokens(text)
        unknown = sorted(set(users) - set(queues))
        if unknown:
            raise InvalidInput(USER_TOKENS_ENV, f"names queue(s) {', '.join(unknown)} that the "
                                                f"federation does not have (known: "
                                                f"{', '.join(sorted(queues))})")
        missing = sorted(set(own_queues) - set(users))
        if missing:
            raise InvalidInput(USER_TOKENS_ENV, f"has no token for queue(s) "
                                                f"{', '.join(missing)}")
        if cluster in users.values():
            raise InvalidInput(USER_TOKENS_ENV, f"a user token equals {CLUSTER_TOKEN_ENV}")
        return cls(enabled=True, cluster_token=cluster, user_tokens=users)

    def outgoing_headers(self) -> dict[str, str]:
        """What this service sends with every request to another service."""
        return {"Authorization": f"Bearer {self.cluster_token}"} if self.enabled else {}

    def identify(self, authorization: str | None) -> Principal:
        """The principal an `Authorization` header proves; HTTPException 401 if none."""
        if not self.enabled:
            return OPERATOR
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if not authorization:
            raise unauthorized("no Authorization header; send 'Authorization: Bearer TOKEN'")
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("malformed Authorization header; expected 'Bearer TOKEN'")
        given = token.encode()
        # every comparison is made, so the time taken does not say which token came close
        found = OPERATOR if hmac.compare_digest(given, self.cluster_token.encode()) else None
        for queue, expected in self.user_tokens.items():
            if hmac.compare_digest(given, expected.encode()) and found is None:
                found = Principal(queue, queue)
        if found is None:
            raise unauthorized("unknown token")
        return found


def unauthorized(reason: str) -> HTTPException:
    return HTTPException(401, detail=reason, headers={"WWW-Authenticate": "Bearer"})


def forbidden(reason: str) -> HTTPException:
    return HTTPException(403, detail=reason)


async def authenticate(request: Request) -> Principal:
    """The dependency of every route: open paths pass, the rest need a token, and a user token
    only the app's user routes. Handlers take the caller with `Depends(authenticate)`."""
    route = request.scope.get("route")
    path = route.path if route is not None else request.url.path
    if path in OPEN_PATHS:
        return OPERATOR
    security: _AppSecurity = request.app.state.security
    principal = security.config.identify(request.headers.get("authorization"))
    if principal.queue is not None and path not in security.user_paths:
        raise forbidden(f"the token of queue {principal.queue!r} may not call "
                        f"{request.method} {path}; it needs the cluster token")
    return principal


# A handler's parameter for the caller: `principal: Caller` (FastAPI runs the check once).
Caller = Annotated[Principal, Depends(authenticate)]


@dataclass(frozen=True, slots=True)
class _AppSecurity:
    config: AuthConfig
    user_paths: frozenset[str]


def secure_app(title: str, lifespan: Callable, config: AuthConfig, *,
               user_paths: Collection[str] = (), max_body_bytes: int | None = None) -> FastAPI:
    """A FastAPI app whose every route needs a token (but OPEN_PATHS), with its OpenAPI
    document at `GET /openapi.json` behind the same check (FastAPI's own docs routes would
    be open), no Swagger pages, and request bodies capped (services/bodylimit.py; default
    from MEGHA_MAX_BODY_BYTES)."""
    app = FastAPI(title=title, lifespan=lifespan, dependencies=[Depends(authenticate)],
                  openapi_url=None, docs_url=None, redoc_url=None)
    app.state.security = _AppSecurity(config, frozenset(user_paths))
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes or max_body_bytes_from_env())

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> dict:
        return app.openapi()

    return app


def seal(app: FastAPI) -> FastAPI:
    """Refuse an app with a route the dependency does not cover (added with `add_route` or
    a mount): it would answer without a token."""
    for route in app.routes:
        covered = isinstance(route, APIRoute) and any(
            dependency.call is authenticate for dependency in route.dependant.dependencies)
        if not covered and not (isinstance(route, Route) and route.path in OPEN_PATHS):
            raise RuntimeError(f"route {getattr(route, 'path', route)!r} of {app.title} is "
                               f"not behind services.auth.authenticate")
    return app


def auth_from_env(log, **queues) -> AuthConfig:
    """`AuthConfig.from_env` for a service's `main()`, with the loud warning when it is off."""
    config = AuthConfig.from_env(**queues)
    if not config.enabled:
        log.emit("auth_disabled", {"level": "warning", "warning": (
            f"{AUTH_ENV}=off: every endpoint answers anyone who can reach it; "
            f"set {CLUSTER_TOKEN_ENV} (and {USER_TOKENS_ENV} on GMs) instead")})
    return config
