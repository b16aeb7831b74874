"""Invoices and quotes: pure documents."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.billing import invoice, quote
from suanli.billing.money import fmt_exact
from suanli.billing.pricebook import default_book


def test_invoice_lines_totals_and_html() -> None:
    lines = invoice.usage_lines(
        [
            ("gpu", "H100", "on_demand", 8000, 3600, 152_533_336),
            ("gpu", "H100", "on_demand", 8000, 1800, 76_266_668),
            ("storage", "-", "on_demand", 100, 3600, 111_111),
            ("transfer", "-", "on_demand", 2500, 0, 300_000),
        ]
    )
    assert [(ln.kind, ln.quantity) for ln in lines] == [
        ("gpu", "12.0000 GPU-h"),
        ("storage", "0.1389 GiB-month"),
        ("transfer", "2.500 GiB"),
    ]
    doc = invoice.build(
        {"id": 1, "name": "<lab>"},
        "2026-11",
        "CNY",
        lines,
        [{"id": 1, "plan": "reserved", "gpu_model": "H100", "gpu_count": 1, "fee": 10, "refund": 4}],
        [{"date": "2026-11-30", "memo": "wire", "amount": 500_000_000}],
        123,
    )
    assert doc["total_micros"] == 152_533_336 + 76_266_668 + 111_111 + 300_000 + 6
    assert doc["total_text"] == "¥229.211121"  # exact, as its lines are (¥228.800004 + ...)
    assert [ln["amount_text"] for ln in doc["lines"]] == ["¥228.800004", "¥0.111111", "¥0.30"]
    page = invoice.render_html(doc)
    assert "&lt;lab&gt;" in page and "<lab>" not in page and "12.0000 GPU-h" in page and "¥229.211121" in page


def test_quote_per_hour_and_total() -> None:
    book = default_book()
    (q,) = quote.quote(book, ["H100"], 8, 0, 2, "on-demand", 10.0, disk_gib=720)
    assert q.per_hour == 16 * book.gpu("H100").on_demand + 720 * book.storage // 720
    assert q.total == q.per_hour * 10 and q.gpus == 16
    (half,) = quote.quote(book, ["RTX4090"], 0, 500, 1, "spot", None, max_price="0.30")
    assert half.per_hour == 150_000 and half.total is None and "max_price" in half.note
    assert quote.quote(book, ["Voodoo5"], 1, 0, 1, "on-demand", 1.0) == []
    many = quote.quote(book, ["RTX4090", "H100", "H20"], 1, 0, 1, "on-demand", 1.0)
    assert [q.per_hour for q in many] == sorted(q.per_hour for q in many)


def _shown(text: str) -> Decimal:
    return Decimal(text.replace("¥", "").replace(",", ""))


def test_the_testers_invoice_adds_up_as_shown() -> None:
    """Lines of ¥0.636 and ¥0.005 showed as ¥0.64 + ¥0.01 with a total of ¥0.64."""
    lines = invoice.usage_lines([("gpu", "H100", "on_demand", 1000, 60, 636_000), ("storage", "-", "on_demand", 50, 60, 5_000)])
    doc = invoice.build({"id": 1, "name": "lab"}, "2026-11", "CNY", lines, [], [], 0)
    assert [ln["amount_text"] for ln in doc["lines"]] == ["¥0.636", "¥0.005"] and doc["total_text"] == "¥0.641"


usage_rows = st.lists(
    st.tuples(
        st.sampled_from(["gpu", "storage", "transfer"]),
        st.sampled_from(["H100", "RTX4090", "-"]),
        st.sampled_from(["on_demand", "spot", "reserved"]),
        st.integers(0, 64_000),
        st.integers(0, 3600),
        st.integers(0, 10**12),
    ),
    max_size=60,
)
subscriptions = st.lists(st.tuples(st.integers(0, 10**11), st.integers(0, 10**11)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(usage_rows, subscriptions)
def test_invoice_total_is_the_sum_of_its_lines_as_shown(rows: list, subs: list) -> None:
    """Over random usage: the total equals the lines (and fees less refunds) to the
    micro-unit, in ``*_micros`` and in the text a reader adds up."""
    lines = invoice.usage_lines(rows)
    fees = [
        {"id": k, "plan": "reserved", "gpu_model": "H100", "gpu_count": 1, "fee": f, "refund": min(r, f)}
        for k, (f, r) in enumerate(subs)
    ]
    doc = invoice.build({"id": 1, "name": "lab"}, "2026-11", "CNY", lines, fees, [], 0)
    assert doc["total_micros"] == sum(a for *_, a in rows) + sum(s["fee"] - s["refund"] for s in fees)
    assert doc["total_micros"] == sum(ln["amount_micros"] for ln in doc["lines"]) + doc["subscriptions_total_micros"]
    shown = sum((_shown(ln["amount_text"]) for ln in doc["lines"]), Decimal(0)) + sum(
        (_shown(s["fee_text"]) - _shown(s["refund_text"]) for s in doc["subscriptions"]), Decimal(0)
    )
    assert shown == _shown(doc["total_text"]), (shown, doc["total_text"])
    assert _shown(doc["total_text"]) * 1_000_000 == doc["total_micros"]


@given(st.integers(-(10**15), 10**15))
def test_exact_money_text_round_trips(micros: int) -> None:
    text = fmt_exact(micros)
    assert Decimal(text.replace("¥", "").replace(",", "")) * 1_000_000 == micros
    assert len(text.split(".")[1]) >= 2
