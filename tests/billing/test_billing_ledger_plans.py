"""Ledger, subscriptions, quotas and budgets: the pure rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.billing import budgets, ledger, plans, quotas
from suanli.billing.pricebook import default_book

ops = st.lists(
    st.tuples(st.sampled_from(["topup", "charge", "sub", "refund"]), st.integers(1, 5), st.integers(1, 10**12)), max_size=80
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_ledger_always_balances(seq: list) -> None:
    postings: list[tuple[str, int]] = []
    expect: dict[int, int] = {}
    for i, (op, tenant, amount) in enumerate(seq):
        if op == "topup":
            e = ledger.topup(f"k{i}", tenant, amount)
            expect[tenant] = expect.get(tenant, 0) + amount
        elif op == "charge":
            e = ledger.charge(f"k{i}", tenant, {"gpu": amount, "storage": amount // 3})
            expect[tenant] = expect.get(tenant, 0) - amount - amount // 3
        elif op == "sub":
            e = ledger.subscription(f"k{i}", tenant, amount, "m")
            expect[tenant] = expect.get(tenant, 0) - amount
        else:
            e = ledger.refund(f"k{i}", tenant, amount, "r")
            expect[tenant] = expect.get(tenant, 0) + amount
        postings += list(e.postings)
        assert ledger.trial_balance(postings) == 0
    for t, v in expect.items():
        assert ledger.tenant_balance(postings, t) == v


def test_unbalanced_or_float_entries_are_refused() -> None:
    with pytest.raises(ledger.LedgerError, match="balance"):
        ledger.Entry("k", "x", 1, (("a", 5), ("b", -4)))
    with pytest.raises(ledger.LedgerError, match="integer"):
        ledger.Entry("k", "x", 1, (("a", 0.5), ("b", -0.5)))  # type: ignore[arg-type]
    with pytest.raises(ledger.LedgerError):
        ledger.topup("k", 1, 0)
    assert ledger.charge("k", 1, {"gpu": 0}) is None


HOUR = plans.HOUR_MS


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(-1000, 9000))
def test_reserved_refund_is_pro_rata(count: int, cancel_h: int) -> None:
    book = default_book()
    q = plans.subscribe(book, "reserved", "H100", count, 0)
    assert q.fee == book.gpu("H100").reserved * count and q.end_ms == 8760 * HOUR
    r = plans.refund("reserved", q.fee, q.start_ms, q.end_ms, cancel_h * HOUR)
    left = min(max(8760 - max(cancel_h, 0), 0), 8760)
    assert abs(r - q.fee * left / 8760) <= 0.5
    assert 0 <= r <= q.fee


def test_monthly_and_reserved_arithmetic() -> None:
    book = default_book()
    m = plans.subscribe(book, "monthly", "H100", 8, 0, months=3)
    assert m.fee == 84_480 * 3 * 1_000_000  # seed 003: 84,480 a month for 8 x H100, 3 months ~ 25万
    assert plans.refund("monthly", m.fee, m.start_ms, m.end_ms, HOUR) == 0
    r = plans.subscribe(book, "reserved", "RTX4090", 1, 0)
    assert r.fee == round(1_960_000 * 8760 * 0.45)
    assert plans.refund("reserved", r.fee, 0, r.end_ms, r.end_ms // 2) == r.fee // 2
    with pytest.raises(plans.PlanError):
        plans.subscribe(book, "spot", "H100", 1, 0)
    with pytest.raises(plans.PlanError):
        plans.subscribe(book, "monthly", "H100", 0, 0)


def _g(**kw) -> quotas.Grant:
    base = dict(id=1, tenant_id=7, gpu_model="H100", max_gpu_milli=8000, gpu_minutes=600, qos="on-demand", expires_ms=None)
    return quotas.Grant(**{**base, **kw})


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8000), st.integers(1, 9000))
def test_quota_boundary(busy: int, ask: int) -> None:
    d = quotas.Demand(7, ("H100",), ask, "on-demand")
    dec = quotas.admit([_g()], d, {1: busy}, {1: 0.0}, 0)
    if ask > 8000:
        assert dec.action == "reject" and "allows 8 GPUs at once" in dec.reason
    elif busy + ask <= 8000:
        assert dec.action == "admit" and dec.grant_id == 1
    else:
        assert dec.action == "queue" and "it starts when they free up" in dec.reason


def test_quota_rules() -> None:
    d = quotas.Demand(7, ("H100",), 1000, "on-demand")
    assert quotas.admit([], d, {}, {}, 0).ok  # no grants: unlimited
    assert quotas.admit([_g()], d, {}, {1: 599.9}, 0).ok
    spent = quotas.admit([_g()], d, {}, {1: 600.0}, 0)
    assert spent.action == "reject" and "600 of 600" in spent.reason
    assert "expired" in quotas.admit([_g(expires_ms=10)], d, {}, {}, 10).reason
    assert "no grant covers" in quotas.admit([_g(gpu_model="A100")], d, {}, {}, 0).reason
    assert "QoS" in quotas.admit([_g(qos="spot")], d, {}, {}, 0).reason
    assert quotas.admit([_g(qos="spot")], quotas.Demand(7, ("H100",), 1000, "spot"), {}, {}, 0).ok
    assert quotas.admit([_g(gpu_model=None)], quotas.Demand(7, (), 1000, "on-demand"), {}, {}, 0).ok
    assert "no grant covers" in quotas.admit([_g()], quotas.Demand(7, (), 1000, "on-demand"), {}, {}, 0).reason


def test_budget_alerts_and_cap() -> None:
    b = budgets.Budget(1, limit=100, thresholds=(50, 80, 100), hard_cap=True, notice_s=300)
    assert budgets.alerts_due(b, 49, []) == []
    assert budgets.alerts_due(b, 85, [50]) == [80]
    assert budgets.cap_action(b, 10, 5, None, 0).action == "ok"
    assert budgets.cap_action(b, 100, 5, None, 0).action == "notice"
    assert budgets.cap_action(b, 10, 0, None, 0).action == "notice"  # balance ran out
    assert budgets.cap_action(b, 100, 5, 0, 299_999).action == "notice"
    assert budgets.cap_action(b, 100, 5, 0, 300_000).action == "stop"
    soft = budgets.Budget(1, limit=100, hard_cap=False)
    assert budgets.cap_action(soft, 1000, -5, 0, 10**9).action == "ok"
    assert budgets.period_of(0) == "1970-01"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(1, 50), st.sampled_from([500, 1000, 2000, 8000])), max_size=25),
    st.sampled_from([0, 1000, 2000, 8000]),
)
def test_subscription_coverage_never_exceeds_its_gpus(pieces: list, capacity: int) -> None:
    import numpy as np

    start = np.array([a for a, _, _ in pieces], dtype=np.int64)
    end = start + np.array([d for _, d, _ in pieces], dtype=np.int64)
    milli = np.array([m for *_, m in pieces], dtype=np.int64)
    ok = plans.cover(start, end, milli, start, capacity)
    for t in range(0, 151):  # at every instant the covered GPUs fit the subscription
        assert milli[ok & (start <= t) & (end > t)].sum() <= capacity
    if capacity >= milli.sum():
        assert ok.all()
