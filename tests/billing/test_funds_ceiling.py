"""The prepaid rules judge a tenant on a ceiling of its accruing first (``billing.ceiling``)
and read the exact figure only when the ceiling would change the answer. These tests
hold the two promises that makes: the ceiling is never below the exact figure, and a
rule judged that way answers exactly what it answers on the exact figures."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from sqlalchemy import event

from suanli.billing import ceiling, funds, rater, store
from suanli.billing.metering import UNIT_MS
from suanli.billing.pricebook import default_book
from suanli.billing.rating import GPU_DEN
from suanli.billing.store import ms_to_dt
from suanli.billing.terms import Terms
from suanli.db.models import Instance
from tests.billing.billing_helpers import HOUR, World, add_tenant, allocate, world

PRIORITIES = ("on-demand", "spot", "reserved")


def _random_work(w: World, rng: random.Random, tenants: list[int]) -> None:
    """GPU intervals (instances' and jobs', every priority, bids, running and ended),
    disks (kept and deleted) and transfers, over three hours, for each tenant."""
    for t in tenants:
        for _ in range(rng.randint(0, 5)):
            start = rng.randint(0, 3 * HOUR)
            end = None if rng.random() < 0.4 else start + rng.randint(1, 2 * HOUR)
            bid = rng.choice([None, 500_000, 50_000_000])
            allocate(
                w,
                start,
                end,
                gpus=rng.randint(1, 4),
                milli=rng.choice([100, 250, 1000]),
                priority=rng.choice(PRIORITIES),
                model=rng.choice(["H100", "A100", "RTX 4090"]),
                tenant_id=t,
                job=rng.random() < 0.3,
                max_price=bid,
            )
        with w.db.transaction() as s:
            for _ in range(rng.randint(0, 3)):
                created = rng.randint(0, 3 * HOUR)
                deleted = rng.random() < 0.3
                s.add(
                    Instance(
                        tenant_id=t,
                        user_id=w.user_id,
                        name=f"d{rng.random()}",
                        state="deleted" if deleted else rng.choice(["running", "stopped"]),
                        disk_gib=rng.choice([0, 1, 50, 500]),
                        gpu_models=["H100"],
                        gpu_count=1,
                        created_at=ms_to_dt(created),
                        updated_at=ms_to_dt(created + rng.randint(0, HOUR) if deleted else created),
                    )
                )
        for _ in range(rng.randint(0, 2)):
            store.record_transfer(w.db, t, str(rng.choice([0.5, 3, 120])), ts_ms=rng.randint(0, 3 * HOUR))


def test_the_ceiling_is_never_below_what_is_accruing(db_url: str) -> None:
    """Random work of five tenants (spot at the market, bids, a subscription covering
    reserved work, disks, transfers, a price raised then lowered), read at instants
    before and after rating runs: each tenant's ceiling is at least its exact accruing."""
    rng = random.Random(7)
    w = world(db_url, disk_gib=20)
    tenants = [w.tenant_id] + [add_tenant(w, f"t{i}") for i in range(4)]
    store.topup(w.db, tenants[1], "200000")
    store.subscribe(w.db, tenants[1], "reserved", "H100", 2, start_ms=0)
    _random_work(w, rng, tenants)
    store.set_price(w.db, "op", "H100", "on_demand", "90", effective_ms=HOUR // 2)  # dear for a while
    store.set_price(w.db, "op", "H100", "on_demand", "40", effective_ms=2 * HOUR)
    checked = 0
    for cutoff in (None, HOUR + 5_000, 2 * HOUR + 61_000, 3 * HOUR + 1):
        if cutoff is not None:
            rater.run(w.db, cutoff_ms=cutoff)
        for at in (3 * HOUR + 1, 3 * HOUR + 1_234_567, 5 * HOUR):
            with w.db.transaction() as s:
                exact = rater.accruing_many(s, tenants, at)
                top = ceiling.ceilings(s, tenants, at)
            for t in tenants:
                assert top[t] >= exact[t].total, (cutoff, at, t, top[t], exact[t])
                checked += exact[t].total > 0
    assert checked > 20  # most of the figures were money, not zeros


def test_the_ceiling_of_one_interval_is_its_longest_run_at_the_dearest_price() -> None:
    """One GPU held from 10 minutes into the unrated period, read an hour later: its units
    up to then at the book's highest GPU price, plus a micro-unit for each of its two
    records. The earliest start, not the unrated period, bounds the run: a watermark left
    far behind (no rating run yet) does not make the ceiling useless."""
    book = default_book()
    books = [(1, 0, book)]
    dearest = max(
        max(g.on_demand, g.spot_cap, g.spot_floor, book.hourly(m, "monthly"), book.hourly(m, "reserved"))
        for m, g in book.gpus.items()
    )
    start, at = 100 * HOUR + 600_000, 101 * HOUR + 600_000
    one = ceiling.Sums(gpus=ceiling.Held(amount=1000, rows=1, first_ms=start))
    expected = -(-(HOUR // UNIT_MS) * 1000 * dearest // GPU_DEN) + 2
    assert ceiling.ceiling(books, 100 * HOUR, at, HOUR, one) == expected
    assert ceiling.ceiling(books, 0, at, HOUR, one) == expected
    assert ceiling.ceiling(books, 0, at, HOUR, ceiling.Sums()) == 0


def test_the_ceiling_prices_with_the_versions_in_force_from_the_unrated_period_on() -> None:
    """The version in force when the unrated period began counts, though it took effect
    before; one that took effect after the instant read does not."""
    book = default_book()
    dear = replace(book, gpus={m: replace(g, on_demand=g.on_demand * 10) for m, g in book.gpus.items()})
    one = ceiling.Sums(gpus=ceiling.Held(amount=1000, rows=1, first_ms=HOUR))
    at = HOUR + HOUR // 2
    cheap_only, dear_only = (
        ceiling.ceiling([(1, 0, book)], HOUR, at, HOUR, one),
        ceiling.ceiling([(2, 0, dear)], HOUR, at, HOUR, one),
    )
    assert dear_only > cheap_only
    assert ceiling.ceiling([(1, 0, book), (2, HOUR // 2, dear), (3, 2 * HOUR, book)], HOUR, at, HOUR, one) == dear_only
    assert ceiling.ceiling([(1, 0, book), (2, 2 * HOUR, dear)], HOUR, at, HOUR, one) == cheap_only


def test_a_rule_judged_on_the_ceiling_answers_as_on_the_exact_figures(db_url: str) -> None:
    """With what is left set around each tenant's first unit (by its credit limit), the
    start refusal and a threshold rule give through ``Figures`` exactly what they give on
    the exact figures, message included."""
    rng = random.Random(11)
    w = world(db_url, disk_gib=100)
    tenants = [w.tenant_id] + [add_tenant(w, f"t{i}") for i in range(2)]
    store.topup(w.db, tenants[1], "3.5")
    _random_work(w, rng, tenants)
    at = 3 * HOUR + 600_000
    with w.db.transaction() as s:
        exact = funds.figures_many(s, tenants, at)
        figs = funds.Figures(s, tenants, at)
    judged = 0
    for t in tenants:
        bal, acc = exact[t]
        for cost in (0, 1_000_000, 30_000_000):
            need = funds.first_unit(cost)
            for delta in (-acc - 1, -1, 0, 1, 2_000_000, 10**12):
                terms = Terms(t, "credit", credit_limit=max(0, acc - bal + need + delta))
                rule = lambda b, a: funds.refusal(terms, b, a, cost, "CNY")  # noqa: E731, B023
                assert figs.judge(t, rule) == rule(bal, acc), (t, bal, acc, terms, cost)
                judged += rule(bal, acc) is not None
        for threshold in (bal - acc - 1, bal - acc, bal - acc + 1):
            low = lambda b, a: f"{b - a} left" if b - a < threshold else None  # noqa: E731, B023
            assert figs.judge(t, low) == low(bal, acc)
    assert judged > 3 and all(exact[t][1] > 0 for t in tenants)


def test_a_well_funded_start_reads_no_interval(db_url: str) -> None:
    """A tenant whose balance covers the most its work can have accrued starts new work
    without the rating pass: no statement reads its posted usage or its intervals one by
    one. One that cannot pay is refused with the exact figures in the message."""
    w = world(db_url, disk_gib=50, terms="prepaid")
    allocate(w, 0, None, gpus=2)
    store.topup(w.db, w.tenant_id, "100000")
    seen: list[str] = []
    event.listen(w.db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    with w.db.transaction() as s:
        assert funds.start_refusal(s, w.tenant_id, 2_000_000, at_ms=HOUR) is None
    assert seen and not [q for q in seen if "billing_usage" in q or "allocations.gpu_indices," in q], seen
    store.set_terms(w.db, w.tenant_id, "op", terms="prepaid")
    with w.db.transaction() as s:
        bal, acc = funds.figures(s, w.tenant_id, HOUR)
    dear = (bal - acc) * 3_600_000 // UNIT_MS + 600  # its first unit just above what is left
    with w.db.transaction() as s:
        why = funds.start_refusal(s, w.tenant_id, dear, at_ms=HOUR)
        assert why == funds.refusal(Terms(w.tenant_id), bal, acc, dear, "CNY"), why


def test_ceilings_that_cannot_be_read_leave_the_rules_to_the_exact_figures(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Odd data that breaks the ceilings' sums must not lift anyone's limit: the rules are
    then judged on the exact figures, as before the ceilings."""
    w = world(db_url, disk_gib=50, terms="prepaid")
    allocate(w, 0, None, gpus=2)  # running, and no money: out of funds
    rich = add_tenant(w, "rich")
    store.set_terms(w.db, rich, "op", terms="prepaid")
    store.topup(w.db, rich, "100000")

    def broken(*_: object) -> dict[int, int]:
        raise ValueError("odd data")

    monkeypatch.setattr(funds, "ceilings", broken)
    with w.db.transaction() as s:
        short = funds.out_of_funds(s, [w.tenant_id, rich], at_ms=HOUR)
        assert funds.start_refusal(s, rich, 1_000_000, at_ms=HOUR) is None
        assert funds.start_refusal(s, w.tenant_id, 1_000_000, at_ms=HOUR) is not None
    assert [x.tenant_id for x in short] == [w.tenant_id]
