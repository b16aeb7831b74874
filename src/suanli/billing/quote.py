"""What a request will cost before anything starts (``suanli launch --dry-run``,
``suanli quote``). Pure: a price book, the request, a duration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from suanli.billing.money import as_text, div_half_up, fmt, fmt_price, to_micros
from suanli.billing.pricebook import PriceBook, PriceBookError

PLAN_OF_PRIORITY = {"on-demand": "on_demand", "spot": "spot", "reserved": "on_demand"}


@dataclass(frozen=True)
class QuoteLine:
    gpu_model: str
    plan: str
    gpus: float
    per_hour: int  # micro-units per hour, GPUs + storage
    total: int | None  # for max_hours
    per_hour_text: str
    total_text: str | None
    note: str = ""


def quote(
    book: PriceBook,
    models: list[str],
    gpu_count: int,
    gpu_milli: int,
    num_nodes: int,
    priority: str,
    max_hours: float | None,
    disk_gib: int = 0,
    max_price: str | None = None,
    utilisation_permille: int = 0,
    utilisation: Mapping[str, int] | None = None,
) -> list[QuoteLine]:
    """One line per candidate model (the request's, or every priced model offered).
    Spot is priced at ``utilisation[model]`` (permille, the request counted as running;
    ``utilisation_permille`` for models it does not name) and capped by the bid."""
    milli = (gpu_milli or gpu_count * 1000) * max(1, num_nodes)
    plan = PLAN_OF_PRIORITY.get(priority, "on_demand")
    bid = None if max_price is None else to_micros(max_price)
    out = []
    for m in models:
        try:
            g = book.gpu(m)
        except PriceBookError:
            continue
        u = (utilisation or {}).get(m, utilisation_permille)
        rate = g.spot(u, bid) if plan == "spot" else g.on_demand
        per_hour = div_half_up(rate * milli, 1000) + div_half_up(book.storage * disk_gib, book.hours_per_month)
        total = None if max_hours is None else int(round(per_hour * max_hours))
        note = ""
        if priority == "reserved":
            note = "reserved work is free under a reserved/monthly subscription for this model; else billed on demand"
        if plan == "spot":
            now = g.spot(u)
            note = (
                f"spot: {fmt(g.spot_floor, book.currency)}..{fmt(g.spot_cap, book.currency)}/GPU-h with utilisation, "
                f"{fmt_price(now, book.currency, up_to_cents=True)} "
                + (
                    f"now ({u / 10:g} % utilisation, counting this request)"
                    if utilisation and m in utilisation
                    else f"at {u / 10:g} %"
                )
            )
            if bid is not None:
                note += (
                    f"; above max_price {fmt_price(bid, book.currency)}: it would wait until the price drops"
                    if now > bid
                    else f", capped by max_price {fmt_price(bid, book.currency)}"
                )
        out.append(
            QuoteLine(
                g.model if m == g.model else f"{m} ({g.model})",
                "reserved" if priority == "reserved" else plan,
                milli / 1000,
                per_hour,
                total,
                fmt(per_hour, book.currency),
                None if total is None else fmt(total, book.currency),
                note,
            )
        )
    return sorted(out, key=lambda q: q.per_hour)


def as_json(lines: list[QuoteLine], currency: str) -> list[dict]:
    return [
        {
            **asdict(q),
            "currency": currency,
            "per_hour_amount": float(as_text(q.per_hour)),
            "total_amount": None if q.total is None else float(as_text(q.total)),
        }
        for q in lines
    ]


__all__ = ["QuoteLine", "as_json", "quote"]
