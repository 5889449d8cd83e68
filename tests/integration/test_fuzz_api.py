"""Every endpoint of real GM, LM and worker processes, fuzzed from their OpenAPI documents with
schemathesis (benchmarks/fuzz_api.py, at a small size): no 5xx, every answer as documented,
every accepted job still known afterwards. And the checker itself counts what it must."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import requests
import schemathesis
from test_federation import CONFIG, free_port_block

from services.local import LocalFederation

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuzz_api  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_no_endpoint_fails_or_strays_from_its_schema(tmp_path, amqp_url):
    # a second queue on gm-1, so that an id can be reused across queues of one GM
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text().replace(
        '[[queues]]\nname = "u1"\nshare = 0.5\ngm = "gm-1"',
        '[[queues]]\nname = "u1"\nshare = 0.25\ngm = "gm-1"\n\n'
        '[[queues]]\nname = "u3"\nshare = 0.25\ngm = "gm-1"'))
    assert 'name = "u3"' in config.read_text()
    with LocalFederation(config, tmp_path / "logs", base_port=free_port_block(6),
                         amqp_url=amqp_url) as fed:
        result = fuzz_api.fuzz_federation(fed, total=400, seed=7, job_wait=15)
    tally = result.tally
    report = "\n".join(tally.failures)
    assert tally.requests >= 400
    assert tally.server_errors == 0, report
    assert tally.schema_violations == 0, report
    assert tally.transport_errors == 0, report
    assert result.unhealthy == []
    assert result.lost_jobs == [], result.job_states
    # accepted ids were sent again, and each answer was the one due (202 or 409)
    assert tally.id_reuses >= 3, tally.job_sent
    assert tally.id_reuse_violations == 0, report
    # the fuzzing got past the token check and the body's validation, both ways
    assert {200, 401, 422} <= set(tally.statuses), tally.statuses


SCHEMA = {
    "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
    "paths": {"/v1/things": {"get": {"responses": {"200": {
        "description": "ok", "content": {"application/json": {"schema": {
            "type": "object", "required": ["id"],
            "properties": {"id": {"type": "integer"}}}}}}}}}},
}


def answer(status: int, body: object) -> schemathesis.Response:
    """A made-up answer, as schemathesis holds one."""
    request = requests.Request("GET", "http://service/v1/things").prepare()
    return schemathesis.Response(status, {"Content-Type": ["application/json"]},
                                 json.dumps(body).encode(), request, elapsed=0.01, verify=True)


@pytest.mark.parametrize("status, body, counted", [
    (200, {"id": 1}, None),
    (500, {"detail": "boom"}, "server_errors"),
    (200, {"id": "not an integer"}, "schema_violations"),
    (404, {"detail": "undocumented"}, "schema_violations"),
])
def test_the_checker_counts_what_it_must(status, body, counted):
    case = schemathesis.openapi.from_dict(SCHEMA)["/v1/things"]["GET"].Case()
    tally = fuzz_api.FuzzTally()
    tally.record(case, answer(status, body))
    assert tally.requests == 1
    found = {"server_errors": tally.server_errors,
             "schema_violations": tally.schema_violations}
    assert found == {name: int(name == counted) for name in found}, tally.failures
    # our count of 5xx agrees with schemathesis' own check
    assert fuzz_api.server_error_check(case, answer(status, body)) == (status < 500)
