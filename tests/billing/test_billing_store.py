"""Rating runs against a real database (SQLite and PostgreSQL): exactly-once posting,
a balanced ledger, versioned prices, subscriptions, budgets and admission."""

from __future__ import annotations

import pytest
from sqlalchemy import event, func, select

from suanli.billing import admission, funds, price_versions, rater, spending, store
from suanli.billing.money import to_micros
from suanli.billing.pricebook import default_book
from suanli.billing.tables import Notice, TermsRow, Usage
from suanli.control.admission import admit, enforce_budgets
from suanli.db.models import Instance
from suanli.errors import Conflict, DomainError
from suanli.scheduler import PriorityClass, Request
from tests.billing.billing_helpers import HOUR, add_tenant, allocate, world


def _usage(w) -> list[Usage]:
    with w.db.sessions() as s:
        return list(s.scalars(select(Usage).order_by(Usage.source_id, Usage.period_ms)))


def _totals(w) -> tuple[int, int, int]:
    with w.db.sessions() as s:
        usage = int(s.scalar(select(func.coalesce(func.sum(Usage.amount), 0))))
        return usage, -store.balance(s, w.tenant_id), store.trial_balance(s)


def test_rating_posts_once_and_balances(db_url: str) -> None:
    w = world(db_url, disk_gib=100)
    allocate(w, 1_000, 1_000 + 7_001)  # 7.001 s -> two units, 12 s
    allocate(w, HOUR - 3_000, HOUR + 4_000, gpus=8)  # 7 s across a period boundary: 2 records, 12 s
    allocate(w, 0, None, milli=500, priority="spot")  # still running
    r1 = rater.run(w.db, cutoff_ms=3 * HOUR + 10, batch=2)
    r2 = rater.run(w.db, cutoff_ms=3 * HOUR + 10, batch=2)
    assert r1.posted.inserted > 0 and r2.posted.inserted == 0
    rows = _usage(w)
    gpu = [u for u in rows if u.kind == "gpu"]
    assert sum(u.billed_seconds for u in gpu if u.source_id == 1) == 12
    assert [u.billed_seconds for u in gpu if u.source_id == 2] == [6, 6]
    assert [u.period_ms for u in gpu if u.source_id == 3] == [0, HOUR, 2 * HOUR]  # closed periods only
    assert {u.plan for u in gpu} == {"on_demand", "spot"}
    storage = [u for u in rows if u.kind == "storage"]
    assert storage and all(u.quantity == 100 for u in storage)
    usage, charged, trial = _totals(w)
    assert usage == charged > 0 and trial == 0
    h100 = default_book().gpu("H100").on_demand
    assert [u for u in gpu if u.source_id == 1][0].amount == (2 * 1000 * h100 + 300_000) // 600_000


def test_old_usage_keeps_its_price(db_url: str) -> None:
    w = world(db_url)
    allocate(w, 0, HOUR)
    rater.run(w.db, cutoff_ms=HOUR + 1)
    v = store.set_price(w.db, "op", "H100", "on_demand", "30", effective_ms=HOUR + 2)
    allocate(w, 2 * HOUR, 3 * HOUR)
    rater.run(w.db, cutoff_ms=3 * HOUR + 1)
    first, second = _usage(w)
    assert first.amount == default_book().gpu("H100").on_demand and first.price_version == 1
    assert second.amount == to_micros("30") and second.price_version == v
    with pytest.raises(DomainError):
        store.set_price(w.db, "op", "H100", "on_demand", "-3")


def test_topup_is_idempotent_by_key(db_url: str) -> None:
    w = world(db_url)
    assert store.topup(w.db, "acme", "100.50", key="wire-1") == (True, to_micros("100.5"))
    assert store.topup(w.db, w.tenant_id, "100.50", key="wire-1") == (False, to_micros("100.5"))
    with pytest.raises(DomainError, match="positive|negative"):
        store.topup(w.db, "acme", "-5")
    with pytest.raises(DomainError, match="no tenant"):
        store.topup(w.db, "nobody", "5")


def test_reserved_subscription_covers_usage_and_refunds(db_url: str) -> None:
    w = world(db_url)
    fee = default_book().gpu("H100").reserved
    with pytest.raises(Conflict, match="top up"):
        store.subscribe(w.db, "acme", "reserved", "H100", 1, start_ms=0)
    store.topup(w.db, "acme", str(fee // 1_000_000 + 10))
    sub = store.subscribe(w.db, "acme", "reserved", "H100", 1, start_ms=0)
    allocate(w, 0, HOUR, priority="reserved")
    rater.run(w.db, cutoff_ms=HOUR + 1)
    (u,) = _usage(w)
    assert u.plan == "reserved" and u.amount == 0
    cancelled = store.cancel_subscription(w.db, sub.id, w.tenant_id, at_ms=sub.start_ms + (sub.end_ms - sub.start_ms) // 4)
    assert cancelled.refund == (fee * 3 + 2) // 4
    assert store.cancel_subscription(w.db, sub.id, w.tenant_id).refund == cancelled.refund  # once
    with w.db.sessions() as s:
        assert store.trial_balance(s) == 0


def test_budget_alerts_and_hard_cap_stop(db_url: str) -> None:
    w = world(db_url)
    store.topup(w.db, "acme", "10")
    store.set_budget(w.db, "acme", "20", [50, 100], hard_cap=True, notice_s=60)
    allocate(w, 0, HOUR, gpus=1)  # H100 on demand ~ ¥19.07: balance goes negative
    rater.run(w.db, cutoff_ms=HOUR + 1)
    with w.db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Notice)) == 0  # a rating run decides no budget
    enforce_budgets(w.db, HOUR + 1)  # what the billing thread does after a run
    with w.db.sessions() as s:
        kinds = [n.kind for n in s.scalars(select(Notice).order_by(Notice.id))]
        assert kinds == ["alert", "notice"]  # 95 % of budget, and the balance ran out
        assert s.get(Instance, w.instance_id).state == "running"
    assert spending.apply_budgets(w.db, HOUR + 1 + 61_000).stop == [w.tenant_id]  # billing decides, stops nothing
    with w.db.sessions() as s:
        assert s.get(Instance, w.instance_id).state == "running"
    enforce_budgets(w.db, HOUR + 1 + 62_000)  # the control plane acts
    with w.db.sessions() as s:
        assert s.get(Instance, w.instance_id).state == "stopping"
        assert [n.kind for n in s.scalars(select(Notice))][-1] == "stopped"


class _W:
    def __init__(self, kind: str, id_: int, req: Request, num_nodes: int = 1, row: Instance | None = None) -> None:
        self.kind, self.id, self.request, self.num_nodes, self.row = kind, id_, req, num_nodes, row


def test_admission_holds_and_rejects_with_reasons(db_url: str) -> None:
    w = world(db_url)
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "pending"
    store.create_grant(w.db, store.GrantSpec("acme", "H100", 2, None, "on-demand", None))
    allocate(w, 0, None, gpus=2, job=True)  # the grant is full (a running job of the tenant)
    req = Request(cpu_milli=1, memory_mib=1, gpu_count=1, gpu_models=frozenset({"H100"}), priority=PriorityClass.ON_DEMAND)
    big = Request(cpu_milli=1, memory_mib=1, gpu_count=4, gpu_models=frozenset({"H100"}), priority=PriorityClass.ON_DEMAND)
    with w.db.transaction() as s:
        d = admission.decide(s, [_W("instance", w.instance_id, req)])
        assert "quota: 2 of 2 GPUs" in d.held[("instance", w.instance_id)]
        d = admission.decide(s, [_W("instance", w.instance_id, big)])
        assert "allows 2 GPUs at once" in d.rejected[("instance", w.instance_id)]
        assert s.get(Instance, w.instance_id).state == "pending"  # billing only decides
        assert admit(s, [_W("instance", w.instance_id, big)]).admitted([_W("instance", w.instance_id, big)]) == []
    with w.db.sessions() as s:
        row = s.get(Instance, w.instance_id)
        assert row.state == "failed" and "quota" in row.reason
    other = add_tenant(w, "free")
    assert other  # a tenant without grants is not limited


def test_reposting_a_superset_charges_only_the_new_records(db_url: str) -> None:
    """The fast path refuses a batch with any existing key; the careful path then posts
    only the new rows, and the ledger follows the records exactly."""
    from suanli.billing.posting import post

    w = world(db_url)
    for k in range(6):
        allocate(w, k * 10_000, k * 10_000 + 6_000)
    recs = rater.collect(w.db, 0, HOUR, 3_600_000)
    first = post(w.db, recs.take(slice(0, 3)), "a", batch=10)
    assert first.inserted == 3
    again = post(w.db, recs, "b", batch=10)
    assert (again.inserted, again.skipped) == (3, 3)
    usage, charged, trial = _totals(w)
    assert usage == charged == int(recs.cols["amount"].sum()) and trial == 0


def test_spot_billing_ends_at_reclaim_and_stopped_instances_pay_storage_only(db_url: str) -> None:
    w = world(db_url, disk_gib=200)
    allocate(w, 0, 30 * 60_000 + 1, priority="spot")  # reclaimed after 30 min + 1 ms
    rater.run(w.db, cutoff_ms=5 * HOUR)
    gpu = [u for u in _usage(w) if u.kind == "gpu"]
    assert [u.billed_seconds for u in gpu] == [1806] and gpu[0].plan == "spot"
    storage = [u for u in _usage(w) if u.kind == "storage"]
    assert len(storage) == 5 and all(u.billed_seconds == 3600 for u in storage)  # the disk bills on, no GPU
    assert storage[0].amount == (600 * 200 * default_book().storage + 216_000) // 432_000


def test_concurrent_rating_runs_post_once(db_url: str) -> None:
    import threading

    w = world(db_url, disk_gib=10)
    for k in range(40):
        allocate(w, k * 90_000, k * 90_000 + 3 * HOUR, gpus=1 + k % 8, priority=["on-demand", "spot"][k % 2])
    errors: list[BaseException] = []

    def go(cutoff: int, batch: int) -> None:
        try:
            rater.run(w.db, cutoff_ms=cutoff, batch=batch)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    # different cutoffs and batch sizes: the runs' batches overlap in different ways
    threads = [threading.Thread(target=go, args=a) for a in ((6 * HOUR, 7), (4 * HOUR, 5), (6 * HOUR, 11), (5 * HOUR, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rater.run(w.db, cutoff_ms=6 * HOUR)
    expected = rater.collect(w.db, 0, 6 * HOUR, 3_600_000)
    usage, charged, trial = _totals(w)
    assert len(_usage(w)) == len(expected) and usage == charged == int(expected.cols["amount"].sum()) and trial == 0


def test_monthly_subscription_charge_and_ledger_accounts(db_url: str) -> None:
    w = world(db_url)
    store.topup(w.db, "acme", "200000")
    sub = store.subscribe(w.db, "acme", "monthly", "H100", 8, months=1, start_ms=0)
    assert sub.fee == 84_480 * 1_000_000
    assert store.cancel_subscription(w.db, sub.id, w.tenant_id, at_ms=HOUR).refund == 0
    with w.db.sessions() as s:
        assert store.balance(s, w.tenant_id) == (200_000 - 84_480) * 1_000_000 and store.trial_balance(s) == 0
    with pytest.raises(DomainError):
        store.subscribe(w.db, "acme", "spot", "H100", 1)


def test_bill_shows_what_is_accruing_before_it_is_rated(db_url: str) -> None:
    from suanli.billing import reports

    w = world(db_url)
    allocate(w, 0, None)  # running since 0
    allocate(w, HOUR, HOUR + 600_000)  # ended, not rated yet
    rater.run(w.db, cutoff_ms=HOUR + 1)  # rates period 0 of the running one only
    b = reports.bill(w.db, w.tenant_id, at_ms=HOUR + 1_800_000)
    h = default_book().gpu("H100").on_demand
    # accruing is running work only; the ended one waits for its record, shown apart
    assert b["accruing_micros"] == (300 * 1000 * h + 300_000) // 600_000
    assert b["ended_unrated_micros"] == (100 * 1000 * h + 300_000) // 600_000
    assert rater.accruing(w.db, w.tenant_id, HOUR + 1_800_000) == b["accruing_micros"] + b["ended_unrated_micros"]


def test_hard_capped_tenant_out_of_money_is_held(db_url: str) -> None:
    w = world(db_url)
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "pending"
    store.set_budget(w.db, "acme", None, [], hard_cap=True, notice_s=0)
    req = Request(cpu_milli=1, memory_mib=1, gpu_count=1, gpu_models=frozenset({"H100"}), priority=PriorityClass.ON_DEMAND)
    with w.db.transaction() as s:
        d = admission.decide(s, [_W("instance", w.instance_id, req)])
    assert "billing: prepaid balance is ¥0.00; top up" in d.held[("instance", w.instance_id)] and not d.rejected
    store.topup(w.db, "acme", "1")
    with w.db.transaction() as s:
        assert admission.decide(s, [_W("instance", w.instance_id, req)]) == admission.Decision()


def test_subscription_covers_only_its_gpu_count(db_url: str) -> None:
    w = world(db_url)
    store.topup(w.db, "acme", "200000")
    store.subscribe(w.db, "acme", "reserved", "H100", 2, start_ms=0)
    a = allocate(w, 0, HOUR, gpus=2, priority="reserved")  # fits the 2 GPUs
    b = allocate(w, 60_000, HOUR, gpus=1, priority="reserved")  # overlaps a: no room left
    c = allocate(w, 2 * HOUR, 3 * HOUR, gpus=1, priority="reserved")  # later, alone: covered
    d = allocate(w, 0, HOUR, gpus=1, model="H100", priority="on-demand")  # not reserved: billed
    rater.run(w.db, cutoff_ms=4 * HOUR)
    by = {u.source_id: u for u in _usage(w) if u.kind == "gpu"}
    assert (by[a].plan, by[a].amount) == ("reserved", 0) and (by[c].plan, by[c].amount) == ("reserved", 0)
    assert by[b].plan == "on_demand" and by[b].amount > 0 and by[d].amount > 0


def test_stopped_disks_pay_the_stopped_price(db_url: str) -> None:
    w = world(db_url, disk_gib=720)
    store.set_price(w.db, "op", None, "storage_stopped", "0.4", effective_ms=0)  # half price while stopped
    allocate(w, 0, 1_800_000)  # GPUs held for the first half hour, then stopped
    rater.run(w.db, cutoff_ms=HOUR + 1)
    (disk,) = [u for u in _usage(w) if u.kind == "storage"]
    full = 720 * default_book().storage // 720  # 720 GiB for an hour at 0.8/GiB-month = 0.8
    assert disk.amount == full // 2 + full // 4  # half an hour running, half an hour at half price


def test_hard_cap_counts_work_that_is_still_running(db_url: str) -> None:
    """Running work counts before its period closes: the cap does not wait an hour."""
    w = world(db_url)
    store.topup(w.db, "acme", "5")
    store.set_budget(w.db, "acme", None, [], hard_cap=True, notice_s=0)
    allocate(w, 0, None, gpus=8)  # 8 x H100: ~¥152/h, ¥5 lasts ~2 minutes
    assert spending.apply_budgets(w.db, 60_000).actions == []  # one minute in: ~¥2.54, still fine
    assert spending.apply_budgets(w.db, 180_000).actions == [f"tenant {w.tenant_id}: notice"]
    assert enforce_budgets(w.db, 181_000) == [f"tenant {w.tenant_id}: stop"]
    with w.db.sessions() as s:
        assert s.get(Instance, w.instance_id).state == "stopping"


def test_accruing_of_many_tenants_read_together_is_each_tenant_s_own(db_url: str) -> None:
    """The hard cap reads every tenant's accruing at once (``accruing_many``): each figure
    is the one ``accruing_parts`` gives that tenant alone, spot estimates at its own
    share, posted periods left out, running and ended apart."""
    w = world(db_url, disk_gib=50)
    other = add_tenant(w, "other")
    idle = add_tenant(w, "idle")  # nothing allocated: zero, not missing
    allocate(w, 0, None, gpus=2)
    allocate(w, 0, HOUR // 2, priority="spot", max_price=to_micros("1.5"))
    allocate(w, HOUR // 4, None, milli=300, priority="spot", tenant_id=other)
    allocate(w, 0, 2 * HOUR, gpus=3, tenant_id=other, job=True)
    rater.run(w.db, cutoff_ms=HOUR + 1)  # period 0 posted: left out of both
    at = 2 * HOUR + 900_000
    with w.db.transaction() as s:
        together = rater.accruing_many(s, [w.tenant_id, other, idle], at)
    alone = {t: rater.accruing_parts(w.db, t, at) for t in (w.tenant_id, other, idle)}
    assert together == alone, (together, alone)
    assert together[w.tenant_id].running > 0 and together[other].ended > 0 and together[idle].total == 0
    # the funds rules' figures read together (admission, the unfunded notice) are each tenant's own too
    with w.db.transaction() as s:
        charged = funds.figures(s, other, at)[0]  # period 0's records, posted
    store.topup(w.db, "other", "12.5")
    with w.db.transaction() as s:
        many = funds.figures_many(s, [w.tenant_id, other, idle], at)
        assert many == {t: funds.figures(s, t, at) for t in (w.tenant_id, other, idle)}, many
    assert charged < 0 and many[other][0] == charged + to_micros("12.5") and many[idle] == (0, 0)


def test_tenants_without_spot_work_rated_in_one_pass_get_each_their_own_figures(db_url: str) -> None:
    """``accruing_many`` rates the tenants that hold no spot GPUs together, in one pass:
    GPUs on demand and reserved (one subscription covering some of it), a job, a disk,
    a transfer, periods posted and not, next to a spot tenant rated alone; each figure
    is still the one ``accruing_parts`` gives that tenant alone."""
    w = world(db_url, disk_gib=50)
    reserved, jobs, mover, spot = (add_tenant(w, n) for n in ("reserved", "jobs", "mover", "spot"))
    allocate(w, 0, None, gpus=2)
    allocate(w, HOUR // 3, HOUR + HOUR // 2, milli=500)
    store.topup(w.db, "reserved", "100000")
    store.subscribe(w.db, "reserved", "reserved", "H100", 1, start_ms=0)
    allocate(w, 0, None, gpus=1, priority="reserved", tenant_id=reserved)  # covered
    allocate(w, 60_000, None, gpus=2, priority="reserved", tenant_id=reserved)  # no room left: on demand
    allocate(w, 0, 2 * HOUR, gpus=3, tenant_id=jobs, job=True)
    allocate(w, HOUR, None, milli=250, tenant_id=jobs, job=True)
    store.record_transfer(w.db, "mover", "12.5", ts_ms=HOUR + 5_000)
    store.record_transfer(w.db, "mover", "3", ts_ms=30_000)
    allocate(w, HOUR // 4, None, milli=300, priority="spot", tenant_id=spot)
    rater.run(w.db, cutoff_ms=HOUR + 1)  # period 0 posted: left out of every figure
    at = 2 * HOUR + 900_000
    everyone = [w.tenant_id, reserved, jobs, mover, spot]
    with w.db.transaction() as s:
        together = rater.accruing_many(s, everyone, at)
    alone = {t: rater.accruing_parts(w.db, t, at) for t in everyone}
    assert together == alone, (together, alone)
    assert all(together[t].total > 0 for t in everyone), together
    assert together[jobs].ended > 0 and together[mover].ended > 0 and together[reserved].running > 0


def test_the_book_in_force_is_read_alone_and_as_every_version_says(db_url: str) -> None:
    """``current_book`` and ``versions_in_force`` read only the versions they return (a
    create asks for the book several times, and the book gains a version with every price
    change) and return what the whole list (``versions``, ``in_force``) says: two
    versions at one instant (the later wins), one in the future of some instants, instants
    before every version, in one transaction and in fresh ones, and after a change."""
    w = world(db_url)
    for price, eff in (("20", HOUR), ("21", HOUR), ("22", 3 * HOUR), ("19", 5 * HOUR)):
        store.set_price(w.db, "op", "H100", "on_demand", price, effective_ms=eff)
    instants = [-1, 0, 1, HOUR - 1, HOUR, HOUR + 1, 3 * HOUR - 1, 3 * HOUR, 4 * HOUR, 5 * HOUR, 6 * HOUR]

    def expected(full: list, at: int) -> int:
        live = [vid for vid, eff, _ in full if eff <= at]
        return live[-1] if live else full[0][0]

    with w.db.sessions() as s:
        full = price_versions.versions(s)
    assert [eff for _, eff, _ in full] == [0, HOUR, HOUR, 3 * HOUR, 5 * HOUR]
    for order in (instants, instants[::-1]):
        with w.db.sessions() as s:  # one transaction: the kept version answers where it is in force
            assert [price_versions.current_book(s, at)[0] for at in order] == [expected(full, at) for at in order]
    for at in instants:
        with w.db.sessions() as s:
            vid, book = price_versions.current_book(s, at)
            read_every_version = price_versions._VERSIONS in s.info
        assert vid == expected(full, at) and book == dict((v, b) for v, _, b in full)[vid]
        assert read_every_version == (at < 0)  # only before the first version: it is the answer then
        for since in [x for x in instants if x <= at]:
            want = [(v, e) for v, e, _ in price_versions.in_force(full, since, at)]
            with w.db.sessions() as s:
                assert [(v, e) for v, e, _ in price_versions.versions_in_force(s, since, at)] == want, (since, at)
                assert price_versions.current_book(s, at)[0] == expected(full, at)  # kept by the read above
            with w.db.sessions() as s:  # after the book in force at ``at`` was read and kept
                price_versions.current_book(s, at)
                assert [(v, e) for v, e, _ in price_versions.versions_in_force(s, since, at)] == want, (since, at)
    with w.db.transaction() as s:  # a change in the same transaction is seen at once
        assert price_versions.current_book(s, 7 * HOUR)[0] == full[-1][0]
    newer = store.set_price(w.db, "op", "H100", "on_demand", "18", effective_ms=6 * HOUR)
    with w.db.sessions() as s:
        assert price_versions.current_book(s, 7 * HOUR)[0] == newer and price_versions.current_book(s, 5 * HOUR)[0] == full[-1][0]


def test_a_queue_of_alike_work_is_judged_from_the_rows_it_carries_and_priced_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control loop's queue carries the rows it read; admission reads none of them
    again, and prices each shape of request once per pass, whatever the queue's length.
    The answers are those of a row read and priced one at a time: a prepaid tenant whose
    balance covers the first unit is admitted, one whose balance does not is held."""
    w = world(db_url, terms="prepaid")
    poor = add_tenant(w, "poor")
    with w.db.transaction() as s:
        s.get(Instance, w.instance_id).state = "stopped"
        s.query(TermsRow).filter(TermsRow.tenant_id == poor).update({"terms": "prepaid"})
        rows = [
            Instance(tenant_id=t, user_id=w.user_id, name=f"q{i}", state="pending", gpu_models=["H100"], gpu_count=1, disk_gib=1)
            for i in range(20)
            for t in (w.tenant_id, poor)
        ]
        s.add_all(rows)
    store.topup(w.db, "acme", "1000")
    req = Request(cpu_milli=1, memory_mib=1, gpu_count=1, gpu_models=frozenset({"H100"}), priority=PriorityClass.ON_DEMAND)
    priced = []
    real = funds.per_hour
    monkeypatch.setattr(funds, "per_hour", lambda *a, **k: priced.append(1) or real(*a, **k))
    sent = []
    event.listen(w.db.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    with w.db.transaction() as s:
        held_rows = {r.id: s.get(Instance, r.id) for r in rows}
        work = [_W("instance", r.id, req, row=held_rows[r.id]) for r in rows]
        sent.clear()
        d = admission.decide(s, work)
    assert not [q for q in sent if "WHERE instances.id IN" in q]  # no row read again
    assert len(priced) == 1
    assert {k for k in d.held} == {("instance", r.id) for r in rows if r.tenant_id == poor}
    assert all("balance" in why for why in d.held.values())
    with w.db.transaction() as s:  # the same answers with the rows read here
        assert admission.decide(s, [_W("instance", r.id, req) for r in rows]).held == d.held
