"""Price book and rating: seed prices, versioned edits, vectorised == row-by-row."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.advisor.pricebook import default_pricebook
from suanli.billing import rating
from suanli.billing.money import MICROS, fmt, to_micros
from suanli.billing.pricebook import PLANS, PriceBookError, default_book, parse

MODELS = ["RTX4090", "H20", "H100", "Ascend-910B", "A100-80G"]


def test_default_book_holds_the_seed_prices() -> None:
    b = default_book()
    assert b.currency == "CNY"
    assert b.gpu("RTX4090").on_demand == to_micros("1.96")
    assert b.gpu("H20").on_demand == to_micros("6.20")
    assert b.gpu("H100").monthly * 8 == to_micros("84480")
    assert b.gpu("Ascend-910B").monthly * 8 == to_micros("15600")
    assert b.storage == to_micros("0.8") and b.transfer == to_micros("0.12")
    assert "seed 003" in b.gpu("H100").sources["monthly"]
    assert b.gpu("H100").sources["on_demand"].startswith("derived")


def test_default_book_agrees_with_the_advisor() -> None:
    adv = default_pricebook()
    b = default_book()
    for g in b.gpus.values():
        for plan in ("on_demand", "monthly"):
            quoted = [
                o for o in adv.for_gpu(g.model, plan) if not o.derived and o.provider.startswith(("jygpu (极智算)", "zhixingyun"))
            ]
            if quoted and "四川" not in quoted[0].provider:
                assert abs(b.hourly(g.model, plan) / MICROS - quoted[0].price_per_gpu_hour) < 1e-3, (g.model, plan)


def test_plan_rules() -> None:
    g = default_book().gpu("RTX4090")
    assert g.reserved == round(g.on_demand * 8760 * 0.45)  # 55 % off for a year
    assert g.spot_floor == round(g.on_demand * 0.20)  # as low as 20 %
    assert g.spot(0) == g.spot_floor and g.spot(1000) == g.spot_cap
    assert g.spot(500, max_price=g.spot_floor) == g.spot_floor  # a bid caps the price


def test_edit_makes_a_new_book_and_keeps_the_old() -> None:
    old = default_book()
    new = old.with_price("H100", "on_demand", "21.50")
    assert new.gpu("H100").on_demand == to_micros("21.5") and old.gpu("H100").on_demand != new.gpu("H100").on_demand
    assert parse(new.to_dict()) == new
    added = old.with_price("L40S", "on_demand", "5")
    assert added.gpu("L40S").monthly > 0 and "derived" in added.gpu("L40S").sources["monthly"]
    with pytest.raises(PriceBookError, match="no prices yet"):
        old.with_price("B200", "spot", "1")
    with pytest.raises(ValueError, match="negative"):
        old.with_price("H100", "on_demand", "-1")
    with pytest.raises(PriceBookError, match="unknown plan"):
        old.with_price("H100", "weekly", "1")
    with pytest.raises(PriceBookError, match="no price"):
        old.gpu("Voodoo5")


def test_bad_books_are_refused() -> None:
    with pytest.raises(PriceBookError):
        parse({"gpus": [{"model": "X"}]})
    with pytest.raises(PriceBookError):
        parse({"gpus": [{"model": "X", "on_demand": "abc"}]})
    with pytest.raises(PriceBookError, match="between 0 and 1"):
        parse({"plan_rules": {"reserved_discount": 2}, "gpus": []})


records = st.lists(
    st.tuples(
        st.integers(0, 600),
        st.sampled_from([100, 500, 1000, 8000]),
        st.integers(0, 4),
        st.sampled_from(["on_demand", "monthly", "reserved", "spot", "covered"]),
        st.integers(0, 1000),
        st.one_of(st.none(), st.integers(0, 30_000_000)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(records)
def test_vectorised_equals_row_by_row(rows: list) -> None:
    book = default_book()
    plan_code = [rating.COVERED if p == "covered" else PLANS.index(p) for _, _, _, p, _, _ in rows]
    price = rating.gpu_prices(
        book,
        MODELS,
        np.array([m for _, _, m, _, _, _ in rows], dtype=np.int64),
        np.array(plan_code, dtype=np.int64),
        np.array([u for *_, u, _ in rows], dtype=np.int64),
        np.array([-1 if b is None else b for *_, b in rows], dtype=np.int64),
    )
    fast = rating.rate_gpu(
        np.array([u for u, *_ in rows], dtype=np.int64), np.array([m for _, m, *_ in rows], dtype=np.int64), price
    )
    slow = rating.rate_naive(
        book,
        [
            {"units": u, "milli": mi, "model": MODELS[m], "plan": p, "util_permille": ut, "max_price": b}
            for u, mi, m, p, ut, b in rows
        ],
    )
    assert fast.amount.tolist() == slow


def test_an_hour_of_a_4090_costs_its_price() -> None:
    book = default_book()
    r = rating.rate_gpu(np.array([600]), np.array([1000]), np.array([book.gpu("RTX4090").on_demand]))
    assert fmt(int(r.amount[0])) == "¥1.96"
    tenth = rating.rate_gpu(np.array([1]), np.array([100]), np.array([book.gpu("RTX4090").on_demand]))
    assert int(tenth.amount[0]) == 327  # ¥0.000327: a 6-second tenth of a GPU is not lost
    storage = rating.rate_storage(np.array([600 * 720]), np.array([100]), book.storage, 720)
    assert int(storage.amount[0]) == 80 * MICROS  # 100 GiB for a month at ¥0.8
    assert Decimal(int(rating.rate_transfer(np.array([10_000]), book.transfer).amount[0])) / MICROS == Decimal("1.2")
