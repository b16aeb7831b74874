"""Caps that hold (issue 12): an operator's budget is a floor a member may tighten and
never loosen, every change names who made it, and one tenant whose figures cannot be
read does not switch off another tenant's hard cap."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from sqlalchemy import select

from suanli.billing import rater, spending, store
from suanli.billing.tables import Notice
from suanli.control.admission import enforce_budgets
from suanli.db.models import Instance
from suanli.errors import Forbidden
from tests.billing.billing_helpers import HOUR, add_tenant, allocate, world
from tests.control.control_helpers import Server


def test_a_member_cannot_lift_the_cap_an_operator_set(server: Server, cli: Callable[..., str]) -> None:
    server.post("/v1/tenants", {"name": "lab"}, expect=201)
    renter = server.post("/v1/users", {"name": "r", "tenant": "lab"}, expect=201).json()["token"]
    cli("budget", "set", "--tenant", "lab", "--limit", "100", "--hard-cap", "--notice", "60")
    lift = server.http.put(
        "/v1/billing/budget", json={"limit": None, "hard_cap": False}, headers={"Authorization": f"Bearer {renter}"}
    )
    assert lift.status_code == 403 and "an operator set this budget" in lift.json()["error"]["message"], lift.text
    assert "raise or remove the limit" in cli(
        "budget", "set", "--limit", "200", "--hard-cap", "--notice", "60", code=1, token=renter
    )
    assert "lengthen the notice" in cli("budget", "set", "--limit", "50", "--hard-cap", "--notice", "600", code=1, token=renter)
    cli("budget", "set", "--limit", "50", "--hard-cap", "--notice", "30", token=renter)  # stricter: allowed
    assert json.loads(cli("budget", "show", "--json", token=renter))["limit"] == 50.0
    cli("budget", "set", "--limit", "100", "--hard-cap", "--notice", "60", token=renter)  # back to the floor: allowed
    changes = json.loads(cli("budget", "changes", "--json", "--tenant", "lab"))
    assert [(c["user"], c["role"]) for c in changes] == [("admin", "admin"), ("r", "member"), ("r", "member")]
    assert changes[1]["before"]["limit_micros"] == 100_000_000 and changes[1]["after"]["limit_micros"] == 50_000_000
    cli("budget", "set", "--tenant", "lab", "--limit", "500")  # an operator may loosen it
    assert json.loads(cli("budget", "show", "--json", "--tenant", "lab"))["hard_cap"] is False


def test_the_floor_is_kept_by_the_store_too(db_url: str) -> None:
    w = world(db_url)
    store.set_budget(w.db, "acme", "20", [100], hard_cap=True, notice_s=60, editor=store.Editor("ops", "operator"))
    with pytest.raises(Forbidden, match="turn off the hard cap"):
        store.set_budget(w.db, "acme", "20", [100], hard_cap=False, notice_s=60, editor=store.Editor("m", "member"))
    assert store.get_budget(w.db, w.tenant_id).hard_cap  # refused: nothing changed
    assert [c.user_name for c in store.budget_changes(w.db, w.tenant_id)] == ["ops"]


def test_one_tenant_whose_usage_cannot_be_read_leaves_the_other_caps_on(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection (named as such): reading one tenant's accruing usage raises, as
    the cutoff bug's ``MeteringError`` once did for a tenant with fresh work."""
    w = world(db_url)
    odd = add_tenant(w, "odd")
    store.topup(w.db, "acme", "1")
    for tenant in ("acme", "odd"):
        store.set_budget(w.db, tenant, None, [], hard_cap=True, notice_s=0)
    allocate(w, 0, HOUR, gpus=1)  # acme spends ¥19.07 of its ¥1
    real = rater.accruing

    def flaky(db, tenant_id, at_ms, *a, **kw):  # type: ignore[no-untyped-def]
        if tenant_id == odd:
            raise ValueError("injected: interval 7 ends before it starts")
        return real(db, tenant_id, at_ms, *a, **kw)

    monkeypatch.setattr(rater, "accruing", flaky)
    rater.run(w.db, cutoff_ms=HOUR + 1)
    enforce_budgets(w.db, HOUR + 1)  # notice (notice_s 0) ...
    run = spending.apply_budgets(w.db, HOUR + 2)  # ... then the stop, odd skipped and logged
    assert run.stop == [w.tenant_id]
    with w.db.sessions() as s:
        assert s.get(Instance, w.instance_id).state == "running"  # billing decides; control acts
        assert {n.tenant_id for n in s.scalars(select(Notice))} == {w.tenant_id}
        assert spending.capped(s, [odd], HOUR + 2) == {odd: "the hard cap's figures cannot be read now; new work waits"}


def test_another_tenants_stream_of_small_jobs_does_not_lift_a_hard_cap(server: Server) -> None:
    """The tester's attack: while a hard-capped tenant's H100 runs, another tenant submits a
    10-milli job every ~0.5 s (fresh allocations inside every rating cutoff window). The
    capped tenant's spend must stop within one rating interval of its cap."""
    import threading
    import time

    from tests.control.control_helpers import wait_state

    for t in ("capped", "noisy"):
        server.post("/v1/tenants", {"name": t}, expect=201)
        server.post("/v1/billing/topups", {"tenant": t, "amount": "100"}, expect=201)
    capped = server.post("/v1/users", {"name": "c", "tenant": "capped"}, expect=201).json()["token"]
    noisy = server.post("/v1/users", {"name": "n", "tenant": "noisy"}, expect=201).json()["token"]
    cap, interval_s = 0.05, 2.0  # ¥0.05 is ~9.4 s of an H100 at ¥19.07/h
    r = server.http.put(
        "/v1/billing/budget",
        json={"tenant": "capped", "limit": str(cap), "thresholds": [100], "hard_cap": True, "notice_s": 0},
        headers=server.headers,
    )
    assert r.status_code == 200, r.text
    worker = server.ctx.billing
    assert worker is not None
    worker.interval_s = interval_s
    worker.start()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            server.post("/v1/jobs", {"run": "sleep 0.2", "resources": {"gpu_milli": 10}}, expect=201, token=noisy)
            time.sleep(0.5)

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    try:
        inst = server.post("/v1/instances", {"gpu_model": "H100", "gpu_count": 1, "disk_gib": 1}, expect=201, token=capped).json()
        wait_state(server, "instance", inst["id"], ("stopping", "stopped"), timeout_s=60)
    finally:
        stop.set()
        feeder.join(timeout=10)
        worker.stop()
    server.post("/v1/billing/rate", {"cutoff_ms": None}, expect=200)
    bill = server.get("/v1/billing/bill", params={"tenant": "capped"})
    spent = bill["current_period_total"] + bill["accruing"] + bill.get("unrated", 0.0)
    one_interval = 19.07 * (interval_s + 1.0) / 3600  # a rating interval plus the loop's stop
    print(f"capped tenant spent ¥{spent:.4f} against a cap of ¥{cap} (+¥{one_interval:.4f} for one interval)")
    assert spent <= cap + one_interval, bill
