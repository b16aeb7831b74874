"""Input hardening (issue 13, part 6): every input the fuzzer (``scripts/fuzz``) answered
with a 500 is refused with a 4xx that says what is wrong, and changes nothing. Each case is
sent to the real app on SQLite and on PostgreSQL (where ids from 2**31 and NUL bytes were
the 500s SQLite did not show)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from suanli.api.proxy import target_of
from suanli.bounds import DB_INT_MAX, parse_id
from suanli.control.access import parse_port_host
from suanli.db.models import Base
from tests.control.control_helpers import Server

#: ids past PostgreSQL's INTEGER, SQLite's 64 bits, and both
BIG_IDS = (DB_INT_MAX + 1, 2**63, 2**64 + 7)

#: every route with an id in its path
ID_ROUTES = (
    ("GET", "/v1/instances/{}"),
    ("DELETE", "/v1/instances/{}"),
    ("POST", "/v1/instances/{}/stop"),
    ("POST", "/v1/instances/{}/start"),
    ("GET", "/v1/instances/{}/logs"),
    ("GET", "/v1/jobs/{}"),
    ("POST", "/v1/jobs/{}/cancel"),
    ("GET", "/v1/jobs/{}/logs"),
    ("DELETE", "/v1/billing/grants/{}"),
    ("POST", "/v1/billing/subscriptions/{}/cancel"),
)

#: tables whose rows a refused request touches by design: api_tokens (authentication notes
#: when a token was last used) and the audit log (a refused call is recorded, api.audit);
#: and the control loop's counters, which its process writes every second whatever the API does
VOLATILE = {"api_tokens", "audit_log", "audit_head", "loop_status"}


def snapshot(srv: Server) -> dict[str, list[tuple]]:
    """Every row of every table (the test database is small): a refused request changed
    nothing when two snapshots are equal."""
    with srv.ctx.db.sessions() as s:
        return {
            t.name: sorted((tuple(map(repr, row)) for row in s.execute(select(t))), key=repr)
            for t in Base.metadata.sorted_tables
            if t.name not in VOLATILE
        }


def send(srv: Server, method: str, path: str, body: Any = None, raw: str | None = None, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token or srv.token}"}
    if raw is not None:
        headers["Content-Type"] = "application/json"
        return srv.http.request(method, path, content=raw, headers=headers)
    return srv.http.request(method, path, json=body, headers=headers)


def refused(r: Any, status: int, needle: str) -> None:
    assert r.status_code == status, (r.request.method, str(r.request.url), r.status_code, r.text)
    err = r.json()["error"]
    assert needle in err["message"], (needle, err)


def test_ids_beyond_the_database_integer_are_422_on_every_id_route(server: Server) -> None:
    before = snapshot(server)
    for method, path in ID_ROUTES:
        for big in BIG_IDS:
            refused(send(server, method, path.format(big)), 422, "less than or equal to 2147483647")
        refused(send(server, method, path.format(0)), 422, "greater than or equal to 1")
    refused(send(server, "POST", f"/v1/instances/{2**63}/exec", {"command": "true"}), 422, "2147483647")
    refused(send(server, "GET", f"/v1/events?object_id={2**31}"), 422, "object_id")
    refused(send(server, "GET", f"/v1/instances/1/logs?tail_bytes={2**64}"), 422, "tail_bytes")
    # a key by id or fingerprint: a number out of range names no key
    refused(send(server, "DELETE", f"/v1/keys/{2**64}"), 404, "no key")
    refused(send(server, "DELETE", "/v1/keys/%C2%B2"), 404, "no key")  # "²": isdigit, but no int
    assert snapshot(server) == before


#: (method, path, raw JSON body, the field the message names); 1e309 parses as infinity
INFINITE = (
    ("POST", "/v1/instances", '{"cpus": 1e309}', "cpus"),
    ("POST", "/v1/instances", '{"memory_gib": 1e309}', "memory_gib"),
    ("POST", "/v1/instances", '{"cpus": 5000}', "cpus"),
    ("POST", "/v1/jobs", '{"run": "true", "resources": {"cpus": 1e309}}', "resources.cpus"),
    ("POST", "/v1/jobs", '{"run": "true", "resources": {"memory": 1e400}}', "resources.memory"),
    ("POST", "/v1/jobs", '{"run": "true", "envs": {"X": 1e309}}', "envs"),
    ("POST", "/v1/jobs", '{"run": "true", "resources": {"accelerators": "H100:99999999999"}}', "resources.accelerators"),
    (
        "POST",
        "/v1/nodes",
        '{"nodes": [{"name": "n1", "gpu_model": "H100", "gpu_count": 1, "cpu_cores": 1e309, "memory_gib": 8}]}',
        "nodes.0.cpu_cores",
    ),
    (
        "POST",
        "/v1/nodes",
        '{"nodes": [{"name": "n1", "gpu_model": "H100", "gpu_count": 1, "cpu_cores": 8, "memory_gib": 1e309}]}',
        "nodes.0.memory_gib",
    ),
    (
        "POST",
        "/v1/nodes",
        '{"nodes": [{"name": "n1", "gpu_model": "H100", "gpu_count": 1, "cpu_cores": 8, "memory_gib": 8, "gpu_memory_gib": 1e309}]}',
        "nodes.0.gpu_memory_gib",
    ),
    ("POST", "/v1/billing/grants", '{"tenant": "default", "max_gpus": 1e309}', "max_gpus"),
    ("POST", "/v1/billing/grants", '{"tenant": "default", "max_gpus": 1, "gpu_minutes": 2147483648}', "gpu_minutes"),
    (
        "POST",
        "/v1/billing/quote",
        '{"task": {"run": "x", "resources": {"accelerators": "H100:1"}}, "max_hours": 1e309}',
        "max_hours",
    ),
    ("POST", "/v1/instances/1/exec", '{"command": "true", "timeout_s": 1e309}', "timeout_s"),
    ("PUT", "/v1/billing/prices", '{"plan": "on-demand", "price": "1", "effective_ms": 99999999999999999999}', "effective_ms"),
    ("POST", "/v1/advise/tco", '{"gpu_price": 1e309}', "gpu_price"),
)


def test_infinite_and_huge_numbers_are_422(server: Server) -> None:
    before = snapshot(server)
    for method, path, raw, field in INFINITE:
        r = send(server, method, path, raw=raw)
        refused(r, 422, f"{field}:")
        assert field in r.json()["error"]["fields"], r.text
    assert snapshot(server) == before


def test_amounts_beyond_the_ledger_are_refused(server: Server) -> None:
    before = snapshot(server)
    refused(send(server, "POST", "/v1/billing/topups", {"tenant": "default", "amount": "1e30"}), 422, "at most 1000000000")
    refused(send(server, "PUT", "/v1/billing/budget", {"limit": "9" * 29}), 422, "at most")
    refused(send(server, "POST", "/v1/billing/transfers", {"tenant": "default", "gib": "1e25"}), 422, "at most")
    assert snapshot(server) == before


#: a NUL byte in a name, an image, a node name, an environment value (accepted, then the
#: launch failed), a key's label, a tenant: 500 on PostgreSQL before
NUL = "a\x00b"
NULS = (
    ("POST", "/v1/instances", {"name": NUL}, "name"),
    ("POST", "/v1/instances", {"image": NUL}, "image"),
    ("POST", "/v1/jobs", {"run": "true", "name": NUL}, "name"),
    ("POST", "/v1/jobs", {"run": "true", "image": NUL}, "image"),
    ("POST", "/v1/jobs", {"run": NUL}, "run"),
    ("POST", "/v1/jobs", {"run": "true", "envs": {"X": NUL}}, "envs: X"),
    ("POST", "/v1/images", {"name": "n", "ref": NUL}, "ref"),
    ("POST", "/v1/images", {"name": "n", "ref": "r", "description": NUL}, "description"),
    ("POST", "/v1/keys", {"public_key": NUL}, "public_key"),
    ("POST", "/v1/billing/topups", {"tenant": NUL, "amount": "1"}, "tenant"),
    ("POST", "/v1/users", {"name": "u", "tenant": NUL}, "tenant"),
    ("PUT", "/v1/billing/prices", {"plan": "on-demand", "price": "1", "note": NUL}, "note"),
    (
        "POST",
        "/v1/nodes",
        {"nodes": [{"name": "n1", "gpu_model": NUL, "gpu_count": 1, "cpu_cores": 8, "memory_gib": 8}]},
        "nodes.0.gpu_model",
    ),
    (
        "POST",
        "/v1/nodes",
        {"nodes": [{"name": "n1", "gpu_model": "H100", "gpu_count": 1, "cpu_cores": 8, "memory_gib": 8, "labels": {"k": NUL}}]},
        "nodes.0.labels.k",
    ),
)


def test_nul_bytes_are_422_in_bodies_paths_and_queries(server: Server) -> None:
    before = snapshot(server)
    for method, path, body, field in NULS:
        r = send(server, method, path, body)
        refused(r, 422, f"{field}: must not contain a NUL character")
    for method, path in (
        ("POST", "/v1/nodes/a%00b/heartbeat"),
        ("DELETE", "/v1/images/a%00b"),
        ("DELETE", "/v1/keys/a%00b"),
        ("GET", "/v1/billing/bill?tenant=a%00b"),
        ("GET", "/v1/jobs?state=a%00b"),
    ):
        refused(send(server, method, path), 422, "must not contain a NUL character")
    refused(send(server, "PATCH", "/v1/nodes/a%00b", {"state": "ready"}), 422, "NUL")
    assert snapshot(server) == before


def test_tenants_by_name_or_id_without_isdigit_pitfalls(server: Server) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails: it was a 500 on grants."""
    before = snapshot(server)
    for tenant in ("²", "١٢", str(2**64), str(DB_INT_MAX + 1)):
        refused(send(server, "POST", "/v1/billing/grants", {"tenant": tenant, "max_gpus": 1}), 404, "no tenant")
        refused(send(server, "GET", f"/v1/billing/bill?tenant={tenant}"), 404, "no tenant")
    assert snapshot(server) == before
    own = server.get("/v1/me")["tenant_id"]
    assert server.get("/v1/billing/terms", params={"tenant": str(own)})["tenant_id"] == own
    assert server.get("/v1/billing/terms", params={"tenant": "default"})["tenant_id"] == own


#: every route that names a tenant, as a member may call it
TENANT_ROUTES = (
    ("GET", "/v1/billing/bill?tenant={}", None),
    ("GET", "/v1/billing/terms?tenant={}", None),
    ("GET", "/v1/billing/usage?tenant={}", None),
    ("GET", "/v1/billing/invoice?month=2026-01&tenant={}", None),
    ("GET", "/v1/billing/grants?tenant={}", None),
    ("GET", "/v1/billing/budget/changes?tenant={}", None),
    ("GET", "/v1/billing/subscriptions?tenant={}", None),
    ("PUT", "/v1/billing/terms", {"low_balance": "5"}),
    ("PUT", "/v1/billing/budget", {"limit": "5"}),
    ("POST", "/v1/billing/subscriptions", {"plan": "monthly", "gpu_model": "H100", "gpu_count": 1}),
)


def test_unknown_and_forbidden_tenants_get_the_same_answer(server: Server) -> None:
    """A member naming another tenant, by name or id, is answered as for a tenant that does
    not exist: the answer tells no tenant's name."""
    server.post("/v1/tenants", {"name": "lab"}, expect=201)
    other = server.post("/v1/tenants", {"name": "other"}, expect=201).json()["id"]
    member = server.post("/v1/users", {"name": "m", "tenant": "lab"}, expect=201).json()["token"]
    before = snapshot(server)
    for method, path, body in TENANT_ROUTES:
        answers = {}
        for name in ("other", str(other), "no-such-tenant", str(other + 1000), "²"):
            if body is None:
                r = send(server, method, path.format(name), token=member)
            else:
                r = send(server, method, path, {**body, "tenant": name}, token=member)
            answers[name] = (r.status_code, r.text)
        assert len(set(answers.values())) == 1, (method, path, json.dumps(answers, indent=1))
        status, text = answers["other"]
        assert status == 404 and "no tenant" in json.loads(text)["error"]["message"], (path, text)
    assert snapshot(server) == before
    # the member's own tenant, by name, still answers
    r = send(server, "GET", "/v1/billing/terms?tenant=lab", token=member)
    assert r.status_code == 200, r.text


def test_the_port_proxy_parses_ids_within_range() -> None:
    """The proxy's path form and port hosts took 12 digits: an id from 2**31 reached
    PostgreSQL's INTEGER (500)."""
    assert target_of(None, f"/proxy/instances/{DB_INT_MAX + 1}/8080/", "localhost") is None
    assert target_of(None, "/proxy/instances/١٢/8080/", "localhost") is None  # Arabic-Indic digits
    assert target_of(None, f"/proxy/instances/{DB_INT_MAX}/8080/x", "localhost") is not None
    assert parse_port_host(f"{DB_INT_MAX + 1}-8080.localhost", "localhost") is None
    assert parse_port_host("12-8080.localhost:8471", "localhost") == (12, 8080)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12", 12),
        (" 7 ", 7),
        ("0", None),
        ("²", None),
        ("١٢", None),
        (str(DB_INT_MAX), DB_INT_MAX),
        (str(2**31), None),
        ("a1", None),
    ],
)
def test_parse_id_reads_ascii_digits_in_range(text: str, expected: int | None) -> None:
    assert parse_id(text) == expected
