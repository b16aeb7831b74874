"""The audit log: every state-changing call recorded with who, what, whose, from where
and how it ended; the hash chain catches an edited, deleted or reordered record."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text

from suanli.api.audit import OPERATOR_READS, UNAUDITED, WRITES
from suanli.control import audit
from suanli.db.clock import utcnow
from suanli.db.models import AuditRecord
from tests.control.control_helpers import Server, wait_until


@pytest.fixture
def srv(server: Server) -> Server:
    return server


@pytest.fixture
def server(quiet_server: Server) -> Server:
    return quiet_server


def member(srv: Server, name: str = "bob", tenant: str = "acme") -> dict:
    srv.post("/v1/tenants", {"name": tenant}, expect=201)
    return srv.post("/v1/users", {"name": name, "tenant": tenant, "role": "member"}, expect=201).json()


def records(srv: Server) -> list[AuditRecord]:
    with srv.ctx.db.sessions() as s:
        return list(s.scalars(select(AuditRecord).order_by(AuditRecord.id)))


def test_each_call_is_recorded_with_actor_tenant_action_object_source_and_result(srv: Server) -> None:
    bob = member(srv)
    bob_h = {"Authorization": f"Bearer {bob['token']}"}
    assert srv.http.post("/v1/billing/topups", json={"tenant": "acme", "amount": "50"}, headers=srv.headers).status_code == 201
    inst = srv.http.post(
        "/v1/instances", json={"name": "nb", "gpu_model": "H100", "gpu_count": 1, "cpus": 1, "memory_gib": 1}, headers=bob_h
    )
    assert inst.status_code == 201, inst.text
    iid = inst.json()["id"]
    assert srv.http.post(f"/v1/instances/{iid}/stop", headers=bob_h).status_code == 200
    assert srv.http.get(f"/v1/instances/{iid}/logs", headers=bob_h).status_code == 200  # a renter's own read: not audited
    assert srv.http.get(f"/v1/instances/{iid}/logs", headers=srv.headers).status_code == 200  # an operator's: audited
    r = srv.http.post("/v1/billing/topups", json={"tenant": "acme", "amount": "50"}, headers=bob_h)
    assert r.status_code == 403  # refused, and recorded as such
    assert (
        srv.http.post("/v1/keys", json={"public_key": "nonsense"}, headers={"Authorization": "Bearer sl_forged"}).status_code
        == 401
    )

    acme = bob["tenant_id"]
    got = [(r.actor, r.actor_role, r.tenant_id, r.action, r.object, r.result) for r in records(srv)]
    assert got == [
        ("admin", "admin", acme, "tenants.create", f"tenant/{acme}", "201"),
        ("admin", "admin", acme, "users.create", f"user/{bob['id']}", "201"),
        ("admin", "admin", acme, "topups.create", "topups", "201"),
        ("bob", "member", acme, "instances.create", f"instance/{iid}", "201"),
        ("bob", "member", acme, "instances.stop", f"instance/{iid}", "200"),
        ("admin", "admin", acme, "instances.logs", f"instance/{iid}", "200"),
        ("bob", "member", acme, "topups.create", "topups", "403"),
        ("-", "", None, "keys.create", "keys", "401"),
    ]
    assert all(r.source == "testclient" and r.at is not None for r in records(srv))
    assert audit.verify(srv.ctx.db).ok


def _write_routes(srv: Server) -> list[tuple[str, str]]:
    spec = srv.http.get("/openapi.json").json()
    return [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops if m.upper() in WRITES]


def test_no_write_route_escapes_the_audit(srv: Server) -> None:
    """Every write route in the API's schema, called (with a body it refuses or not),
    leaves a record, apart from the few named as changing nothing."""
    exempt, missing = [], []
    for method, template in _write_routes(srv):
        path = template.replace("{", "").replace("}", "")  # /v1/instances/instance_id/stop: a bad id, refused
        path = "/".join("999999" if seg.endswith("_id") else seg for seg in path.split("/"))
        if UNAUDITED.match(path):
            exempt.append(path)
            continue
        before = len(records(srv))
        srv.http.request(method, path, json={}, headers=srv.headers)
        after = records(srv)
        if len(after) != before + 1 or after[-1].detail.get("path") != path:
            missing.append(f"{method} {path}")
    assert not missing, f"write routes without an audit record: {missing}"
    assert exempt and all(p.startswith(("/v1/advise/", "/v1/billing/quote", "/v1/nodes/")) for p in exempt), exempt
    assert OPERATOR_READS.match("/v1/jobs/3/logs")


def _tamper(srv: Server, sql: str) -> None:
    with srv.ctx.db.engine.begin() as c:
        c.execute(text(sql))


@pytest.mark.parametrize(
    "sql, bad",
    [
        ("UPDATE audit_log SET actor = 'eve' WHERE id = 3", 3),
        ("UPDATE audit_log SET result = '200' WHERE id = 5", 5),
        ("DELETE FROM audit_log WHERE id = 4", 5),
        ("DELETE FROM audit_log WHERE id = 6", 6),  # the newest: the head still names it
        ("DELETE FROM audit_log WHERE id = 1", 2),  # the oldest: no prune vouches for the new start
    ],
)
def test_verify_names_the_first_changed_or_missing_record(srv: Server, sql: str, bad: int) -> None:
    for i in range(6):
        audit.write(srv.ctx.db, audit.Entry(actor="admin", action="test.write", object=f"thing/{i}", result="201"))
    assert audit.verify(srv.ctx.db) == audit.Verdict(True, 6)
    _tamper(srv, sql)
    v = audit.verify(srv.ctx.db)
    assert not v.ok and v.bad_id == bad, v
    r = srv.http.get("/v1/audit/verify", headers=srv.headers).json()
    assert r["ok"] is False and r["bad_id"] == bad


def test_a_rewritten_record_with_a_recomputed_hash_still_breaks_the_chain(srv: Server) -> None:
    for i in range(3):
        audit.write(srv.ctx.db, audit.Entry(actor="admin", action="test.write", object=f"thing/{i}"))
    with srv.ctx.db.transaction() as s:
        r = s.get(AuditRecord, 2)
        assert r is not None
        r.actor = "eve"
        r.hash = audit.record_hash(r.prev_hash, r)  # consistent in itself, but record 3 chains from the old hash
    v = audit.verify(srv.ctx.db)
    assert not v.ok and v.bad_id == 3


def test_concurrent_appends_never_fork_the_chain(srv: Server) -> None:
    def work(n: int) -> None:
        for i in range(15):
            audit.write(srv.ctx.db, audit.Entry(actor=f"t{n}", action="test.write", object=f"thing/{i}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    v = audit.verify(srv.ctx.db)
    assert v.ok and v.checked == 90
    with srv.ctx.db.sessions() as s:
        assert s.scalar(select(func.count(func.distinct(AuditRecord.prev_hash)))) == 90


@pytest.mark.parametrize("bad", [False, True], ids=["good", "one-bad"])
def test_the_writer_appends_what_waits_in_one_transaction_and_a_bad_entry_fails_only_its_caller(srv: Server, bad: bool) -> None:
    """``audit.Writer`` (the API's): entries that arrive while a batch is in flight are
    appended together by the next one (one tip lock, one instant); an entry that cannot
    be written (its detail is not JSON) fails its own caller, the others are written."""
    writer = audit.Writer(srv.ctx.db)
    before = len(records(srv))
    outcome: dict[str, Any] = {}

    def write(name: str, detail: dict) -> None:
        try:
            outcome[name] = writer.write(audit.Entry(actor=name, action="test.write", object="thing/1", detail=detail))
        except Exception as exc:  # noqa: BLE001 - the test reads it
            outcome[name] = exc

    with writer._writing:  # a batch in flight: what arrives meanwhile waits for the next one
        threads = [threading.Thread(target=write, args=(f"t{n}", {"n": n})) for n in range(5)]
        threads += [threading.Thread(target=write, args=("bad", {"not json": {1, 2}}))] if bad else []
        for th in threads:
            th.start()
        wait_until(lambda: len(writer._waiting) == len(threads), 10)
    for th in threads:
        th.join(10)
    if bad:
        assert isinstance(outcome.pop("bad"), TypeError), outcome
    written = records(srv)[before:]
    assert sorted(r.actor for r in written) == [f"t{n}" for n in range(5)]
    assert {o.id for o in outcome.values()} == {r.id for r in written}
    assert [r.id for r in written] == list(range(written[0].id, written[0].id + 5))
    if not bad:
        assert len({r.at for r in written}) == 1, [r.at for r in written]  # one batch
    v = audit.verify(srv.ctx.db)
    assert v.ok, v


def test_the_writer_from_many_threads_keeps_one_chain_in_batches(srv: Server) -> None:
    writer = audit.Writer(srv.ctx.db)
    ids: list[int] = []

    def work(n: int) -> None:
        for i in range(10):
            ids.append(writer.write(audit.Entry(actor=f"t{n}", action="test.write", object=f"thing/{i}")).id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(ids)) == 80
    v = audit.verify(srv.ctx.db)
    assert v.ok and v.checked == len(records(srv)), v


def test_retention_deletes_the_oldest_and_the_chain_still_verifies(srv: Server) -> None:
    old = utcnow() - timedelta(days=400)
    with srv.ctx.db.transaction() as s:
        for i in range(5):
            audit.append(s, audit.Entry(actor="admin", action="test.old", object=f"thing/{i}"), at=old)
    for i in range(3):
        audit.write(srv.ctx.db, audit.Entry(actor="admin", action="test.new", object=f"thing/{i}"))
    assert audit.prune(srv.ctx.db, keep_days=365) == 5
    assert audit.prune(srv.ctx.db, keep_days=365) == 0
    rows = records(srv)
    assert [r.action for r in rows] == ["test.new"] * 3 + [audit.PRUNED]
    assert audit.verify(srv.ctx.db).ok
    _tamper(srv, f"DELETE FROM audit_log WHERE id = {rows[0].id}")  # deleting past what was pruned is caught
    v = audit.verify(srv.ctx.db)
    assert not v.ok and v.bad_id == rows[1].id


def test_only_admins_read_it_and_export_is_json_lines(srv: Server) -> None:
    bob = member(srv)
    assert srv.http.get("/v1/audit", headers={"Authorization": f"Bearer {bob['token']}"}).status_code == 403
    rows = srv.get("/v1/audit")
    assert [r["action"] for r in rows] == ["tenants.create", "users.create"]
    assert [r["action"] for r in srv.get("/v1/audit?action=users.")] == ["users.create"]
    lines = srv.http.get("/v1/audit/export", headers=srv.headers).text.splitlines()
    assert [json.loads(x)["hash"] for x in lines] == [r["hash"] for r in srv.get("/v1/audit")]


def test_cli_verify_exits_non_zero_naming_the_record_through_the_api_and_offline(
    srv: Server, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    member(srv)
    assert "intact: 2 records" in cli("audit", "verify")
    url = srv.ctx.db.url
    assert json.loads(cli("audit", "verify", "--db", url, "--json"))["ok"] is True
    _tamper(srv, "UPDATE audit_log SET object = 'user/1' WHERE id = 2")
    out = cli("audit", "verify", code=1)
    assert "record 2" in out
    assert json.loads(cli("audit", "verify", "--db", url, "--json", code=1))["bad_id"] == 2
    assert "users.create" in cli("audit", "list")
