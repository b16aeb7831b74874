"""A page's cost figures kept a few seconds (``api.cost_cache``), on SQLite and
PostgreSQL: asked again unchanged, the page costs one statement and gives the same
figures; its age, a row's transition, a rating run, a price change or a subscription
each make it computed again."""

from __future__ import annotations

from sqlalchemy import event, select

from suanli.api.cost_cache import CostCache
from suanli.billing import rater, store
from suanli.billing.workload_cost import billing_stamp
from suanli.clock import ManualClock
from suanli.control.lifecycle import transition
from suanli.db.models import Instance
from tests.billing.billing_helpers import HOUR, allocate, world


def _page(w) -> list[Instance]:  # type: ignore[no-untyped-def]
    with w.db.reads() as s:
        return list(s.scalars(select(Instance).where(Instance.id == w.instance_id)))


def test_a_page_asked_again_unchanged_is_answered_from_memory_until_something_changes(db_url: str) -> None:
    now = store.now_ms()
    w = world(db_url, disk_gib=10, created_ms=now - HOUR)
    allocate(w, now - HOUR, None)
    clock = ManualClock(now / 1000)
    cache = CostCache(max_age_ms=5_000, clock=clock)
    statements: list[str] = []
    event.listen(w.db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))

    def figures():  # type: ignore[no-untyped-def]
        statements.clear()
        return cache.costs(w.db, "instance", _page(w))

    first = figures()
    assert first[w.instance_id].accruing > 0 and first[w.instance_id].rated == 0, first
    clock.advance(4.9)
    again = figures()
    assert again is first
    assert len([q for q in statements if not q.startswith(("BEGIN", "COMMIT", "ROLLBACK"))]) == 2, statements  # page, stamp

    clock.advance(0.2)  # 5.1 s old: computed again, and the cost so far has grown
    older = figures()
    assert older is not first and older[w.instance_id].so_far >= first[w.instance_id].so_far
    clock.set(clock.now() - 60)  # a clock set back: never served from an entry "in the future"
    assert figures() is not older

    latest = figures()
    rater.run(w.db, cutoff_ms=store.now_ms())  # a rating run moves what accrued into what is rated
    rated = figures()
    assert rated is not latest and rated[w.instance_id].rated > 0, rated
    assert figures() is rated

    store.set_price(w.db, "ops", "H100", "on-demand", "99")  # a new price version
    priced = figures()
    assert priced is not rated and priced[w.instance_id].gpu_per_hour == 99_000_000, priced

    with w.db.transaction() as s:  # the instance stops: a transition stamps the row
        transition(s, s.get(Instance, w.instance_id), "stopping")
    assert figures() is not priced


def test_the_billing_stamp_moves_with_a_subscription_bought_and_cancelled(db_url: str) -> None:
    w = world(db_url)
    store.topup(w.db, "acme", "1000000")
    before = billing_stamp(w.db)
    sub = store.subscribe(w.db, "acme", "reserved", "H100", 1)
    bought = billing_stamp(w.db)
    store.cancel_subscription(w.db, sub.id, w.tenant_id)
    assert len({before, bought, billing_stamp(w.db)}) == 3
