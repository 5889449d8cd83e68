"""Where `megha replay` finds the user queues' tokens it sends jobs with (api/auth.py).

In order: `--tokens FILE` (KEY=VALUE lines, as the `.env` that scripts/testbed.sh writes and
the `tokens.env` that services/local.py writes), the `MEGHA_USER_TOKENS` variable (the
testbed's loadgen container gets it from compose) or the file `MEGHA_USER_TOKENS_FILE` names
(a mounted secret), the repository's `.env`. With
`MEGHA_AUTH=off` and none of these, jobs go without a token. A replay never falls back on the
cluster token: it is a user of the federation, not its operator.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from api.auth import AUTH_ENV, USER_TOKENS_ENV, parse_user_tokens, read_secret
from common.errors import InvalidInput

ROOT = Path(__file__).resolve().parent.parent


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (comments, blank lines and `export ` prefixes allowed)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def user_tokens(tokens_file: Path | None, environ: Mapping[str, str] | None = None,
                root: Path = ROOT) -> dict[str, str] | None:
    """{queue: token}, or None when authentication is off and no tokens are given."""
    environ = os.environ if environ is None else environ
    if tokens_file is not None:
        try:
            text = read_env_file(tokens_file).get(USER_TOKENS_ENV, "")
        except OSError as error:
            raise InvalidInput("--tokens", f"cannot read {tokens_file}: {error}") from None
        if not text:
            raise InvalidInput("--tokens", f"{tokens_file} has no {USER_TOKENS_ENV}=... line")
        return parse_user_tokens(text, f"{tokens_file}: {USER_TOKENS_ENV}")
    given = read_secret(USER_TOKENS_ENV, environ)
    if given.value:
        return parse_user_tokens(given.value, given.source)
    dotenv = root / ".env"
    if dotenv.is_file():
        text = read_env_file(dotenv).get(USER_TOKENS_ENV, "")
        if text:
            return parse_user_tokens(text, f"{dotenv}: {USER_TOKENS_ENV}")
    if environ.get(AUTH_ENV, "").strip().lower() == "off":
        return None
    raise InvalidInput(USER_TOKENS_ENV, "is not set: the GMs need each job's user queue "
                                        "token; set it (q1=TOKEN,...), pass --tokens FILE, "
                                        "or run scripts/testbed.sh, which writes it to .env")
