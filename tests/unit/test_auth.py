"""Tokens and limits without a process: parsing errors that name the bad item, who a header
proves, the submission bucket with an explicit clock, and where `megha replay` finds tokens."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, HTTPException
from starlette.responses import PlainTextResponse

from api.auth import parse_user_tokens
from common.errors import InvalidInput
from loadgen.credentials import user_tokens
from services import auth
from services.auth import OPERATOR, AuthConfig, Principal
from services.bodylimit import DEFAULT_MAX_BODY_BYTES, max_body_bytes_from_env
from services.ratelimit import SubmissionRates, TokenBucket, retry_after

T1, T2, CLUSTER = "a" * 20, "b" * 20, "c" * 20


# Token texts no error may hold: T3 stands where a queue's name goes in the reversed items
T3 = "SecretTokenText" + "z" * 9


def test_user_tokens_parse_and_each_bad_item_is_named_by_position() -> None:
    assert parse_user_tokens(f" q1={T1}, q2 = {T2} ,") == {"q1": T1, "q2": T2}
    cases = {
        T3: "MEGHA_USER_TOKENS[0]: expected QUEUE=TOKEN, found no '='",
        f"q1={T1},{T3}": "MEGHA_USER_TOKENS[1]: expected QUEUE=TOKEN, found no '='",
        f"q1={T1},q2=": "MEGHA_USER_TOKENS[1]: expected QUEUE=TOKEN, the token is empty",
        f"={T1}": "MEGHA_USER_TOKENS[0]: expected QUEUE=TOKEN, the queue is empty",
        f"q1={T1},q1={T2}": "MEGHA_USER_TOKENS[1]: names the same queue as item 0",
        f"{T3}={T1},{T3}={T2}": "MEGHA_USER_TOKENS[1]: names the same queue as item 0",
        "q1=short": "MEGHA_USER_TOKENS[0]: is 5 characters long",
        f"{T3}=q1": "MEGHA_USER_TOKENS[0]: is 2 characters long",
        f"q1={T1},q2={'x' * 18}!": "MEGHA_USER_TOKENS[1]: has 1 character(s) other than "
                                   "letters, digits and -._~+/ (at position(s) 18",
        f"q1={T1},q2={T3}'\"": "MEGHA_USER_TOKENS[1]: has 2 character(s)",
        f"q1={T1},q2={T1}": "MEGHA_USER_TOKENS[1]: has the same token as item 0",
        f"{T1}={T3},{T2}={T3}": "MEGHA_USER_TOKENS[1]: has the same token as item 0",
    }
    for text, expected in cases.items():
        with pytest.raises(InvalidInput) as refused:
            parse_user_tokens(text)
        message = str(refused.value)
        assert expected in message, (text, message)
        for secret in (T1, T2, T3, "short", "!", '"'):  # never echoed, not even in part
            assert secret not in message, (text, message)
    with pytest.raises(InvalidInput) as refused:
        parse_user_tokens(f"q1={T1},{T3}={T2}", queues=["q1", "q2"])
    assert str(refused.value) == ("MEGHA_USER_TOKENS[1]: names a queue the federation does "
                                  "not have (known: q1, q2)")


def test_a_service_without_its_token_refuses_to_start_unless_auth_is_off() -> None:
    with pytest.raises(InvalidInput, match="MEGHA_CLUSTER_TOKEN: is not set"):
        AuthConfig.from_env({}, role="lm")
    with pytest.raises(InvalidInput, match="MEGHA_USER_TOKENS: is not set"):
        AuthConfig.from_env({"MEGHA_CLUSTER_TOKEN": CLUSTER}, role="gm", queues=["q1"])
    with pytest.raises(InvalidInput, match="MEGHA_CLUSTER_TOKEN: is 3 characters"):
        AuthConfig.from_env({"MEGHA_CLUSTER_TOKEN": "abc"}, role="worker")
    with pytest.raises(InvalidInput, match='MEGHA_AUTH: must be "on" or "off"'):
        AuthConfig.from_env({"MEGHA_AUTH": "no"}, role="lm")
    off = AuthConfig.from_env({"MEGHA_AUTH": "off"}, role="gm", queues=["q1"])
    assert not off.enabled and off.identify(None) is OPERATOR and off.outgoing_headers() == {}


def test_a_gms_user_tokens_must_match_the_federations_queues() -> None:
    env = {"MEGHA_CLUSTER_TOKEN": CLUSTER, "MEGHA_USER_TOKENS": f"q1={T1},qq={T2}"}
    with pytest.raises(InvalidInput, match="MEGHA_USER_TOKENS\\[1\\]: names a queue the "
                                           "federation does not have \\(known: q1, q2\\)"):
        AuthConfig.from_env(env, role="gm", queues=["q1", "q2"])
    env["MEGHA_USER_TOKENS"] = f"q1={T1}"
    with pytest.raises(InvalidInput, match="no token for queue\\(s\\) q2"):
        AuthConfig.from_env(env, role="gm", queues=["q1", "q2"], own_queues=["q1", "q2"])
    env["MEGHA_USER_TOKENS"] = f"q1={CLUSTER}"
    with pytest.raises(InvalidInput) as refused:
        AuthConfig.from_env(env, role="gm", queues=["q1"])
    assert str(refused.value) == ("MEGHA_USER_TOKENS (queue 'q1'): holds the same token as "
                                  "MEGHA_CLUSTER_TOKEN; each token must be its own")
    env["MEGHA_USER_TOKENS"] = f"q1={T1}"
    config = AuthConfig.from_env(env, role="gm", queues=["q1", "q2"], own_queues=["q1"])
    assert config.user_queues == {"q1"} and config.identify(f"Bearer {T1}").queue == "q1"
    assert config.outgoing_headers() == {"Authorization": f"Bearer {CLUSTER}"}


def test_a_header_proves_the_operator_a_queue_or_nothing() -> None:
    config = AuthConfig.for_tokens(CLUSTER, {"q1": T1})
    assert config.identify(f"Bearer {CLUSTER}") is OPERATOR
    assert config.identify(f"bearer {T1}") == Principal("q1", "q1")
    assert Principal("q1", "q1").may_use("q1") and not Principal("q1", "q1").may_use("q2")
    for header, reason in ((None, "no Authorization header"),
                           (f"Basic {T1}", "malformed"), ("Bearer", "malformed"),
                           (f"Bearer {T2}", "unknown token")):
        with pytest.raises(HTTPException) as refused:
            config.identify(header)
        assert refused.value.status_code == 401 and reason in refused.value.detail
        assert refused.value.headers == {"WWW-Authenticate": "Bearer"}


def test_generated_tokens_pass_the_checks() -> None:
    env = auth.generate_env(["q1", "q2"])
    config = AuthConfig.from_env(env, role="gm", queues=["q1", "q2"], own_queues=["q1", "q2"])
    assert config.user_queues == {"q1", "q2"} and config.sends == env["MEGHA_GM_TOKEN"]
    assert len(set(env.values())) == len(env)


def test_seal_refuses_a_route_outside_the_dependency() -> None:
    app = auth.secure_app("t", None, AuthConfig.for_tokens(CLUSTER), max_body_bytes=4096)

    @app.get("/v1/fine")
    async def fine() -> dict:
        return {}

    assert auth.seal(app) is app
    app.add_route("/v1/sneaky", lambda request: PlainTextResponse("hi"))
    with pytest.raises(RuntimeError, match="'/v1/sneaky' of t is not behind"):
        auth.seal(app)
    assert auth.seal(FastAPI(openapi_url=None)) is not None  # no routes at all: nothing open


def test_the_bucket_gives_a_burst_then_the_rate_with_the_wait_until_the_next() -> None:
    bucket = TokenBucket(rate=2.0, burst=3)
    assert [bucket.take(10.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(10.0) == pytest.approx(0.5)  # one job every 0.5 s
    assert bucket.take(10.25) == pytest.approx(0.25)  # a refused try takes nothing
    assert bucket.take(10.5) == 0.0
    assert bucket.take(100.0) == 0.0 and bucket.tokens == pytest.approx(2.0)  # capped at burst
    assert bucket.take(99.0) == 0.0  # a clock going back gives nothing
    assert TokenBucket(rate=0.0, burst=1).take(0.0) == 0.0  # no bound
    rates = SubmissionRates(1.0, 1)
    assert rates.wait("q1", 0.0) == 0.0 and rates.wait("q2", 0.0) == 0.0  # one bucket each
    assert rates.wait("q1", 0.0) == pytest.approx(1.0)
    assert [retry_after(s) for s in (0.01, 1.0, 1.2)] == [1, 1, 2]


def test_the_body_cap_comes_from_the_environment() -> None:
    assert max_body_bytes_from_env({}) == DEFAULT_MAX_BODY_BYTES
    assert max_body_bytes_from_env({"MEGHA_MAX_BODY_BYTES": "4096"}) == 4096
    for bad, reason in (("lots", "expected a number of bytes"), ("10", "must be at least 1024")):
        with pytest.raises(InvalidInput, match=f"MEGHA_MAX_BODY_BYTES: {reason}"):
            max_body_bytes_from_env({"MEGHA_MAX_BODY_BYTES": bad})


def test_replay_finds_tokens_in_a_file_the_environment_or_the_repositorys_env(tmp_path) -> None:
    file = tmp_path / "tokens.env"
    file.write_text(f"# tokens\nexport MEGHA_USER_TOKENS='q1={T1}'\nOTHER=1\n")
    assert user_tokens(file, {}, tmp_path) == {"q1": T1}
    assert user_tokens(None, {"MEGHA_USER_TOKENS": f"q2={T2}"}, tmp_path) == {"q2": T2}
    with pytest.raises(InvalidInput, match="MEGHA_USER_TOKENS: is not set"):
        user_tokens(None, {}, tmp_path)
    assert user_tokens(None, {"MEGHA_AUTH": "off"}, tmp_path) is None
    (tmp_path / ".env").write_text(f"MEGHA_USER_TOKENS=q3={T1}\n")
    assert user_tokens(None, {}, tmp_path) == {"q3": T1}
    empty = tmp_path / "empty.env"
    empty.write_text("OTHER=1\n")
    with pytest.raises(InvalidInput, match="--tokens: .* has no MEGHA_USER_TOKENS"):
        user_tokens(empty, {}, tmp_path)
    with pytest.raises(InvalidInput, match="--tokens: cannot read"):
        user_tokens(tmp_path / "missing.env", {}, tmp_path)
