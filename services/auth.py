"""Who may call what on a megha service: the operator's cluster token, one token per role (GM,
LM, worker), one token per user queue, and a short list of open paths.

Why: every service answers on the network, and an LM or a worker agent does what any caller
asks (launch, preempt, stop a task). So every route needs a bearer token unless it is in
`OPEN_PATHS` (health checks and Prometheus scrapes, which carry no secrets and are called by
tools that hold none). What is promised:

- the cluster token (`MEGHA_CLUSTER_TOKEN`) is the operator's: every service accepts it on
  every route, for every queue;
- with role tokens (`MEGHA_GM_TOKEN`, `MEGHA_LM_TOKEN`, `MEGHA_WORKER_TOKEN`), each service
  sends its peers its own role's token, and a role's token opens only the routes
  `ROUTE_CALLERS` lists for that role: a stolen worker token cannot launch on an LM nor act
  as a GM (403 naming the role and the route). A service verifies a token it never sends
  from its digest as well (`NAME_SHA256`, api/auth.py), so a worker's environment need not
  hold the LM's token. Role tokens are in use on a service as soon as any role variable is
  set there; it then needs its own token and those of the roles that call its routes, and
  refuses to start without them, naming the variable;
- without any role variable, services send each other the cluster token, as before role
  tokens existed, so an existing deployment keeps working;
- a user token (`MEGHA_USER_TOKENS="q1=TOKEN,q2=TOKEN"`, GMs only) may call the GM's user
  routes (`USER_PATHS`) for its own queue: submit its jobs, read their state and the queues'
  shares (`GET /v1/queues` shows every queue: shares and usage are aggregates, no job ids);
- every route not in a service's `ROUTE_CALLERS` table (`/v1/state`, `/v1/debug/story/...`,
  `/openapi.json`) takes the cluster token only;
- no two of a service's tokens are alike, and no error or log line holds a token's text.

Secure by default: a service whose token is not set refuses to start, naming the variable;
`MEGHA_AUTH=off` turns checking off and is logged as a warning (`auth_disabled`) at start.
Every secret variable may be given as `NAME_FILE` instead (api/auth.py, `read_secret`).

The check is a FastAPI dependency given to the app itself (`secure_app`), so a route added
later is authenticated without anyone remembering to; `seal` refuses an app holding a route
the dependency does not cover, or a `ROUTE_CALLERS` entry naming a route the app lacks.
A presented token is hashed (SHA-256) and compared with every known digest by
`hmac.compare_digest`, so the time taken says nothing about which token came close.

The variables' names and the reading of secrets are api/auth.py's, shared with the clients
that send the tokens (`megha replay`).
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

from api.auth import (
    AUTH_ENV,
    CLUSTER_TOKEN_ENV,
    DIGEST_SUFFIX,
    ROLE_TOKEN_ENVS,
    USER_TOKENS_ENV,
    check_token,
    parse_digest,
    parse_user_tokens,
    read_secret,
    token_digest,
)
from common.errors import InvalidInput
from services.bodylimit import BodyLimit, max_body_bytes_from_env

# The only paths answered without a token, on every service.
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
ROLES = tuple(ROLE_TOKEN_ENVS)  # "gm", "lm", "worker"
USER = "user"  # a caller in ROUTE_CALLERS: any user queue's token (for its own queue)

# Per service role, who may call each route (route templates, any method) besides the
# operator; a route not listed takes the cluster token only. Read from the services' own
# calls: GMs -> LMs (services/gm.py), LMs -> workers (services/lm.py), workers -> their LM
# (services/worker.py), users -> GMs (loadgen/replay.py).
ROUTE_CALLERS: dict[str, dict[str, frozenset[str]]] = {
    "gm": {
        "/v1/jobs": frozenset({USER}),
        "/v1/jobs/{job_id}": frozenset({USER}),
        "/v1/queues": frozenset({USER}),
    },
    "lm": {
        "/v1/launch": frozenset({"gm"}),
        "/v1/repartition": frozenset({"gm"}),
        "/v1/preempt": frozenset({"gm"}),
        "/v1/cancel": frozenset({"gm"}),
        "/v1/reprioritize": frozenset({"gm"}),
        "/v1/worker/report": frozenset({"worker"}),
        "/v1/worker/reports": frozenset({"worker"}),
        "/v1/worker/heartbeat": frozenset({"worker"}),
    },
    "worker": {
        "/v1/tasks": frozenset({"lm"}),
        "/v1/tasks/batch": frozenset({"lm"}),
        "/v1/tasks/{attempt_id:path}": frozenset({"lm"}),
    },
}
# The GM's routes a user token may call.
USER_PATHS = frozenset(path for path, callers in ROUTE_CALLERS["gm"].items() if USER in callers)


def callers_of(role: str) -> frozenset[str]:
    """The roles whose tokens call some route of a service of `role`."""
    return frozenset().union(*ROUTE_CALLERS[role].values()) - {USER}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: the operator (cluster token; every queue), one queue, or a
    service of one role."""

    name: str  # "cluster", the queue's name or the role; the key of its submission bucket
    queue: str | None  # the user queue; None for the operator and for roles
    role: str | None = None  # the service role of a role token

    def may_use(self, queue: str) -> bool:
        """Whether it may submit or read `queue`'s jobs: a role acts on no queue."""
        return self.role is None and (self.queue is None or self.queue == queue)

    @property
    def is_operator(self) -> bool:
        return self.role is None and self.queue is None


OPERATOR = Principal("cluster", None)


def role_principal(role: str) -> Principal:
    return Principal(role, None, role)


@dataclass(frozen=True, slots=True)
class Credential:
    """A token a service accepts, kept as its SHA-256 digest, and who presenting it is."""

    digest: bytes = field(repr=False)
    principal: Principal
    source: str  # the variable it came from, for errors and the start-up log


def generate_token() -> str:
    return secrets.token_urlsafe(24)


def generate_env(queues: Collection[str]) -> dict[str, str]:
    """Fresh tokens for a federation's processes: the cluster token, one per role and one per
    queue. `env_for_role` says which of them (or their digests) each process needs."""
    env = {CLUSTER_TOKEN_ENV: generate_token(),
           USER_TOKENS_ENV: ",".join(f"{queue}={generate_token()}" for queue in queues)}
    env.update({variable: generate_token() for variable in ROLE_TOKEN_ENVS.values()})
    return env


def digest_hex(token: str) -> str:
    return token_digest(token).hex()


def digest_env(tokens: Mapping[str, str]) -> dict[str, str]:
    """`NAME_SHA256` for the cluster token and each role token in `tokens`: what a compose file
    or a Kubernetes secret hands the services that only check a token."""
    names = (CLUSTER_TOKEN_ENV, *ROLE_TOKEN_ENVS.values())
    return {name + DIGEST_SUFFIX: digest_hex(tokens[name]) for name in names if tokens.get(name)}


def env_for_role(tokens: Mapping[str, str], role: str) -> dict[str, str]:
    """The least of `tokens` (as `generate_env` makes them) a service of `role` needs: its own
    role token, every other token (the cluster's included) only as its digest, and on a GM
    the user tokens. Without role tokens in `tokens`: the cluster token itself."""
    roles = {r: tokens[v] for r, v in ROLE_TOKEN_ENVS.items() if tokens.get(v)}
    if not roles:
        env = {CLUSTER_TOKEN_ENV: tokens[CLUSTER_TOKEN_ENV]}
    else:
        env = {CLUSTER_TOKEN_ENV + DIGEST_SUFFIX: digest_hex(tokens[CLUSTER_TOKEN_ENV])}
        for other, token in roles.items():
            variable = ROLE_TOKEN_ENVS[other]
            if other == role:
                env[variable] = token
            else:
                env[variable + DIGEST_SUFFIX] = digest_hex(token)
    if role == "gm" and tokens.get(USER_TOKENS_ENV):
        env[USER_TOKENS_ENV] = tokens[USER_TOKENS_ENV]
    return env


def _read_credential(environ: Mapping[str, str], variable: str,
                     principal: Principal) -> tuple[str, Credential | None]:
    """The token `variable` holds ("" if given only as a digest) and the credential it or its
    digest (`variable`_SHA256) makes; ("", None) if neither is set."""
    token = read_secret(variable, environ)
    digest = read_secret(variable + DIGEST_SUFFIX, environ)
    if token.value and digest.value:
        raise InvalidInput(variable, f"is set and so is {digest.source}; set one of them: the "
                                     f"token where this service sends it, else its digest")
    if token.value:
        check_token(token.source, token.value)
        return token.value, Credential(token_digest(token.value), principal, token.source)
    if digest.value:
        return "", Credential(parse_digest(digest.source, digest.value), principal,
                              digest.source)
    return "", None


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """A service's tokens; `enabled=False` only with MEGHA_AUTH=off.

    `role` picks the service's table in ROUTE_CALLERS; `sends` is the token it sends its
    peers (its role's, or the cluster token without role tokens); `known` every token it
    accepts, as digests."""

    enabled: bool
    role: str | None = None
    sends: str = field(default="", repr=False)
    sends_env: str = ""
    known: tuple[Credential, ...] = ()

    @classmethod
    def for_tokens(cls, cluster: str, users: Mapping[str, str] | None = None,
                   roles: Mapping[str, str] | None = None, role: str | None = None) -> AuthConfig:
        """A configuration from tokens at hand (tests, tools): it sends `roles[role]` if
        given, else the cluster token."""
        known = [Credential(token_digest(cluster), OPERATOR, CLUSTER_TOKEN_ENV)]
        known += [Credential(token_digest(token), role_principal(r), ROLE_TOKEN_ENVS[r])
                  for r, token in (roles or {}).items()]
        known += [Credential(token_digest(token), Principal(queue, queue),
                             f"{USER_TOKENS_ENV} (queue {queue!r})")
                  for queue, token in (users or {}).items()]
        own = (roles or {}).get(role or "")
        return cls(True, role, own or cluster,
                   ROLE_TOKEN_ENVS[role] if own and role else CLUSTER_TOKEN_ENV, tuple(known))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, role: str,
                 queues: Collection[str] | None = None,
                 own_queues: Collection[str] = ()) -> AuthConfig:
        """Read the tokens of a service of `role`; InvalidInput naming the variable if one is
        missing or bad.

        `queues`: the federation's user queues, for a GM (None: a service without user
        routes, which reads no user tokens). Every queue in `own_queues` (the GM's) needs a
        token, and a token for a queue the federation does not have is a typo, refused.
        """
        if role not in ROUTE_CALLERS:
            raise ValueError(f"unknown service role {role!r} (known: {', '.join(ROLES)})")
        environ = os.environ if environ is None else environ
        switch = environ.get(AUTH_ENV, "on").strip().lower()
        if switch not in ("on", "off"):
            raise InvalidInput(AUTH_ENV, f'must be "on" or "off", got {switch!r}')
        if switch == "off":
            return cls(enabled=False, role=role)
        cluster, operator = _read_credential(environ, CLUSTER_TOKEN_ENV, OPERATOR)
        role_tokens: dict[str, str] = {}
        by_role: dict[str, Credential] = {}
        for each, variable in ROLE_TOKEN_ENVS.items():
            token, credential = _read_credential(environ, variable, role_principal(each))
            role_tokens[each] = token
            if credential is not None:
                by_role[each] = credential
        if by_role:
            sends, sends_env = cls._role_sends(role, role_tokens, by_role)
        else:
            sends, sends_env = cls._cluster_sends(cluster, operator)
        if operator is None:
            raise InvalidInput(CLUSTER_TOKEN_ENV, f"is not set: every service accepts the "
                                                  f"operator's cluster token; give it, or its "
                                                  f"digest as {CLUSTER_TOKEN_ENV}{DIGEST_SUFFIX}"
                                                  f" (or set {AUTH_ENV}=off)")
        known = [operator, *by_role.values()]
        if queues is not None:
            known += cls._user_credentials(environ, queues, own_queues)
        _check_distinct(known)
        return cls(True, role, sends, sends_env, tuple(known))

    @staticmethod
    def _cluster_sends(cluster: str, operator: Credential | None) -> tuple[str, str]:
        """Without role tokens, services send each other the cluster token itself."""
        roles = ", ".join(ROLE_TOKEN_ENVS.values())
        if operator is not None and not cluster:
            raise InvalidInput(CLUSTER_TOKEN_ENV, f"is given only as a digest "
                                                  f"({operator.source}), but without role "
                                                  f"tokens ({roles}) services send each other "
                                                  f"the cluster token itself")
        if not cluster:
            raise InvalidInput(CLUSTER_TOKEN_ENV, f"is not set: every service needs the "
                                                  f"cluster token, which services send each "
                                                  f"other when no role tokens ({roles}) are "
                                                  f"set (or set {AUTH_ENV}=off to run without "
                                                  f"authentication)")
        return cluster, CLUSTER_TOKEN_ENV

    @staticmethod
    def _role_sends(role: str, role_tokens: Mapping[str, str],
                    by_role: Mapping[str, Credential]) -> tuple[str, str]:
        """With role tokens, a service sends its own and must know its callers'."""
        own = ROLE_TOKEN_ENVS[role]
        if not role_tokens[role]:
            given = ", ".join(credential.source for credential in by_role.values())
            reason = (f"is given only as a digest ({by_role[role].source})" if role in by_role
                      else f"is not set, but role tokens are in use here ({given} set)")
            raise InvalidInput(own, f"{reason}: a {role} sends its own role's token to its "
                                    f"peers, so it needs the token itself")
        for caller in sorted(callers_of(role)):
            if caller not in by_role:
                variable = ROLE_TOKEN_ENVS[caller]
                paths = sorted(path for path, callers in ROUTE_CALLERS[role].items()
                               if caller in callers)
                raise InvalidInput(variable, f"is not set: {role} routes {', '.join(paths)} "
                                             f"take it; give it, or its digest as "
                                             f"{variable}{DIGEST_SUFFIX}")
        return role_tokens[role], by_role[role].source

    @staticmethod
    def _user_credentials(environ: Mapping[str, str], queues: Collection[str],
                          own_queues: Collection[str]) -> list[Credential]:
        text = read_secret(USER_TOKENS_ENV, environ)
        if not text.value:
            raise InvalidInput(USER_TOKENS_ENV, f"is not set: a GM needs one token per user "
                                                f"queue, e.g. q1=TOKEN1,q2=TOKEN2 (or set "
                                                f"{AUTH_ENV}=off)")
        users = parse_user_tokens(text.value, text.source, queues)
        missing = sorted(set(own_queues) - set(users))
        if missing:
            raise InvalidInput(text.source, f"has no token for queue(s) {', '.join(missing)}")
        return [Credential(token_digest(token), Principal(queue, queue),
                           f"{text.source} (queue {queue!r})") for queue, token in users.items()]

    @property
    def user_queues(self) -> frozenset[str]:
        return frozenset(c.principal.queue for c in self.known if c.principal.queue is not None)

    def outgoing_headers(self) -> dict[str, str]:
        """What this service sends with every request to another service."""
        return {"Authorization": f"Bearer {self.sends}"} if self.enabled else {}

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
        given = token_digest(token)
        # every comparison is made, so the time taken does not say which token came close
        found = None
        for credential in self.known:
            if hmac.compare_digest(given, credential.digest) and found is None:
                found = credential.principal
        if found is None:
            raise unauthorized("unknown token")
        return found


def _check_distinct(known: list[Credential]) -> None:
    """No token may stand for two principals: which one it proves would depend on order."""
    seen: dict[bytes, Credential] = {}
    for credential in known:
        first = seen.setdefault(credential.digest, credential)
        if first is not credential:
            raise InvalidInput(credential.source, f"holds the same token as {first.source}; "
                                                  f"each token must be its own")


def unauthorized(reason: str) -> HTTPException:
    return HTTPException(401, detail=reason, headers={"WWW-Authenticate": "Bearer"})


def forbidden(reason: str) -> HTTPException:
    return HTTPException(403, detail=reason)


def _takes(callers: frozenset[str]) -> str:
    """Which tokens a route takes, in words, for a 403."""
    parts = [f"the {role} token ({ROLE_TOKEN_ENVS[role]})" for role in ROLES if role in callers]
    if USER in callers:
        parts.append("a user queue's token")
    return " or ".join([*parts, "the cluster token"])


async def authenticate(request: Request) -> Principal:
    """The dependency of every route: open paths pass, the rest need a token, and a user's or
    a role's token only the routes its table lists. Handlers take the caller with
    `Depends(authenticate)`."""
    route = request.scope.get("route")
    path = route.path if route is not None else request.url.path
    if path in OPEN_PATHS:
        return OPERATOR
    security: _AppSecurity = request.app.state.security
    principal = security.config.identify(request.headers.get("authorization"))
    if principal.is_operator:
        return principal
    callers = security.callers.get(path, frozenset())
    if principal.role is not None:
        if principal.role not in callers:
            raise forbidden(f"the {principal.role} token ({ROLE_TOKEN_ENVS[principal.role]}) "
                            f"may not call {request.method} {path}; it needs {_takes(callers)}")
    elif USER not in callers:
        raise forbidden(f"the token of queue {principal.queue!r} may not call "
                        f"{request.method} {path}; it needs {_takes(callers)}")
    return principal


# A handler's parameter for the caller: `principal: Caller` (FastAPI runs the check once).
Caller = Annotated[Principal, Depends(authenticate)]


@dataclass(frozen=True, slots=True)
class _AppSecurity:
    config: AuthConfig
    callers: Mapping[str, frozenset[str]]  # route -> who besides the operator may call it


def secure_app(title: str, lifespan: Callable, config: AuthConfig, *,
               user_paths: Collection[str] = (), max_body_bytes: int | None = None) -> FastAPI:
    """A FastAPI app whose every route needs a token (but OPEN_PATHS), with its OpenAPI
    document at `GET /openapi.json` behind the same check (FastAPI's own docs routes would
    be open), no Swagger pages, and request bodies capped (services/bodylimit.py; default
    from MEGHA_MAX_BODY_BYTES). Who may call each route: the config's role's table in
    ROUTE_CALLERS, and user tokens `user_paths` too."""
    app = FastAPI(title=title, lifespan=lifespan, dependencies=[Depends(authenticate)],
                  openapi_url=None, docs_url=None, redoc_url=None)
    callers = dict(ROUTE_CALLERS.get(config.role or "", {}))
    for path in user_paths:
        callers[path] = callers.get(path, frozenset()) | {USER}
    app.state.security = _AppSecurity(config, callers)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes or max_body_bytes_from_env())

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi() -> dict:
        return app.openapi()

    return app


def seal(app: FastAPI) -> FastAPI:
    """Refuse an app with a route the dependency does not cover (added with `add_route` or
    a mount): it would answer without a token; or whose ROUTE_CALLERS table names a route it
    does not have (a typo there would leave the real route to the operator alone)."""
    for route in app.routes:
        covered = isinstance(route, APIRoute) and any(
            dependency.call is authenticate for dependency in route.dependant.dependencies)
        if not covered and not (isinstance(route, Route) and route.path in OPEN_PATHS):
            raise RuntimeError(f"route {getattr(route, 'path', route)!r} of {app.title} is "
                               f"not behind services.auth.authenticate")
    security = getattr(app.state, "security", None)
    if security is not None:
        have = {getattr(route, "path", None) for route in app.routes}
        stray = sorted(set(security.callers) - have)
        if stray:
            raise RuntimeError(f"services.auth.ROUTE_CALLERS[{security.config.role!r}] names "
                               f"{', '.join(stray)}, which {app.title} does not have")
    return app


def auth_from_env(log, *, role: str, queues: Collection[str] | None = None,
                  own_queues: Collection[str] = ()) -> AuthConfig:
    """`AuthConfig.from_env` for a service's `main()`, with the loud warning when it is off."""
    config = AuthConfig.from_env(role=role, queues=queues, own_queues=own_queues)
    if not config.enabled:
        log.emit("auth_disabled", {"level": "warning", "warning": (
            f"{AUTH_ENV}=off: every endpoint answers anyone who can reach it; "
            f"set {CLUSTER_TOKEN_ENV} and the role tokens (and {USER_TOKENS_ENV} on GMs) "
            f"instead")})
    return config
