"""Request bodies read with `services.http.parse_body`: whatever the bytes, a refusal is a 422,
and the body's schema is in the OpenAPI document (`wire_body`)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from common.wire import CancelRequest
from services.http import parse_body, wire_body


def app() -> FastAPI:
    api = FastAPI()

    @api.post("/cancel", openapi_extra=wire_body(CancelRequest))
    async def cancel(request: Request) -> dict:
        return (await parse_body(request, CancelRequest)).model_dump()

    return api


def test_a_body_that_is_not_utf8_is_a_422_not_a_500():
    # found by benchmarks/fuzz_api.py: the error's echo of the input failed to encode
    with TestClient(app()) as client:
        for raw in (b"\xe5\xb6\xf7\xd4", b"\xd4", b'{"gm": "\xff"}'):
            response = client.post("/cancel", content=raw,
                                   headers={"content-type": "application/json"})
            assert response.status_code == 422, (raw, response.text)
            assert response.json()["detail"][0]["loc"][0] == "body"


def test_a_valid_body_is_parsed_and_an_invalid_one_echoed():
    with TestClient(app()) as client:
        assert client.post("/cancel", json={"gm": "gm-1", "attempt_id": "a"}).json() == {
            "gm": "gm-1", "attempt_id": "a"}
        refused = client.post("/cancel", json={"gm": ""})
        assert refused.status_code == 422
        assert {tuple(d["loc"]) for d in refused.json()["detail"]} == {
            ("body", "gm"), ("body", "attempt_id")}


def test_the_body_schema_is_documented_without_local_references():
    operation = app().openapi()["paths"]["/cancel"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["gm", "attempt_id"] and "$defs" not in schema
    assert "422" in operation["responses"]
