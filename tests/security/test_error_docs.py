"""Every operation of the OpenAPI schema documents the error answers it can give, with the
error body's schema (``api.errors.DEFAULT_RESPONSES``): schemathesis reported 57
undocumented status codes when only 2xx and 422 were listed (issue 13, part 6)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from suanli.api.app import create_app

ERROR_REF = "#/components/schemas/ErrorOut"
#: every route's: authentication, roles, lookups, state, validation, refusals, rate limit
EVERYWHERE = {"400", "401", "403", "404", "409", "422", "429"}
#: routes that may answer more
EXTRA = {
    ("post", "/v1/uploads"): {"413", "415"},
    ("post", "/v1/instances"): {"402"},
    ("post", "/v1/instances/{instance_id}/start"): {"402"},
    ("post", "/v1/jobs"): {"402"},
    ("post", "/v1/pipelines"): {"402"},
}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    """The app's schema; building it reads nothing of the context."""
    return create_app(SimpleNamespace(db=None, loop=None, audit=False, tls=False)).openapi()  # type: ignore[arg-type]


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict]]:
    return [(method, path, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


def test_every_operation_documents_its_error_answers(spec: dict[str, Any]) -> None:
    missing = {}
    for method, path, op in operations(spec):
        codes = {c for c in op["responses"] if c[0] in "45"}
        want = EVERYWHERE | EXTRA.get((method, path), set())
        if codes != want:
            missing[f"{method.upper()} {path}"] = sorted(want ^ codes)
    assert not missing, missing
    assert len(operations(spec)) > 50


def test_error_answers_have_the_error_body_and_429_its_retry_after(spec: dict[str, Any]) -> None:
    for method, path, op in operations(spec):
        for code, resp in op["responses"].items():
            if code[0] in "45":
                schema = resp["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (method, path, code, schema)
        assert "Retry-After" in op["responses"]["429"]["headers"], (method, path)
    body = spec["components"]["schemas"]["ErrorOut"]
    assert body["required"] == ["error"]
    detail = spec["components"]["schemas"]["ErrorDetail"]
    assert {"code", "message"} <= set(detail["required"])


def test_id_parameters_are_bounded_to_the_database_integer(spec: dict[str, Any]) -> None:
    ids = [
        (method, path, p["schema"])
        for method, path, op in operations(spec)
        for p in op.get("parameters", [])
        if p["in"] == "path" and p["name"].endswith("_id") and p["name"] != "upload_id" and p["name"] != "key_id"
    ]
    assert len(ids) >= 10, ids
    for method, path, schema in ids:
        assert (schema.get("minimum"), schema.get("maximum")) == (1, 2**31 - 1), (method, path, schema)
