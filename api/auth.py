"""The secrets as both sides of the API name and read them: the variables that hold them, how
a secret is read from the environment or from a file, what a token may look like, its digest,
and a list of user tokens (`q1=TOKEN1,q2=TOKEN2`).

The services check tokens (services/auth.py: who may call what); `megha replay` sends a user
queue's token with each of its jobs (loadgen/credentials.py). Both read `MEGHA_USER_TOKENS`
with `parse_user_tokens`, so a list one accepts the other accepts too.

What is promised here:

- every secret variable (`SECRET_ENVS`) may be given instead as `NAME_FILE`, the path of a file
  holding the value (as Kubernetes mounts secrets); `read_secret` is the one reader, and it
  refuses both set at once, or a file it cannot read, naming the variables and the path;
- no error about a secret ever holds any of its text: a token is described by its position
  in a list, its length or where its bad characters are, never by its characters;
- a digest variable (`NAME_SHA256`) holds the SHA-256 of a token's UTF-8 bytes as 64 hex digits
  (`printf %s "$TOKEN" | sha256sum`): it lets a service check a token it never sends without
  holding it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Mapping
from typing import NamedTuple

from common.errors import InvalidInput

CLUSTER_TOKEN_ENV = "MEGHA_CLUSTER_TOKEN"  # the operator's: accepted everywhere
USER_TOKENS_ENV = "MEGHA_USER_TOKENS"
AUTH_ENV = "MEGHA_AUTH"  # "off" disables checking (and is logged loudly)
AMQP_URL_ENV = "MEGHA_AMQP_URL"  # a secret too: it holds the broker's password
# The token each role sends its peers (services/auth.py, ROUTE_CALLERS, says who takes which)
ROLE_TOKEN_ENVS = {"gm": "MEGHA_GM_TOKEN", "lm": "MEGHA_LM_TOKEN",
                   "worker": "MEGHA_WORKER_TOKEN"}
DIGEST_SUFFIX = "_SHA256"
FILE_SUFFIX = "_FILE"
# Every variable whose value is a secret; each may be given as NAME_FILE instead
SECRET_ENVS = (CLUSTER_TOKEN_ENV, CLUSTER_TOKEN_ENV + DIGEST_SUFFIX, USER_TOKENS_ENV,
               *ROLE_TOKEN_ENVS.values(),
               *(name + DIGEST_SUFFIX for name in ROLE_TOKEN_ENVS.values()), AMQP_URL_ENV)

MIN_TOKEN_LENGTH = 16
# RFC 6750's token68 without "=" (a user token is written `queue=TOKEN`)
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")
HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class Secret(NamedTuple):
    """A secret's value ("" when unset) and the variable it came from (NAME or NAME_FILE),
    which is what an error about the value names."""

    value: str
    source: str


def read_secret(name: str, environ: Mapping[str, str] | None = None) -> Secret:
    """`name`'s value, from the variable itself or from the file `NAME_FILE` names.

    Surrounding whitespace is dropped (a file's trailing newline, a pasted space). Both set is
    an error (which one was meant cannot be known), so is a file that cannot be read or is
    empty: InvalidInput naming the variables and the path, never the value.
    """
    environ = os.environ if environ is None else environ
    file_env = name + FILE_SUFFIX
    value = environ.get(name, "").strip()
    path = environ.get(file_env, "").strip()
    if value and path:
        raise InvalidInput(name, f"is set and so is {file_env}; set one of them")
    if not path:
        return Secret(value, name)
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise InvalidInput(file_env, f"cannot read {path}: {reason}") from None
    if not text:
        raise InvalidInput(file_env, f"{path} is empty; it should hold the value of {name}")
    return Secret(text, file_env)


def check_token(where: str, token: str) -> str:
    """A token as given, or InvalidInput naming `where` (never echoing the token)."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidInput(where, f"is {len(token)} characters long; a token needs at least "
                                  f"{MIN_TOKEN_LENGTH} (e.g. python3 -c 'import secrets; "
                                  f"print(secrets.token_urlsafe(24))')")
    bad = [index for index, char in enumerate(token) if char not in TOKEN_CHARS]
    if bad:
        # positions, not the characters: they are part of the secret
        shown = ", ".join(str(index) for index in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise InvalidInput(where, f"has {len(bad)} character(s) other than letters, digits and "
                                  f"-._~+/ (at position(s) {shown}, counting from 0)")
    return token


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token's UTF-8 bytes: what a `NAME_SHA256` variable holds, in hex."""
    return hashlib.sha256(token.encode()).digest()


def parse_digest(where: str, text: str) -> bytes:
    """A `NAME_SHA256` value (64 hex digits) as bytes; InvalidInput naming `where` (not the
    text: a token pasted here by mistake must not end up in a log)."""
    text = text.strip()
    if len(text) != 64 or not set(text) <= HEX_DIGITS:
        raise InvalidInput(where, f"is not a SHA-256 digest: expected 64 hexadecimal digits "
                                  f"(printf %s \"$TOKEN\" | sha256sum), got {len(text)} "
                                  f"characters")
    return bytes.fromhex(text)


def parse_user_tokens(text: str, env: str = USER_TOKENS_ENV,
                      queues: Collection[str] | None = None) -> dict[str, str]:
    """`q1=TOKEN1,q2=TOKEN2` as {queue: token}; each bad item is named by its position.

    No error holds any text of the list: an item written the wrong way round (`TOKEN=q1`)
    would put a token where a queue's name goes. With `queues` (the federation's), an item
    naming another queue is refused, by position too.
    """
    tokens: dict[str, str] = {}
    first_item: dict[str, int] = {}  # queue -> the position of its item
    for index, item in enumerate(part.strip() for part in text.split(",")):
        if not item:
            continue
        queue, sep, token = (part.strip() for part in item.partition("="))
        where = f"{env}[{index}]"
        if not sep:
            raise InvalidInput(where, "expected QUEUE=TOKEN, found no '='")
        if not queue or not token:
            empty = "queue" if not queue else "token"
            raise InvalidInput(where, f"expected QUEUE=TOKEN, the {empty} is empty")
        if queues is not None and queue not in queues:
            raise InvalidInput(where, f"names a queue the federation does not have (known: "
                                      f"{', '.join(sorted(queues))})")
        if queue in tokens:
            raise InvalidInput(where, f"names the same queue as item {first_item[queue]}")
        tokens[queue] = check_token(where, token)
        first_item[queue] = index
    seen: dict[str, str] = {}
    for queue, token in tokens.items():
        if token in seen:
            raise InvalidInput(f"{env}[{first_item[queue]}]",
                               f"has the same token as item {first_item[seen[token]]}; a token "
                               f"must name one queue")
        seen[token] = queue
    return tokens
