"""The control side of billing (SQLite and PostgreSQL): the billing thread rates and then
applies the budgets through the control plane, runs when woken, and stops; a rating
run alone decides no budget; reads never rate."""

from __future__ import annotations

import time

from sqlalchemy import func, select

from suanli.billing import rater, store
from suanli.billing.tables import Notice, Usage
from suanli.control.billing_worker import BillingWorker
from suanli.db.models import Instance
from tests.billing.billing_helpers import HOUR, allocate, world
from tests.control.control_helpers import Server, wait_state, wait_until


def _count(w, table) -> int:  # type: ignore[no-untyped-def]
    with w.db.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(table)))


def test_the_thread_runs_when_woken_and_stops(db_url: str) -> None:
    w = world(db_url)
    allocate(w, 0, HOUR)
    worker = BillingWorker(w.db, interval_s=3600)  # never by the clock in this test
    worker.start()
    try:
        t0 = time.monotonic()
        worker.wake(after_s=2.0)
        time.sleep(0.2)
        assert worker.runs == 0 and _count(w, Usage) == 0  # a wake for later is not now
        wait_until(lambda: worker.runs == 1, timeout_s=20)
        assert _count(w, Usage) == 1 and time.monotonic() - t0 >= 2.0
        worker.wake()
        wait_until(lambda: worker.runs == 2, timeout_s=20)
    finally:
        worker.stop()
    assert worker._thread is None
    off = BillingWorker(w.db, interval_s=0)
    off.start()
    assert off._thread is None  # 0: off


def test_a_run_then_the_budgets_stop_a_capped_tenant_through_the_control_plane(db_url: str) -> None:
    w = world(db_url)
    store.set_budget(w.db, "acme", None, [], hard_cap=True, notice_s=0)
    allocate(w, 0, HOUR)  # ~¥19 against a balance of 0
    res = rater.run(w.db)
    assert _count(w, Notice) == 0  # a rating run decides no budget, stops nothing
    worker = BillingWorker(w.db, interval_s=0)
    _, actions = worker.run_once()
    assert actions == [f"tenant {w.tenant_id}: notice"] and res.records == 1
    _, actions = worker.run_once()
    assert actions == [f"tenant {w.tenant_id}: stop"]
    with w.db.sessions() as s:
        assert s.get(Instance, w.instance_id).state == "stopping"


def test_reads_never_rate(server: Server) -> None:
    if server.ctx.billing is not None:
        server.ctx.billing.stop()  # only reads and POST /rate below
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201).json()
    wait_state(server, "instance", inst["id"], ("running",))
    server.post(f"/v1/instances/{inst['id']}/stop")
    wait_state(server, "instance", inst["id"], ("stopped",))
    time.sleep(0.1)
    assert server.get("/v1/billing/usage") == []
    bill = server.get("/v1/billing/bill")
    assert bill["charges"] == [] and bill["ended_unrated_micros"] > 0  # not posted, but shown (the GPU part, ended)
    # what the tenant has left is told from the bill's own figures, at the bill's instant
    terms = bill["terms"]
    assert terms["balance"] == bill["balance"]
    assert round(terms["accruing"] * 1_000_000) == bill["accruing_micros"] + bill["ended_unrated_micros"]
    assert server.get("/v1/billing/usage") == []
    r = server.post("/v1/billing/rate", {"cutoff_ms": int(time.time() * 1000)}, expect=200).json()
    assert r["inserted"] >= 1 and r["budget_actions"] == []
    assert [u["kind"] for u in server.get("/v1/billing/usage")] == ["gpu"]
