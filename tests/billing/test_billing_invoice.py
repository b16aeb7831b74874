"""Invoices and quotes: pure documents."""

from __future__ import annotations

from suanli.billing import invoice, quote
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
    assert doc["total_text"] == "¥229.21"
    page = invoice.render_html(doc)
    assert "&lt;lab&gt;" in page and "<lab>" not in page and "12.0000 GPU-h" in page and "¥229.21" in page


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
