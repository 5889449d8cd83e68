"""The bearer tokens as both sides of the API name and read them: the variables that hold
them, what a token may look like, and a list of user tokens (`q1=TOKEN1,q2=TOKEN2`).

The services check tokens (services/auth.py: who may call what); `megha replay` sends a user
queue's token with each of its jobs (loadgen/credentials.py). Both read `MEGHA_USER_TOKENS`
with `parse_user_tokens`, so a list one accepts the other accepts too.
"""

from __future__ import annotations

from common.errors import InvalidInput

CLUSTER_TOKEN_ENV = "MEGHA_CLUSTER_TOKEN"
USER_TOKENS_ENV = "MEGHA_USER_TOKENS"
AUTH_ENV = "MEGHA_AUTH"  # "off" disables checking (and is logged loudly)
MIN_TOKEN_LENGTH = 16
# RFC 6750's token68 without "=" (a user token is written `queue=TOKEN`)
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")


def check_token(where: str, token: str) -> str:
    """A token as given, or InvalidInput naming `where` (never echoing the token)."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidInput(where, f"is {len(token)} characters long; a token needs at least "
                                  f"{MIN_TOKEN_LENGTH} (e.g. python3 -c 'import secrets; "
                                  f"print(secrets.token_urlsafe(24))')")
    bad = sorted(set(token) - TOKEN_CHARS)
    if bad:
        raise InvalidInput(where, f"contains {''.join(bad)!r}; tokens use letters, digits "
                                  f"and -._~+/ only")
    return token


def parse_user_tokens(text: str, env: str = USER_TOKENS_ENV) -> dict[str, str]:
    """`q1=TOKEN1,q2=TOKEN2` as {queue: token}; each bad item is named by its position."""
    tokens: dict[str, str] = {}
    for index, item in enumerate(part.strip() for part in text.split(",")):
        if not item:
            continue
        queue, sep, token = (part.strip() for part in item.partition("="))
        where = f"{env}[{index}]"
        if not sep or not queue or not token:
            shown = item if not sep else f"{queue}=..."
            raise InvalidInput(where, f"expected QUEUE=TOKEN, got {shown!r}")
        if queue in tokens:
            raise InvalidInput(where, f"queue {queue!r} has a token already")
        tokens[queue] = check_token(f"{where} (queue {queue!r})", token)
    seen: dict[str, str] = {}
    for queue, token in tokens.items():
        if token in seen:
            raise InvalidInput(env, f"queues {seen[token]!r} and {queue!r} share a token; "
                                    f"a token must name one queue")
        seen[token] = queue
    return tokens
