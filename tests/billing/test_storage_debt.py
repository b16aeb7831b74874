"""A stopped disk's storage accrues as debt only within the tenant's limit (issue 12).

Rating runs on SQLite and PostgreSQL over a prepaid tenant whose instance is stopped
with a 100-GiB disk for thirty days (¥80 of storage at the default stopped price) and
whose balance is ¥1: storage is charged down to the floor to the micro-unit, the rest is
posted as ``waived``, nothing is rated twice, and a top-up makes storage chargeable again.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from suanli.billing import debt, rater, reports, store
from suanli.billing.money import to_micros
from suanli.billing.posting import COLUMNS, Records
from suanli.billing.tables import Usage
from suanli.db.models import Instance
from tests.billing.billing_helpers import HOUR, allocate, world

DAY = 24 * HOUR


def _stopped_disk(db_url: str, terms: str, funds: str = "1"):  # type: ignore[no-untyped-def]
    w = world(db_url, disk_gib=100, terms=terms)
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "stopped"
    store.topup(w.db, w.tenant_id, funds, key="first")
    return w


def _storage(w) -> list[Usage]:  # type: ignore[no-untyped-def]
    with w.db.sessions() as s:
        return list(s.scalars(select(Usage).where(Usage.kind == "storage").order_by(Usage.start_ms)))


def _balance(w) -> int:  # type: ignore[no-untyped-def]
    with w.db.sessions() as s:
        return store.balance(s, w.tenant_id)


def _full_charge(w, cutoff: int) -> int:  # type: ignore[no-untyped-def]
    """What the disk's storage costs with no limit: the rater's own figure."""
    recs = rater.collect(w.db, 0, cutoff, HOUR, settled_ms=cutoff)
    return int(recs.cols["amount"][recs.cols["kind"] == recs.kinds.index("storage")].sum())


@pytest.mark.parametrize(("terms", "credit", "floor"), [("prepaid", None, "2"), ("credit", "5", "7")])
def test_storage_is_charged_down_to_the_floor_and_waived_past_it(db_url: str, terms: str, credit: str | None, floor: str) -> None:
    w = _stopped_disk(db_url, "prepaid")
    store.set_terms(w.db, w.tenant_id, "op", terms=terms, credit_limit=credit, storage_debt_limit="2")
    full = _full_charge(w, 30 * DAY)
    assert full > to_micros("70")  # thirty days of 100 GiB: far past any floor here
    rater.run(w.db, cutoff_ms=30 * DAY)
    rows = _storage(w)
    assert _balance(w) == -to_micros(floor)  # to the micro-unit
    assert sum(u.amount + u.waived for u in rows) == full  # every unit rated, none lost
    assert sum(u.amount for u in rows) == to_micros("1") + to_micros(floor)
    cut = next(k for k, u in enumerate(rows) if u.waived)
    assert all(u.waived == 0 for u in rows[:cut]) and all(u.amount == 0 for u in rows[cut + 1 :])  # earliest first
    # a second run over the same time posts nothing and changes nothing
    again = rater.run(w.db, cutoff_ms=30 * DAY)
    assert again.posted.inserted == 0 and _balance(w) == -to_micros(floor)
    # what the renter sees: the usage records and the invoice say what was waived
    usage = [u for u in reports.usage(w.db, w.tenant_id) if u["kind"] == "storage"]
    assert len(usage) == len(rows) and sum(u["waived"] for u in usage) == pytest.approx(
        (full - sum(u.amount for u in rows)) / 1e6
    )
    doc = reports.invoice_doc(w.db, w.tenant_id, "1970-01")
    assert doc["storage_waived_micros"] == sum(u.waived for u in rows) > 0


def test_a_top_up_makes_storage_chargeable_again(db_url: str) -> None:
    w = _stopped_disk(db_url, "prepaid")
    store.set_terms(w.db, w.tenant_id, "op", storage_debt_limit="2")
    rater.run(w.db, cutoff_ms=10 * DAY)
    assert _balance(w) == -to_micros("2")
    store.topup(w.db, w.tenant_id, "5", key="second")
    before = {(u.source_id, u.period_ms) for u in _storage(w)}
    rater.run(w.db, cutoff_ms=20 * DAY)
    new = [u for u in _storage(w) if (u.source_id, u.period_ms) not in before]
    assert new[0].amount > 0 and new[0].waived == 0  # charged again from the next record on
    assert sum(u.amount for u in new) == to_micros("5") and _balance(w) == -to_micros("2")


def test_gpu_time_is_never_waived(db_url: str) -> None:
    w = _stopped_disk(db_url, "prepaid")
    allocate(w, 0, HOUR)  # an hour of H100 before the instance stopped: ¥19 of real work
    rater.run(w.db, cutoff_ms=10 * DAY)
    with w.db.sessions() as s:
        gpu = int(sum(u.amount for u in s.scalars(select(Usage).where(Usage.kind == "gpu"))))
        assert all(u.waived == 0 for u in s.scalars(select(Usage).where(Usage.kind == "gpu")))
    assert gpu > to_micros("19")
    # the GPU hour alone took the balance past the default ¥10 floor: all storage is waived
    assert _balance(w) == to_micros("1") - gpu
    assert all(u.amount == 0 and u.waived > 0 for u in _storage(w))


def test_postpaid_tenants_pay_all_their_storage(db_url: str) -> None:
    w = _stopped_disk(db_url, "postpaid")
    full = _full_charge(w, 30 * DAY)
    rater.run(w.db, cutoff_ms=30 * DAY)
    assert sum(u.waived for u in _storage(w)) == 0 and _balance(w) == to_micros("1") - full


@given(
    st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, 5_000_000), st.booleans()), max_size=40),
    st.integers(-20_000_000, 20_000_000),
    st.integers(0, 10_000_000),
)
def test_limit_keeps_every_unit_and_never_charges_storage_past_the_floor(
    rows: list[tuple[int, int, bool]], bal: int, allowed: int
) -> None:
    """``debt.limit`` alone, over random GPU (0) and storage (1) records, new or posted."""
    n = len(rows)
    col = lambda i: np.array([r[i] for r in rows], dtype=np.int64).reshape(n)  # noqa: E731
    cols = {name: np.zeros(n, np.int64) for name in COLUMNS}
    cols.update(kind=col(0), amount=col(1), start_ms=np.arange(n, dtype=np.int64), source_id=np.arange(n, dtype=np.int64))
    recs = Records(cols, ["gpu", "storage", "transfer"], ["instance", "job"], ["-"], ["on_demand"], {})
    new = np.array([r[2] for r in rows], dtype=bool).reshape(n)
    out = debt.limit(recs, new, {0: -allowed}, {0: bal})
    assert (out.cols["amount"] + out.cols["waived"] == recs.cols["amount"]).all()  # nothing lost
    assert (out.cols["waived"][(~new) | (recs.cols["kind"] == 0)] == 0).all()  # only new storage is limited
    spent = int(out.cols["amount"][new].sum())
    gpu = int(recs.cols["amount"][new & (recs.cols["kind"] == 0)].sum())
    assert bal - spent >= min(-allowed, bal - gpu)  # storage never takes it past the floor
    if out.cols["waived"].any():
        assert bal - spent == min(-allowed, bal - gpu)  # ... and is charged right down to it
