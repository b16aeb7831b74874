"""Spot bids (``max_price``) against a real database (SQLite and PostgreSQL): a spot
interval is charged min(spot price, its bid) per record; the market admission and
reclaim read agrees with the rater; admission holds work whose bid is below the price
of every model it may run on, and narrows it to the models whose price is within it;
a bad bid is refused naming the field."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from sqlalchemy import select

from suanli.api.schemas import InstanceCreate
from suanli.billing import admission, intervals, rater, spot, utilisation
from suanli.billing.money import MoneyError, parse_max_price, price_text, to_micros
from suanli.billing.pricebook import default_book
from suanli.billing.tables import Usage
from suanli.control.task import Task
from suanli.db.models import Allocation, Gpu, Instance, Node
from suanli.errors import describe_validation
from suanli.scheduler import PriorityClass, Request
from tests.billing.billing_helpers import HOUR, allocate, world

H100 = default_book().gpu("H100")


def _gpu_usage(w) -> dict[int, Usage]:  # type: ignore[no-untyped-def]
    with w.db.sessions() as s:
        return {u.source_id: u for u in s.scalars(select(Usage).where(Usage.kind == "gpu"))}


def test_a_spot_interval_with_a_bid_below_the_price_is_charged_exactly_the_bid(db_url: str) -> None:
    w = world(db_url)  # one H100 node with 8 GPUs
    allocate(w, 0, HOUR, gpus=5)  # on demand
    low = allocate(w, 0, HOUR, priority="spot", max_price=to_micros("1.00"))  # bid below the price
    half = allocate(w, 0, HOUR, milli=500, priority="spot", max_price=to_micros("1.00"))  # half a GPU, same bid
    short = allocate(w, 0, HOUR // 2, priority="spot", max_price=to_micros("1.234567"))  # half an hour
    high = allocate(w, 0, HOUR, priority="spot", max_price=to_micros("100"))  # bid above the price
    none = allocate(w, 0, HOUR // 2, priority="spot")  # no bid (as before bids existed)
    rater.run(w.db, cutoff_ms=HOUR + 1)
    u = _gpu_usage(w)
    # 5 + 1 + 0.5 + 1 + 1 + 1 = 9.5 of 8 GPUs allocated at the period start: utilisation 1000, price = cap
    price = H100.spot(1000)
    assert price == H100.spot_cap and price > to_micros("100") // 10
    assert u[low].unit_price == to_micros("1.00") and u[low].amount == to_micros("1.00")  # one GPU-hour at the bid
    assert u[half].unit_price == to_micros("1.00") and u[half].amount == to_micros("0.50")
    assert u[short].amount == (to_micros("1.234567") + 1) // 2  # half an hour, half-up
    assert u[high].unit_price == price and u[high].amount == price  # the price, not the bid
    assert u[none].unit_price == price and u[none].amount == (price + 1) // 2
    assert {u[k].plan for k in (low, half, short, high, none)} == {"spot"}
    # a second run posts nothing more: each record keeps the price it was rated at
    assert rater.run(w.db, cutoff_ms=HOUR + 1).posted.inserted == 0
    assert _gpu_usage(w)[low].amount == to_micros("1.00")


def test_the_market_now_is_the_rater_s_utilisation_and_price(db_url: str) -> None:
    w = world(db_url)
    allocate(w, 0, None, gpus=3)
    allocate(w, 0, 5_000, gpus=2)  # ended before the instant asked about
    allocate(w, 1_000, None, milli=500, priority="spot")
    sid = allocate(w, 0, None, priority="spot")  # rated for period 0 below
    # the instant's edges, as the rater counts them: held from its start, not at its end
    allocate(w, 10_000, None)  # starts at the instant: counted
    allocate(w, 2_000, 10_000, gpus=2)  # ends at the instant: not counted
    allocate(w, 11_000, None, gpus=2)  # starts after it
    allocate(w, 9_000, 8_000, gpus=2)  # ended before it started (two clocks): empty
    with w.db.transaction() as s:
        mk = spot.market(s, 10_000)
        iv = intervals.intervals(list(s.execute(select(*intervals.ALLOCATION_COLUMNS))))
        caps = utilisation.capacity_milli(s)
    code = iv.models.index("H100")
    ref = utilisation.per_period(iv, {code: caps["H100"]}, np.array([code]), np.array([10_000]))[0]
    assert mk.utilisation("H100") == ref == (3000 + 500 + 1000 + 1000) * 1000 // 8000
    assert mk.utilisation("h100") == ref  # a renter's spelling
    assert mk.price("H100") == H100.spot(ref)
    assert mk.utilisation("H100", 2000) == (5500 + 2000) * 1000 // 8000
    assert mk.price("Voodoo5") is None and mk.utilisation("Voodoo5") == 1000
    # what the rater charges for a period is the market's price at the period start
    rater.run(w.db, cutoff_ms=HOUR + 1)
    with w.db.transaction() as s:
        at_start = spot.market(s, 0)
    assert _gpu_usage(w)[sid].unit_price == at_start.price("H100") == H100.spot(6000 * 1000 // 8000)


class _W:
    def __init__(self, kind: str, id_: int, req: Request, num_nodes: int = 1) -> None:
        self.kind, self.id, self.request, self.num_nodes = kind, id_, req, num_nodes


def _spot_instance(w, bid: str | None, models: frozenset[str], gpus: int = 1) -> _W:  # type: ignore[no-untyped-def]
    with w.db.transaction() as s:
        i = Instance(
            tenant_id=w.tenant_id,
            user_id=w.user_id,
            name="bid",
            state="pending",
            gpu_models=sorted(models),
            gpu_count=gpus,
            priority="spot",
            max_price_micros=None if bid is None else to_micros(bid),
        )
        s.add(i)
        s.flush()
        iid = i.id
    req = Request(cpu_milli=1, memory_mib=1, gpu_count=gpus, gpu_models=models, priority=PriorityClass.SPOT)
    return _W("instance", iid, req)


def test_admission_holds_a_bid_below_the_price_and_narrows_to_the_models_within_it(db_url: str) -> None:
    w = world(db_url)
    with w.db.transaction() as s:
        s.add(Node(name="rtx-0", gpu_model="RTX4090", gpu_count=4, cpu_milli=64_000, memory_mib=512_000))
    allocate(w, 0, None, gpus=4)  # half the H100s busy
    rtx = default_book().gpu("RTX4090")
    with_it = H100.spot(5000 * 1000 // 8000)  # the price once the request's own GPU is counted
    cheap = _spot_instance(w, price_text(with_it - 1), frozenset({"H100"}))
    exact = _spot_instance(w, price_text(with_it), frozenset({"H100"}))
    unbid = _spot_instance(w, None, frozenset({"H100"}))
    anywhere = _spot_instance(w, "1.00", frozenset())  # any model: only the RTX4090 is within 1.00
    nowhere = _spot_instance(w, price_text(rtx.spot_floor - 1), frozenset())
    with w.db.transaction() as s:
        d = admission.decide(s, [cheap, exact, unbid, anywhere, nowhere])
    held, rejected, narrowed = d.held, d.rejected, d.narrowed
    assert rejected == {}
    assert held[("instance", cheap.id)] == (
        f"spot price ¥{price_text(with_it)}/GPU-h for H100 is above your max_price ¥{price_text(with_it - 1)} "
        "(at 62.5 % utilisation, counting this request); it starts when the price drops to your max_price"
    )
    assert ("instance", exact.id) not in held and ("instance", unbid.id) not in held  # at the price: it starts
    assert ("instance", anywhere.id) not in held and narrowed == {("instance", anywhere.id): frozenset({"RTX4090"})}
    why = held[("instance", nowhere.id)]
    assert why.startswith("spot price is above your max_price") and "on every model it may run on" in why
    assert "RTX4090 ¥" in why and "H100 ¥" in why
    assert set(held) == {("instance", cheap.id), ("instance", nowhere.id)}


def test_a_running_spot_slot_records_its_bid(db_url: str) -> None:
    """``capacity.take`` copies the bid onto the allocation, which the rater reads."""
    from suanli.control.capacity import snapshot, take
    from suanli.scheduler import Allocation as SchedAllocation

    w = world(db_url)
    inst = _spot_instance(w, "2.50", frozenset({"H100"}))
    with w.db.transaction() as s:
        s.add(Gpu(node_id=w.node_id, index=0, model="H100"))
    with w.db.transaction() as s:
        snap = snapshot(s, ["local"])
        row = s.get(Instance, inst.id)
        (a,) = take(s, row, [SchedAllocation("acme-n0", (0,), 1000, 1, 1)], snap)
        assert a.max_price_micros == to_micros("2.50")
    with w.db.sessions() as s:
        assert s.scalar(select(Allocation.max_price_micros).where(Allocation.instance_id == inst.id)) == 2_500_000


@pytest.mark.parametrize(
    "value, message",
    [
        ("cheap", "not a decimal amount"),
        ("-1", "must not be negative"),
        ("0", "above zero"),
        ("1.0000001", "at most 6 decimal places"),
        ("nan", "not a finite amount"),
        (True, "expected decimal text"),
    ],
)
def test_bad_bids_are_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(MoneyError, match=message):
        parse_max_price(value)
    with pytest.raises(ValidationError) as exc:
        Task.model_validate({"run": "x", "resources": {"priority": "spot", "max_price": value}})
    said = describe_validation(exc.value.errors())
    assert said.startswith("resources.max_price: ") and message in said
    with pytest.raises(ValidationError) as exc:
        InstanceCreate.model_validate({"gpu_model": "H100", "priority": "spot", "max_price": value})
    said = describe_validation(exc.value.errors())
    assert said.startswith("max_price: ") and message in said


def test_a_bid_needs_spot_and_is_kept_as_decimal_text() -> None:
    for priority in ("on-demand", "reserved", None):
        res = {"max_price": "1.20"} | ({"priority": priority} if priority else {})
        with pytest.raises(ValidationError) as exc:
            Task.model_validate({"run": "x", "resources": res})
        assert describe_validation(exc.value.errors()) == (
            f"resources.max_price: a max_price is a spot bid: only valid with priority spot (this request is {priority or 'on-demand'}); "
            "drop max_price 1.20 or ask for priority spot"
        )
    assert Task.model_validate({"run": "x", "resources": {"priority": "spot", "max_price": 1.2}}).resources.max_price == "1.2"
    assert InstanceCreate(priority="spot", max_price="1.20").max_price == "1.20"
    with pytest.raises(ValidationError, match="only valid with priority spot"):
        InstanceCreate(max_price="1.20")
    assert price_text(1_200_000) == "1.20" and price_text(392_000) == "0.392"
