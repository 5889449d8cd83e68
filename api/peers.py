"""HTTP from one service to another (GM -> LM, LM -> worker agent, worker agent -> LM), and
from the load generator to the GMs.

Why aiohttp here and httpx elsewhere: these calls are the services' hot path, made hundreds of
times a second on the testbed's two cores, and the client's own cost per request decides how
many a service can make. Measured on this project's 2-core VM, a keep-alive POST to a local
uvicorn app costs the client 1.13 ms of CPU with httpx's AsyncClient and 0.18 ms with aiohttp's
ClientSession (the server 0.2-0.35 ms either way). The load generator's replay uses it too: it
shares the cores with the testbed it measures, and with httpx it took half a core at 300
tasks/s. httpx stays where requests are few: the tests, the command line.

`PeerClient` keeps one connection pool per service; a `request` either returns the peer's
answer (any status) or raises `PeerError`, which says whether the peer was slow (a timeout:
it may still act on the request) or could not be reached at all (refused, reset).
`request_with_retry` is the loop every caller shares. A service gives its client its own
token's `Authorization` header (its role's, or the cluster token: services/auth.py) once, as the
session's default header, so no call can go out without it; the load generator adds a user
queue's per request.

TLS: with `MEGHA_TLS_CA` set (the PEM file of the CA that signed every service's certificate),
every client made here verifies its peers against that CA, whoever builds it: a service (which
then serves HTTPS itself, services/http.py) or `megha replay`. Unset, an https:// peer is
verified against the system's CAs, and http:// stays plain.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from common.errors import InvalidInput

JSON_HEADERS = {"content-type": "application/json"}
KEEPALIVE_S = 3.0  # below uvicorn's timeout_keep_alive (5 s)
# A service's own certificate and key (PEM paths; services/http.py serves with them) and the CA
# every service's certificate is signed by (clients verify peers against it)
TLS_CERT_ENV = "MEGHA_TLS_CERT"
TLS_KEY_ENV = "MEGHA_TLS_KEY"
TLS_CA_ENV = "MEGHA_TLS_CA"


def client_ssl_context(environ: Mapping[str, str] | None = None) -> ssl.SSLContext | None:
    """A context verifying peers (certificate and host name) against the CA `MEGHA_TLS_CA`
    names; None when it is unset. InvalidInput naming the variable and path if the file is
    not a readable PEM certificate."""
    environ = os.environ if environ is None else environ
    path = environ.get(TLS_CA_ENV, "").strip()
    if not path:
        return None
    try:
        return ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise InvalidInput(TLS_CA_ENV, f"cannot load {path} as a PEM CA certificate: "
                                       f"{reason}") from None


@dataclass(frozen=True, slots=True)
class PeerResponse:
    status_code: int
    content: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # case-insensitive names

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return json.loads(self.content)


class PeerError(Exception):
    """No answer: `timed_out` if the peer stayed silent (it may still have acted)."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class PeerUnreachable(RuntimeError):
    """A request got no answer (connection refused, timeout, 5xx) within its retries."""


class PeerClient:
    """One service's HTTP client to its peers; `start()` inside the event loop first."""

    def __init__(self, timeout: float = 5.0, connect_timeout: float = 2.0,
                 max_connections: int = 100, headers: Mapping[str, str] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        """`ssl_context`: how https:// peers are verified (default: `client_ssl_context()`,
        read here so that a bad MEGHA_TLS_CA stops a service before it starts)."""
        # A short connect timeout: a peer that is down refuses or stays silent, and either
        # way the caller's retry loop decides what to do next.
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout,
                                                                         connect_timeout))
        self._max_connections = max_connections
        self._headers = dict(headers or {})  # sent with every request
        self._ssl = ssl_context if ssl_context is not None else client_ssl_context()
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            # idle connections are dropped before uvicorn's own 5 s keep-alive closes them:
            # reusing one the server has just closed fails the request as "disconnected"
            connector = aiohttp.TCPConnector(limit=self._max_connections, use_dns_cache=True,
                                             keepalive_timeout=KEEPALIVE_S,
                                             ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                  headers=self._headers,
                                                  skip_auto_headers=("User-Agent",))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, url: str, body: str | bytes | None = None, *,
                      timeout: float | None = None,
                      headers: Mapping[str, str] | None = None) -> PeerResponse:
        """One request; `headers` are added to the client's own for this request only."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        data = body.encode() if isinstance(body, str) else body
        options = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(total=timeout)}
        sent_headers = JSON_HEADERS if data is not None else None
        if headers:
            sent_headers = {**(sent_headers or {}), **headers}
        try:
            async with self._session.request(method, url, data=data, headers=sent_headers,
                                             **options) as response:
                return PeerResponse(response.status, await response.read(), response.headers)
        except TimeoutError as error:
            raise PeerError(f"{method} {url}: no answer in time ({error!r})",
                            timed_out=True) from None
        except aiohttp.ClientError as error:
            raise PeerError(f"{method} {url}: {error!r}"[:300], timed_out=False) from None

    async def post(self, url: str, body: str | bytes, *,
                   timeout: float | None = None) -> PeerResponse:
        return await self.request("POST", url, body, timeout=timeout)


async def request_with_retry(
    client: PeerClient,
    method: str,
    url: str,
    *,
    body: str | bytes | None = None,
    attempts: int | None = 5,
    give_up_after: float | None = None,
    backoff: float = 0.05,
    max_backoff: float = 2.0,
    on_failure: Callable[[str], None] | None = None,
) -> PeerResponse:
    """Send until the peer answers with anything but a 5xx, and return that answer.

    A 4xx is an answer too (the peer refused the request itself: repeating it cannot help), so
    the caller looks at the status. Connection errors, timeouts and 5xx are retried with
    exponential backoff, at most `attempts` times and for at most `give_up_after` seconds
    (None: no bound of that kind); then `PeerUnreachable`. `on_failure` hears every failed try.
    """
    loop = asyncio.get_running_loop()
    deadline = None if give_up_after is None else loop.time() + give_up_after
    tries = 0
    delay = backoff
    while True:
        tries += 1
        try:
            response = await client.request(method, url, body)
            if response.status_code < 500:
                return response
            failure = f"HTTP {response.status_code}: {response.text[:200]}"
        except PeerError as error:
            failure = str(error)[:300]
        if on_failure is not None:
            on_failure(failure)
        out_of_tries = attempts is not None and tries >= attempts
        out_of_time = deadline is not None and loop.time() + delay > deadline
        if out_of_tries or out_of_time:
            raise PeerUnreachable(f"{method} {url}: {failure} (after {tries} tries)")
        await asyncio.sleep(delay)
        delay = min(max_backoff, delay * 2)
