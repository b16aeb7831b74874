"""Issue 12: usage is there when work ends, the bill's money adds up, and a rating
cutoff in the past never breaks on work that started after it (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.billing import rater, reports, spending, store
from suanli.billing.metering import OPEN, split
from suanli.billing.store import ms_to_dt, now_ms
from suanli.db.models import Instance
from tests.billing.billing_helpers import HOUR, allocate, world
from tests.control.control_helpers import Server, wait_state, wait_until

PERIOD = 3_600_000


def test_ended_work_is_rated_up_to_now_and_running_work_waits_for_the_settle_lag(db_url: str) -> None:
    w = world(db_url)
    now = now_ms()
    ended = allocate(w, now - 20_000, now - 2_000)  # ended 2 s ago: inside the old 60-s lag
    running = allocate(w, now - 2 * HOUR, None)
    res = rater.run(w.db)
    assert res.cutoff_ms >= now and res.settled_ms == res.cutoff_ms - rater.SETTLE_MS
    rows = reports.usage(w.db, w.tenant_id)
    mine = [r for r in rows if r["source_id"] == ended]
    # all of it, at once: one final record, or one per hour when its 18 s span an hour's turn
    # (the first 20 s of an hour: the CI run at 03:00:06 got 6 s and 12 s)
    assert sum(r["billed_seconds"] for r in mine) == 18, rows
    assert len(mine) == len({r["period_start"] for r in mine}) <= 2, rows
    # the running one: only hours that closed a settled minute ago, never the open one
    open_periods = sorted(r["period_start"] for r in rows if r["source_id"] == running)
    last_closed = (res.settled_ms // PERIOD) * PERIOD - PERIOD
    assert open_periods[-1] == reports.iso(last_closed), (open_periods, reports.iso(last_closed))
    bill = reports.bill(w.db, w.tenant_id)
    assert bill["ended_unrated_micros"] == 0, bill  # ended work is posted, not "accruing"
    assert bill["accruing_micros"] > 0  # the running one is


def test_a_past_cutoff_with_work_started_after_it_rates_and_accrues(db_url: str) -> None:
    """The tester's case: a rating run (and its budgets) at now - 60 s while an allocation
    and a disk started 10 s ago; they count nothing at the cutoff and nothing raises."""
    w = world(db_url, disk_gib=100)
    now = now_ms()
    cutoff = now - rater.SETTLE_MS
    with w.db.transaction() as s:  # the instance's disk was made 10 s ago, after the cutoff
        i = s.get(Instance, w.instance_id)
        i.created_at = i.updated_at = ms_to_dt(now - 10_000)
    allocate(w, now - 10_000, None, gpus=8)
    store.topup(w.db, "acme", "1000")
    store.set_budget(w.db, "acme", 100_000_000, [50], hard_cap=True, notice_s=0)
    assert rater.accruing(w.db, w.tenant_id, cutoff) == 0
    res = rater.run(w.db, cutoff_ms=cutoff)
    assert res.records == 0
    assert spending.apply_budgets(w.db, cutoff).actions == []
    assert rater.accruing(w.db, w.tenant_id, now_ms()) > 0  # and at now it counts
    # an allocation ended (clock skew) before it started bills nothing and blocks nobody
    allocate(w, now - 5_000, now - 9_000)
    assert rater.run(w.db).records >= 0


def test_post_rate_with_a_past_cutoff_returns_200_while_work_just_started(server: Server) -> None:
    if server.ctx.billing is not None:
        server.ctx.billing.stop()
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201).json()
    wait_state(server, "instance", inst["id"], ("running",))
    r = server.http.put(
        "/v1/billing/budget", json={"limit": "100", "thresholds": [50], "hard_cap": True, "notice_s": 60}, headers=server.headers
    )
    assert r.status_code == 200, r.text
    r = server.post("/v1/billing/rate", {"cutoff_ms": now_ms() - 60_000}, expect=200).json()
    assert r["records"] == 0, r  # nothing of it is final at that cutoff, and nothing raised
    r = server.post("/v1/billing/rate", {}, expect=200).json()  # the default: now
    assert "run_id" in r


def test_a_jobs_final_record_is_posted_within_seconds_of_its_end(server: Server) -> None:
    """The tester's 7-s job: the billing thread, woken by the tick that saw it end, posts
    its record at once (not a minute later), and the bill shows nothing of it accruing."""
    worker = server.ctx.billing
    assert worker is not None
    worker.interval_s = 3600  # only the end's wake can rate it in time
    worker.start()
    try:
        job = server.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "sleep 2"}, expect=201).json()
        done = wait_state(server, "job", job["id"], ("succeeded", "failed"), timeout_s=30)
        assert done["state"] == "succeeded", done
        t_end = time.monotonic()
        rec = wait_until(
            lambda: [u for u in server.get("/v1/billing/usage") if u["workload_id"] == job["id"] and u["kind"] == "gpu"],
            timeout_s=10,
            every_s=0.1,
        )
        assert time.monotonic() - t_end < 10
        assert 1 <= len(rec) <= 2 and sum(u["billed_seconds"] for u in rec) in (6, 12), rec
        bill = server.get("/v1/billing/bill")
        assert bill["ended_unrated_micros"] == 0, bill
    finally:
        worker.stop()


# -- metering: the two instants ---------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(0, 10 * PERIOD), st.integers(0, 3 * PERIOD)), min_size=0, max_size=30)


@settings(max_examples=150, deadline=None)
@given(intervals, st.lists(st.tuples(st.integers(0, 14 * PERIOD), st.integers(0, 2 * PERIOD)), min_size=1, max_size=5))
def test_runs_that_rate_ended_work_at_once_equal_one_final_run(ivs: list[tuple[int, int]], runs: list[tuple[int, int]]) -> None:
    """Each run sees the intervals as they stand at its cutoff (an end after it is not
    known yet: open), rates ended work up to the cutoff and open work's periods closed by
    the settled instant (cutoff - lag), from the previous settled instant's period on.
    Together they post exactly what one final run posts, and no record ever changes."""
    t0 = np.array([a for a, _ in ivs], dtype=np.int64)
    t1 = t0 + np.array([d for _, d in ivs], dtype=np.int64)
    t1 = np.where(t1 > 8 * PERIOD, OPEN, t1)
    final = 15 * PERIOD
    seen: dict[tuple[int, int], int] = {}
    watermark = 0
    for cutoff, lag in sorted(runs) + [(final, 0)]:
        known = np.where(t1 <= cutoff, t1, OPEN)  # what the run can see
        settled = max(0, cutoff - lag)
        p = split(t0, known, cutoff, watermark // PERIOD * PERIOD, PERIOD, settled)
        for i, ps, u in zip(p.index.tolist(), p.period_start.tolist(), p.units.tolist()):
            assert seen.setdefault((i, ps), u) == u  # a final record never changes
        watermark = max(watermark, settled)
    once = split(t0, t1, final, period_ms=PERIOD)
    assert seen == {(i, ps): u for i, ps, u in zip(once.index.tolist(), once.period_start.tolist(), once.units.tolist())}


def test_suanli_rate_inside_the_hour_says_why_running_work_posts_nothing(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    if server.ctx.billing is not None:
        server.ctx.billing.stop()
    inst = server.post("/v1/instances", {"gpu_model": "RTX4090", "gpu_count": 1}, expect=201).json()
    wait_state(server, "instance", inst["id"], ("running",))
    out = cli("rate")
    assert "0 records posted" in out and "running work is posted when its hour closes or it ends" in out, out
    assert "accruing, not yet rated: ¥" in cli("bill") and "ended, being rated" not in cli("bill")
