"""Alerts on a real server (host-process runtime): made from what happened (a job failed,
a node went down, an instance idle, a billing notice), recorded per tenant, and POSTed to
the tenant's webhook: a real HTTP server on loopback checks the signature; a 500 is retried
with backoff until it is delivered."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from suanli.billing.tables import Notice as BillingNotice
from suanli.control import alerts
from suanli.db.models import Alert, AlertCursor, TenantWebhook
from tests.control.control_helpers import Server, start_server, wait_state
from tests.sqlite_helpers import migrated_sqlite_url

SECRET = "s3cret-of-sixteen-or-more"


class Receiver:
    """A real webhook endpoint on loopback: answers ``statuses`` in turn (then 200) and
    keeps each request's body and headers, and whether its signature verified."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.got: list[tuple[dict, dict[str, str], bool]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                want = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                ok = hmac.compare_digest(want, self.headers.get("X-Suanli-Signature", ""))
                receiver.got.append((json.loads(body), dict(self.headers), ok))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status if ok else 401)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hook"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "data").mkdir()
    s = start_server(tmp_path / "data", migrated_sqlite_url(tmp_path / "data" / "suanli.db"), runtime="process")
    try:
        yield s
    finally:
        s.close()


def test_webhook_set_validated_and_sealed(srv: Server) -> None:
    r = srv.http.put("/v1/tenants/default/webhook", json={"url": "ftp://example.com/x"}, headers=srv.headers)
    assert r.status_code == 422 and "not an http(s) URL" in r.text, r.text
    r = srv.http.put("/v1/tenants/default/webhook", json={"url": "http://[::1/x"}, headers=srv.headers)
    assert r.status_code == 422 and "not a valid URL" in r.text, r.text
    assert srv.get("/v1/tenants/default/webhook") == {"url": None, "secret": None}  # nothing stored
    r = srv.http.put("/v1/tenants/default/webhook", json={"url": "http://127.0.0.1:9/x"}, headers=srv.headers)
    assert r.status_code == 200 and len(r.json()["secret"]) >= 32, r.text  # made here, shown once
    assert srv.get("/v1/tenants/default/webhook")["secret"] is None
    with srv.ctx.db.sessions() as s:
        row = s.scalars(select(TenantWebhook)).one()
        assert r.json()["secret"] not in row.secret  # sealed at rest
    member = srv.post("/v1/users", {"name": "bob", "role": "member", "tenant": "default"}, expect=201).json()["token"]
    r = srv.http.put(
        "/v1/tenants/default/webhook", json={"url": "http://127.0.0.1:9/y"}, headers={"Authorization": f"Bearer {member}"}
    )
    assert r.status_code == 422 and "only an operator" in r.text, r.text  # no POSTs into the server's own network
    assert srv.get("/v1/tenants/default/webhook")["url"] == "http://127.0.0.1:9/x"


def test_alerts_from_a_failed_job_a_down_node_and_billing_are_posted_signed_and_retried(srv: Server) -> None:
    hook = Receiver([500])  # the first POST fails
    try:
        r = srv.http.put("/v1/tenants/default/webhook", json={"url": hook.url, "secret": SECRET}, headers=srv.headers)
        assert r.status_code == 200, r.text
        old = srv.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "exit 1"}, expect=201).json()
        wait_state(srv, "job", old["id"], ("failed",), 30)
        with srv.ctx.db.transaction() as s:  # as a database from before alerts: its history, no cursor yet
            s.execute(delete(AlertCursor))
        assert alerts.scan(srv.ctx.db) == 0 and srv.get("/v1/alerts") == []  # the first scan: no history alerted
        job = srv.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "exit 3"}, expect=201).json()
        wait_state(srv, "job", job["id"], ("failed",), 30)
        r = srv.http.patch("/v1/nodes/rtx4090-1", json={"state": "down"}, headers=srv.headers)
        assert r.status_code == 200, r.text
        with srv.ctx.db.transaction() as s:  # as billing.funds.low_balance_alerts and billing.spending write them
            s.add(BillingNotice(tenant_id=1, kind="alert", message="balance low: 9.00 CNY left, below your alert at 10.00 CNY"))
            s.add(BillingNotice(tenant_id=1, kind="alert", message="80 % of the monthly budget used (81 %)"))
        assert alerts.scan(srv.ctx.db) >= 4
        assert alerts.scan(srv.ctx.db) == 0  # each source row alerts once
        logged = srv.get("/v1/events?kind=alert")
        assert {e["to_state"] for e in logged} == {"job_failed", "node_down", "low_balance", "budget"}, logged
        kinds = [a["kind"] for a in srv.get("/v1/alerts")]
        assert {"job_failed", "node_down", "low_balance", "budget"} <= set(kinds), kinds
        now = time.time()
        alerts.deliver(srv.ctx.db, srv.ctx.keyring, now=now)
        first = hook.got[0]
        assert first[2] and first[1]["X-Suanli-Signature"].startswith("sha256="), first  # signature verified
        with srv.ctx.db.sessions() as s:
            retried = s.get(Alert, first[0]["id"])
            assert retried is not None and retried.delivery == "pending" and retried.last_error == "HTTP 500", retried.__dict__
            assert retried.attempts == 1 and retried.next_attempt_at == pytest.approx(now + 5.0), retried.__dict__
        assert alerts.deliver(srv.ctx.db, srv.ctx.keyring, now=now + 1) == 0  # not due yet
        alerts.deliver(srv.ctx.db, srv.ctx.keyring, now=now + 6)
        got = {a["id"]: a for a in srv.get("/v1/alerts")}
        assert got[first[0]["id"]]["delivery"] == "delivered" and got[first[0]["id"]]["attempts"] == 2, got
        assert all(a["delivery"] == "delivered" for a in got.values()), got
        bodies = [b for b, _, ok in hook.got if ok]
        assert {b["kind"] for b in bodies} == set(kinds) and all(b["tenant"] == "default" for b in bodies), bodies
        failed = next(b for b in bodies if b["kind"] == "job_failed")
        assert failed["object"] == f"job-{job['id']}", failed
    finally:
        hook.close()


def test_a_job_failing_before_the_alerts_thread_first_looks_is_alerted(srv: Server) -> None:
    """The server opens the alerts cursor as it starts (``alerts.open_cursor``): a failure
    in its first second, before the alerts thread's first scan, is not skipped as history
    (a loaded machine once delayed that scan past a failing job's end)."""
    job = srv.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "exit 3"}, expect=201).json()
    wait_state(srv, "job", job["id"], ("failed",), 30)
    assert alerts.scan(srv.ctx.db) == 1
    assert [(a["kind"], a["object"]) for a in srv.get("/v1/alerts")] == [("job_failed", f"job-{job['id']}")]


def test_an_endpoint_that_keeps_failing_is_given_up_after_the_last_attempt(srv: Server) -> None:
    hook = Receiver([503] * 10)
    try:
        srv.http.put("/v1/tenants/default/webhook", json={"url": hook.url, "secret": SECRET}, headers=srv.headers)
        alerts.scan(srv.ctx.db)
        with srv.ctx.db.transaction() as s:
            s.add(BillingNotice(tenant_id=1, kind="alert", message="balance low: 1.00 CNY left, below your alert at 10.00 CNY"))
        alerts.scan(srv.ctx.db)
        now = time.time()
        for i in range(alerts.MAX_ATTEMPTS + 2):
            alerts.deliver(srv.ctx.db, srv.ctx.keyring, now=now + 1000.0 * i)
        (a,) = srv.get("/v1/alerts")
        assert (a["delivery"], a["attempts"], a["last_error"]) == ("failed", alerts.MAX_ATTEMPTS, "HTTP 503"), a
        assert len(hook.got) == alerts.MAX_ATTEMPTS
    finally:
        hook.close()


def test_cli_sets_the_webhook_and_the_tenants_autostop_and_lists_alerts(
    srv: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from suanli.cli import app, remote

    monkeypatch.setattr(remote, "client_factory", lambda: srv.client())
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "config.json"))
    run = CliRunner()
    out = run.invoke(app, ["tenants", "webhook", "set", "default", "http://127.0.0.1:9/h"])
    assert out.exit_code == 0 and "secret (shown once): " in out.output, out.output
    assert run.invoke(app, ["tenants", "webhook", "show", "default"]).output.strip() == "http://127.0.0.1:9/h"
    out = run.invoke(app, ["tenants", "autostop", "default", "2h"])
    assert out.exit_code == 0 and "stop after 2h idle" in out.output, out.output
    assert srv.get("/v1/tenants")[0]["autostop_s"] == 7200
    out = run.invoke(app, ["tenants", "autostop", "default", "1m"])  # below the 5-minute minimum
    assert out.exit_code != 0 and "shorter than the minimum" in out.output, out.output
    assert srv.get("/v1/tenants")[0]["autostop_s"] == 7200  # unchanged
    assert run.invoke(app, ["tenants", "autostop", "default", "off"]).exit_code == 0
    assert srv.get("/v1/tenants")[0]["autostop_s"] is None
    alerts.scan(srv.ctx.db)
    listed = run.invoke(app, ["tenants", "alerts", "--json"])
    assert listed.exit_code == 0 and isinstance(json.loads(listed.output), list), listed.output


def test_a_served_platform_samples_by_itself_and_its_alerts_thread_posts(tmp_path: Path) -> None:
    """The server's own threads (``api.background``), not a test's calls: the metrics thread
    fills an instance's ``metrics``; the alerts thread POSTs a failed job's alert."""
    from suanli.control.metrics import MetricsSettings
    from tests.control.control_helpers import LiveServer, wait_until

    hook = Receiver([])
    live = LiveServer(tmp_path / "data", options={"runtime": "process", "metrics": MetricsSettings(interval_s=1.0)}).start()
    try:
        api = live.client()
        api.set_webhook("default", hook.url, SECRET)
        inst = api.create_instance(gpu_model="h100", gpu_count=1, disk_gib=1)
        wait_until(lambda: api.instance(inst["id"])["metrics"]["memory_mib"] is not None, 30)
        job = api.launch({"resources": {"accelerators": "RTX4090:1"}, "run": "exit 3"})
        got = wait_until(lambda: [b for b, _, ok in hook.got if ok and b["kind"] == "job_failed"], 30)
        assert got[0]["object"] == f"job-{job['id']}", got
    finally:
        live.close()
        hook.close()
