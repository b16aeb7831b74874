"""Spot bids (``max_price``) through the real control loop, reclaimer and local backend,
on SQLite and PostgreSQL: spot work whose bid is below the spot price waits with the
reason and starts once the price drops; work asking for any model starts only on a model
whose price is within its bid; a running job whose bid the price overtakes (utilisation
rose) gets the usual notice (SIGUSR1, deadline, SIGTERM), is requeued and resumes from its
checkpoint when the price is back under its bid, while spot work without a bid runs on.

One H100 node with 8 GPUs (spot from the default book: floor ¥3.81, cap ¥11.44; each
busy H100 adds ¥0.95) and one RTX 4090 node with 4 (floor ¥0.39).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.billing import store
from suanli.billing.money import price_text, to_micros
from suanli.billing.pricebook import default_book
from suanli.control import jobs
from suanli.errors import Invalid
from suanli.inventory import Inventory, NodeDecl
from tests.event_helpers import events_text
from tests.local.test_local_reclaim import WORKLOAD, log_lines, starts
from tests.platform_helpers import ADMIN, Platform, make_platform

H100 = default_book().gpu("H100")


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    """Two local nodes, on SQLite and on PostgreSQL (``db_url``)."""
    inv = Inventory(
        nodes=[
            NodeDecl(name="h100", gpu_model="H100", gpu_count=8, cpu_cores=32, memory_gib=128),
            NodeDecl(name="rtx", gpu_model="RTX4090", gpu_count=4, cpu_cores=16, memory_gib=64),
        ]
    )
    p = make_platform(tmp_path / "data", {}, inv, notice_s=2.0, db_url=db_url)
    try:
        yield p
    finally:
        p.close()


def held(p: Platform, job_id: int) -> str:
    reason = p.loop.stats.unplaced.get(("job", job_id))
    return reason.detail if reason else ""


def price(busy_h100: int) -> str:
    """The H100 spot price with that many of 8 busy, as messages show it (up to the cent)."""
    return price_text(-(-H100.spot(busy_h100 * 1000 // 8) // 10_000) * 10_000)


def test_spot_job_waits_while_the_price_is_above_its_bid_and_starts_when_it_drops(platform: Platform) -> None:
    p = platform
    busy = p.submit(name="busy", resources={"accelerators": "H100:4"}, run="sleep 60")
    p.until(lambda: p.state(busy, "running"), 20, "on-demand job running")
    bid = p.submit(name="bid", resources={"accelerators": "H100:1", "priority": "spot", "max_price": "7.00"}, run="sleep 60")
    why = p.until(lambda: held(p, bid), 10, "the spot job held")
    # 4 busy + its own 1 of 8 H100s: 62.5 % utilisation, ¥8.58
    assert why == (
        f"spot price ¥{price(5)}/GPU-h for H100 is above your max_price ¥7.00 (at 62.5 % utilisation, "
        "counting this request); it starts when the price drops to your max_price"
    )
    for _ in range(10):
        p.tick()
    assert p.state(bid, "queued") and p.allocations(bid) == []
    jobs.cancel(p.db, ADMIN, busy)  # the price drops to ¥4.77 with only the bid job's GPU
    p.until(lambda: p.state(bid, "running"), 20, "spot job started once the price dropped")
    (a,) = p.allocations(bid)
    assert a.gpu_model == "H100" and a.max_price_micros == to_micros("7.00") and held(p, bid) == ""
    assert [e.to_state for e in p.events("job", bid)] == ["queued", "running"], events_text(p.events("job", bid))


def test_held_spot_job_starts_when_an_operator_lowers_the_price_on_an_idle_cluster(platform: Platform) -> None:
    """Nothing on the cluster changes, only the book: the pass must not keep skipping the
    job as one it failed to place."""
    p = platform
    p.only_nodes({"h100"})  # and something the pass tries and cannot place, every pass
    stuck = p.submit(name="stuck", resources={"accelerators": "RTX4090:1"}, run="true")
    # above the floor (¥3.82), below the price counting its own GPU: held, not refused
    bid = p.submit(name="bid", resources={"accelerators": "H100:1", "priority": "spot", "max_price": "3.90"}, run="sleep 60")
    assert "above your max_price ¥3.90" in p.until(lambda: held(p, bid), 10, "held below the price")
    assert held(p, stuck) and p.state(stuck, "queued")
    for _ in range(5):
        p.tick()
    store.set_price(p.db, "op", "H100", "spot", "1.00")  # floor ¥1.00: ¥2.31 with one of 8 busy
    p.until(lambda: p.state(bid, "running"), 10, "started at the new price")


def test_spot_work_for_any_model_starts_only_where_the_price_is_within_its_bid(platform: Platform) -> None:
    p = platform
    # half a GPU of any model, at most ¥1.00/GPU-h: H100 spot is ¥4.29 with it, an RTX 4090 ¥0.49
    anyg = p.submit(name="any", resources={"gpu_milli": 500, "priority": "spot", "max_price": "1.00"}, run="sleep 60")
    p.until(lambda: p.state(anyg, "running"), 20, "running")
    assert [a.gpu_model for a in p.allocations(anyg)] == ["RTX4090"]
    # below every model's floor: it could never start, so it is refused at submission
    with pytest.raises(Invalid, match=r"your max_price ¥0\.10 is below the spot price floor \(RTX4090 ¥0\.40, H100 ¥3\.82"):
        p.submit(name="never", resources={"gpu_milli": 500, "priority": "spot", "max_price": "0.10"}, run="true")
    low = p.submit(name="low", resources={"gpu_milli": 500, "priority": "spot", "max_price": "0.41"}, run="true")
    why = p.until(lambda: held(p, low), 10, "held")
    assert why.startswith("spot price is above your max_price ¥0.41 on every model it may run on (RTX4090 ¥"), why


def test_running_spot_job_is_reclaimed_with_notice_when_the_price_passes_its_bid(platform: Platform) -> None:
    p = platform
    free = p.submit(name="free", resources={"accelerators": "H100:1", "priority": "spot"}, run="sleep 60")  # no bid
    p.until(lambda: p.state(free, "running"), 20, "spot job without a bid running")
    spot = p.submit(
        name="bid",
        resources={"accelerators": "H100:1", "priority": "spot", "max_price": "6.00"},
        run=WORKLOAD,
        checkpoint_dir="ckpt",
    )
    p.until(lambda: starts(p, spot), 20, "bid job running")  # 2 of 8 busy: ¥5.72 <= ¥6.00
    busy = p.submit(name="busy", resources={"accelerators": "H100:4"}, run="sleep 6")
    # 6 of 8 busy: ¥9.53 > ¥6.00; the bid job is told, with why, and the on-demand job runs meanwhile
    noticed = p.until(lambda: [e for e in p.events("job", spot) if e.to_state == "noticed"], 15, "notice")[0]
    assert noticed.message.startswith(
        f"spot price ¥{price(6)}/GPU-h for H100 is above max_price ¥6.00 (at 75 % utilisation): SIGUSR1 now, SIGTERM at "
    ), noticed.message
    told = p.until(lambda: [x for x in log_lines(p, spot) if x.startswith("USR1")], 15, "notice in the workload")[0]
    checkpoint = int(told.split("checkpoint=")[1].split()[0])
    # after the notice's deadline: SIGTERM, requeued, and held while the price is above the bid
    why = p.until(lambda: held(p, spot), 20, "requeued and held")
    assert why.startswith(f"spot price ¥{price(6)}/GPU-h for H100 is above your max_price ¥6.00")
    requeued = [e for e in p.events("job", spot) if e.to_state == "requeued"][0]
    assert (
        requeued.message.startswith(f"spot price ¥{price(6)}/GPU-h for H100 is above max_price ¥6.00")
        and "notice of 2s expired" in requeued.message
    )
    assert p.state(busy, "running")
    p.until(lambda: p.state(busy, "succeeded"), 30, "on-demand job done")
    p.until(lambda: starts(p, spot)[1:], 30, "bid job resumed")
    assert starts(p, spot)[1].startswith(f"start from={checkpoint} resume={p.data_dir}/checkpoints/job-{spot}/ckpt")
    term = [x for x in log_lines(p, spot) if x.startswith("TERM")]
    assert term and float(term[0].split("at=")[1]) >= noticed.ts.timestamp() + 2 - 0.25
    states = [e.to_state for e in p.events("job", spot)]
    assert states == ["queued", "running", "noticed", "requeued", "queued", "running"], events_text(p.events("job", spot))
    unbid = p.events("job", free)
    assert [e.to_state for e in unbid] == ["queued", "running"], events_text(unbid)  # no bid: never reclaimed for price
