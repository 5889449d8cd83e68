"""Role tokens without a process: the table of who may call which route (checked against the
services' own routes and the message table), who a token proves, what a service of each role
needs in its environment, digests, secrets read from files, and that no error holds a token."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from role_apps import role_apps, small_federation

from api.auth import SECRET_ENVS, read_secret
from common.errors import InvalidInput
from common.message_table import MESSAGES
from loadgen.credentials import user_tokens
from services import auth
from services.auth import (
    OPEN_PATHS,
    OPERATOR,
    ROLES,
    ROUTE_CALLERS,
    USER,
    USER_PATHS,
    AuthConfig,
    Principal,
    digest_hex,
    env_for_role,
    generate_env,
)
from services.http import required_env

# Every route outside a service's ROUTE_CALLERS table is the operator's alone
OPERATOR_ONLY = frozenset({"/v1/state", "/v1/debug/story/{key:path}", "/openapi.json"})
CLUSTER = "c" * 20
TOKENS = {"gm": "g" * 20, "lm": "l" * 20, "worker": "w" * 20}
USER_TOKEN = "u" * 20


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One app of each role with role tokens, built and not started."""
    queue = small_federation().queues[0].name
    return role_apps(tmp_path_factory.mktemp("gm-state"), lambda role: AuthConfig.for_tokens(
        CLUSTER, {queue: USER_TOKEN}, TOKENS, role))


def test_each_message_route_takes_its_senders_token() -> None:
    """The table against common/message_table.py: whoever sends a message over HTTP may call
    the route that carries it, and nobody else but the operator."""
    for message in MESSAGES:
        if not message.routes or message.answers:
            continue
        for route in message.routes:
            path = route.split(" ", 1)[1]
            assert ROUTE_CALLERS[message.receiver][path] == {message.sender}, (message, path)
    assert ROUTE_CALLERS["lm"]["/v1/worker/heartbeat"] == {"worker"}  # no core message
    assert ROUTE_CALLERS["worker"]["/v1/tasks/{attempt_id:path}"] == {"lm"}  # a stop, alone
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/queues"} == USER_PATHS
    assert all(USER not in callers for role in ("lm", "worker")
               for callers in ROUTE_CALLERS[role].values())


def test_every_route_of_every_service_is_in_its_table_or_the_operators(apps) -> None:
    for role, app in apps.items():
        paths = {route.path for route in app.routes if isinstance(route, APIRoute)}
        declared = set(ROUTE_CALLERS[role])
        assert declared <= paths, (role, declared - paths)  # seal checks this at start too
        assert paths - OPEN_PATHS - declared <= OPERATOR_ONLY, (role, paths - declared)


def test_seal_refuses_a_table_naming_a_route_the_app_lacks() -> None:
    app = auth.secure_app("t", None, AuthConfig.for_tokens(CLUSTER, roles=TOKENS, role="lm"),
                          max_body_bytes=4096)

    @app.post("/v1/launch")
    async def launch() -> dict:
        return {}

    with pytest.raises(RuntimeError, match="ROUTE_CALLERS\\['lm'\\] names /v1/cancel, "):
        auth.seal(app)


def test_each_token_opens_only_the_routes_its_role_calls(apps) -> None:
    """Over every app, every declared or operator-only route, every token: a 403 names the
    role and the route; an allowed call gets past the check (any other status)."""
    for role, app in apps.items():
        client = TestClient(app, raise_server_exceptions=False)
        routes = [(method, route.path) for route in app.routes if isinstance(route, APIRoute)
                  for method in route.methods if route.path not in OPEN_PATHS]
        for method, path in routes:
            url = path.replace("{job_id}", "nope").replace("{attempt_id:path}", "nope") \
                      .replace("{key:path}", "nope")
            allowed = ROUTE_CALLERS[role].get(path, frozenset())
            for caller, token in TOKENS.items():
                answer = client.request(method, url, headers=bearer(token))
                if caller in allowed:
                    assert answer.status_code not in (401, 403), (role, method, path, caller)
                    continue
                assert answer.status_code == 403, (role, method, path, caller, answer.text)
                detail = answer.json()["detail"]
                assert detail.startswith(f"the {caller} token (MEGHA_{caller.upper()}_TOKEN) "
                                         f"may not call {method} {path}; it needs "), detail
                assert token not in detail
            operator = client.request(method, url, headers=bearer(CLUSTER))
            assert operator.status_code not in (401, 403), (role, method, path)
    worker_on_launch = TestClient(apps["lm"]).post("/v1/launch", headers=bearer(TOKENS["worker"]))
    assert worker_on_launch.json()["detail"] == (
        "the worker token (MEGHA_WORKER_TOKEN) may not call POST /v1/launch; it needs the gm "
        "token (MEGHA_GM_TOKEN) or the cluster token")


def test_identify_tells_the_operator_a_queue_and_each_role_apart() -> None:
    config = AuthConfig.for_tokens(CLUSTER, {"q1": USER_TOKEN}, TOKENS, "lm")
    assert config.identify(f"Bearer {CLUSTER}") is OPERATOR
    assert config.identify(f"Bearer {USER_TOKEN}") == Principal("q1", "q1")
    for role, token in TOKENS.items():
        principal = config.identify(f"Bearer {token}")
        assert principal == Principal(role, None, role) and not principal.is_operator
        assert not principal.may_use("q1")  # a role acts on no queue's jobs
    assert config.outgoing_headers() == bearer(TOKENS["lm"])
    legacy = AuthConfig.for_tokens(CLUSTER, role="lm")
    assert legacy.outgoing_headers() == bearer(CLUSTER)
    assert legacy.identify(f"Bearer {CLUSTER}") is OPERATOR


def test_generated_env_gives_each_role_the_least_it_needs_and_they_agree() -> None:
    tokens = generate_env(["q1", "q2"])
    configs = {}
    for role in ROLES:
        env = env_for_role(tokens, role)
        assert "MEGHA_CLUSTER_TOKEN" not in env and "MEGHA_CLUSTER_TOKEN_SHA256" in env
        others = [r for r in ROLES if r != role]
        assert all(f"MEGHA_{r.upper()}_TOKEN" not in env for r in others)
        assert ("MEGHA_USER_TOKENS" in env) == (role == "gm")
        queues = ["q1", "q2"] if role == "gm" else None
        configs[role] = AuthConfig.from_env(env, role=role, queues=queues)
        assert configs[role].sends == tokens[f"MEGHA_{role.upper()}_TOKEN"]
        assert configs[role].sends_env == f"MEGHA_{role.upper()}_TOKEN"
        assert not any(token in repr(configs[role]) for token in tokens.values())
    # each service's token proves its role to the services it calls
    for role, config in configs.items():
        for callee in ROLES:
            assert configs[callee].identify(config.outgoing_headers()["Authorization"]).role \
                == role
    digests = auth.digest_env(tokens)
    assert set(digests) == {"MEGHA_CLUSTER_TOKEN_SHA256", "MEGHA_GM_TOKEN_SHA256",
                            "MEGHA_LM_TOKEN_SHA256", "MEGHA_WORKER_TOKEN_SHA256"}
    gm_env = env_for_role(tokens, "gm")
    for name in ("MEGHA_CLUSTER_TOKEN_SHA256", "MEGHA_LM_TOKEN_SHA256"):
        assert gm_env[name] == digests[name]
    # without role tokens: the cluster token itself, as before
    legacy = {key: tokens[key] for key in ("MEGHA_CLUSTER_TOKEN", "MEGHA_USER_TOKENS")}
    assert env_for_role(legacy, "worker") == {"MEGHA_CLUSTER_TOKEN": tokens[
        "MEGHA_CLUSTER_TOKEN"]}


def test_role_tokens_need_the_own_token_and_the_callers_and_errors_hold_no_token() -> None:
    c, g, l_, w = CLUSTER, TOKENS["gm"], TOKENS["lm"], TOKENS["worker"]
    cases = [
        ("lm", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_LM_TOKEN": l_, "MEGHA_WORKER_TOKEN": w},
         "MEGHA_GM_TOKEN: is not set: lm routes /v1/cancel, /v1/launch, /v1/preempt, "
         "/v1/repartition, /v1/reprioritize take it; give it, or its digest as "
         "MEGHA_GM_TOKEN_SHA256"),
        ("worker", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_LM_TOKEN_SHA256": digest_hex(l_)},
         "MEGHA_WORKER_TOKEN: is not set, but role tokens are in use here "
         "(MEGHA_LM_TOKEN_SHA256 set): a worker sends its own role's token"),
        ("gm", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_GM_TOKEN_SHA256": digest_hex(g)},
         "MEGHA_GM_TOKEN: is given only as a digest (MEGHA_GM_TOKEN_SHA256)"),
        ("gm", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_GM_TOKEN": g,
                "MEGHA_GM_TOKEN_SHA256": digest_hex(g)},
         "MEGHA_GM_TOKEN: is set and so is MEGHA_GM_TOKEN_SHA256; set one of them"),
        ("worker", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_WORKER_TOKEN": w,
                    "MEGHA_LM_TOKEN_SHA256": l_},
         "MEGHA_LM_TOKEN_SHA256: is not a SHA-256 digest: expected 64 hexadecimal digits"),
        ("worker", {"MEGHA_WORKER_TOKEN": w, "MEGHA_LM_TOKEN": l_},
         "MEGHA_CLUSTER_TOKEN: is not set: every service accepts the operator's cluster token; "
         "give it, or its digest as MEGHA_CLUSTER_TOKEN_SHA256"),
        ("worker", {"MEGHA_CLUSTER_TOKEN_SHA256": digest_hex(c)},
         "MEGHA_CLUSTER_TOKEN: is given only as a digest (MEGHA_CLUSTER_TOKEN_SHA256), but "
         "without role tokens"),
        ("worker", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_WORKER_TOKEN": w, "MEGHA_LM_TOKEN": w},
         "MEGHA_WORKER_TOKEN: holds the same token as MEGHA_LM_TOKEN; each token must be its "
         "own"),
        ("lm", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_LM_TOKEN": l_, "MEGHA_GM_TOKEN": c,
                "MEGHA_WORKER_TOKEN": w},
         "MEGHA_GM_TOKEN: holds the same token as MEGHA_CLUSTER_TOKEN"),
        ("lm", {"MEGHA_CLUSTER_TOKEN": c, "MEGHA_LM_TOKEN": l_[:10] + "!#" + l_[12:],
                "MEGHA_GM_TOKEN": g, "MEGHA_WORKER_TOKEN": w},
         "MEGHA_LM_TOKEN: has 2 character(s) other than letters, digits and -._~+/ (at "
         "position(s) 10, 11"),
    ]
    for role, env, expected in cases:
        with pytest.raises(InvalidInput) as refused:
            AuthConfig.from_env(env, role=role)
        message = str(refused.value)
        assert expected in message, (env, message)
        assert not any(token in message for token in (c, g, l_, w, l_[12:])), message


def test_a_worker_checks_the_lms_token_by_its_digest_alone() -> None:
    env = {"MEGHA_CLUSTER_TOKEN_SHA256": digest_hex(CLUSTER).upper(),
           "MEGHA_WORKER_TOKEN": TOKENS["worker"],
           "MEGHA_LM_TOKEN_SHA256": digest_hex(TOKENS["lm"])}
    config = AuthConfig.from_env(env, role="worker")
    assert config.identify(f"Bearer {TOKENS['lm']}").role == "lm"
    assert config.identify(f"Bearer {CLUSTER}") is OPERATOR
    with pytest.raises(Exception, match="unknown token"):
        config.identify(f"Bearer {digest_hex(TOKENS['lm'])}")  # the digest opens nothing


def test_every_secret_may_come_from_a_file(tmp_path, monkeypatch) -> None:
    def secret_file(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    assert set(SECRET_ENVS) >= {"MEGHA_CLUSTER_TOKEN", "MEGHA_USER_TOKENS", "MEGHA_GM_TOKEN",
                                "MEGHA_LM_TOKEN", "MEGHA_WORKER_TOKEN", "MEGHA_AMQP_URL",
                                "MEGHA_CLUSTER_TOKEN_SHA256", "MEGHA_LM_TOKEN_SHA256"}
    env = {"MEGHA_CLUSTER_TOKEN_FILE": secret_file("cluster", CLUSTER + "\n"),
           "MEGHA_GM_TOKEN_FILE": secret_file("gm", TOKENS["gm"] + "\r\n"),
           "MEGHA_LM_TOKEN_SHA256_FILE": secret_file("lm", digest_hex(TOKENS["lm"]) + "\n"),
           "MEGHA_USER_TOKENS_FILE": secret_file("users", f"q1={USER_TOKEN}\n")}
    config = AuthConfig.from_env(env, role="gm", queues=["q1"], own_queues=["q1"])
    assert config.sends == TOKENS["gm"] and config.sends_env == "MEGHA_GM_TOKEN_FILE"
    assert config.identify(f"Bearer {CLUSTER}") is OPERATOR
    assert config.identify(f"Bearer {TOKENS['lm']}").role == "lm"
    assert config.identify(f"Bearer {USER_TOKEN}").queue == "q1"
    assert read_secret("MEGHA_GM_TOKEN", env) == (TOKENS["gm"], "MEGHA_GM_TOKEN_FILE")
    assert read_secret("MEGHA_LM_TOKEN", env) == ("", "MEGHA_LM_TOKEN")

    both = {"MEGHA_GM_TOKEN": TOKENS["gm"], **env}
    missing = {"MEGHA_WORKER_TOKEN_FILE": str(tmp_path / "nope")}
    empty = {"MEGHA_AMQP_URL_FILE": secret_file("empty", "\n")}
    short = {**env, "MEGHA_GM_TOKEN_FILE": secret_file("short", "abc\n")}
    for environ, name, expected in (
            (both, "MEGHA_GM_TOKEN", "MEGHA_GM_TOKEN: is set and so is MEGHA_GM_TOKEN_FILE; "
                                     "set one of them"),
            (missing, "MEGHA_WORKER_TOKEN", f"MEGHA_WORKER_TOKEN_FILE: cannot read "
                                            f"{tmp_path / 'nope'}: No such file or directory"),
            (empty, "MEGHA_AMQP_URL", f"MEGHA_AMQP_URL_FILE: {tmp_path / 'empty'} is empty")):
        with pytest.raises(InvalidInput) as refused:
            read_secret(name, environ)
        assert str(refused.value).startswith(expected), str(refused.value)
        assert TOKENS["gm"] not in str(refused.value)
    with pytest.raises(InvalidInput, match="MEGHA_GM_TOKEN_FILE: is 3 characters long"):
        AuthConfig.from_env(short, role="gm", queues=["q1"])
    with pytest.raises(InvalidInput, match="MEGHA_USER_TOKENS_FILE\\[0\\]: names a queue"):
        AuthConfig.from_env(env, role="gm", queues=["q2"])

    # the other readers: megha replay's user tokens, a service's broker URL
    assert user_tokens(None, {"MEGHA_USER_TOKENS_FILE": env["MEGHA_USER_TOKENS_FILE"]},
                       tmp_path) == {"q1": USER_TOKEN}
    monkeypatch.delenv("MEGHA_AMQP_URL", raising=False)
    monkeypatch.setenv("MEGHA_AMQP_URL_FILE", secret_file("amqp", "amqp://u:pw@host/\n"))
    assert required_env("MEGHA_AMQP_URL") == "amqp://u:pw@host/"
    monkeypatch.delenv("MEGHA_AMQP_URL_FILE")
    with pytest.raises(InvalidInput, match="MEGHA_AMQP_URL: is not set \\(nor "
                                           "MEGHA_AMQP_URL_FILE\\)"):
        required_env("MEGHA_AMQP_URL")
