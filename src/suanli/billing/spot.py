"""The spot market now: what a spot bid (``max_price``) is compared with.

The spot price of a model rises linearly from its floor to its cap with the model's
utilisation (``pricebook.GpuPrice.spot``). The rater prices each record at the
utilisation at its period's start; admission (``billing.admission``) and reclaim
(``control.outbid``) ask for it *now*. Both read the same rows the same way and apply
the same rule (``billing.utilisation``), so for one instant billing, scheduling and
reclaim see one utilisation and one price. A bid caps what is charged
(min(spot price, max_price) per record); work whose bid is below the price waits, and
running work is reclaimed with notice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from suanli.billing import utilisation
from suanli.billing.money import fmt_price
from suanli.billing.price_versions import current_book
from suanli.billing.pricebook import PriceBook, PriceBookError
from suanli.billing.store import now_ms


@dataclass
class Market:
    """Per node GPU model: registered and allocated milli at one instant, and the book."""

    book: PriceBook
    at_ms: int
    capacity: dict[str, int]  # milli registered per model
    busy: dict[str, int] = field(default_factory=dict)  # milli allocated per model

    def key(self, model: str) -> str:
        """The node model name for a spelling a renter used (``h100`` -> ``H100``)."""
        if model in self.capacity:
            return model
        low = {m.lower(): m for m in self.capacity}
        return low.get(model.lower(), model)

    def models(self) -> list[str]:
        """Models with registered GPUs: where work that names no model may run."""
        return sorted(m for m, c in self.capacity.items() if c > 0)

    def utilisation(self, model: str, extra_milli: int = 0) -> int:
        """Permille now, with ``extra_milli`` more allocated (a request counted as
        running; negative: work that is leaving)."""
        m = self.key(model)
        return int(utilisation.permille(self.busy.get(m, 0) + extra_milli, self.capacity.get(m, 0)))

    def price(self, model: str, extra_milli: int = 0) -> int | None:
        """Spot price per GPU-hour (micro-units) at that utilisation; None: the book has
        no price for the model (its usage is rated at 0)."""
        try:
            g = self.book.gpu(self.key(model))
        except PriceBookError:
            return None
        return g.spot(self.utilisation(model, extra_milli))

    def text(self, micros: int) -> str:
        """A bid, exact: ``¥1.20``, ``¥0.395``."""
        return fmt_price(micros, self.book.currency)

    def price_text(self, micros: int) -> str:
        """A spot price, rounded up to the cent (so one above a bid never reads as equal)."""
        return fmt_price(micros, self.book.currency, up_to_cents=True)


def market(s: Session, at_ms: int | None = None, busy: bool = True) -> Market:
    """The market at ``at_ms`` (default now), in the caller's session; ``busy=False``
    leaves out what is allocated (read every running allocation's size): enough for
    on-demand and reserved prices, which do not move with utilisation."""
    at = now_ms() if at_ms is None else at_ms
    _, book = current_book(s, at)
    return Market(book, at, utilisation.capacity_milli(s), utilisation.busy_now(s, at) if busy else {})


def demand_milli(request, num_nodes: int) -> int:
    """GPU milli a scheduler ``Request`` holds once placed (every node of a gang)."""
    return (request.gpu_milli or request.gpu_count * 1000) * max(1, num_nodes)


def check_bid(mk: Market, request, num_nodes: int, bid: int) -> tuple[frozenset[str], str | None]:
    """Where a spot request with bid ``bid`` may start now: the models it allows whose
    price, counting the request's own GPUs as allocated (so starting it cannot push the
    price above its bid and get it reclaimed at once), is at most the bid. Returns those
    models and, when there are none, the reason it waits."""
    milli = demand_milli(request, num_nodes)
    cands = sorted(request.gpu_models) or mk.models()
    prices = {m: mk.price(m, milli) for m in cands}
    ok = frozenset(m for m, p in prices.items() if p is None or p <= bid)
    if ok or not cands:
        return ok, None
    if len(cands) == 1:
        (m,) = cands
        return ok, (
            f"spot price {mk.price_text(prices[m])}/GPU-h for {m} is above your max_price {mk.text(bid)} "  # type: ignore[arg-type]
            f"(at {mk.utilisation(m, milli) / 10:g} % utilisation, counting this request); "
            "it starts when the price drops to your max_price"
        )
    each = ", ".join(f"{m} {mk.price_text(p)}" for m, p in sorted(prices.items(), key=lambda kv: kv[1] or 0))  # type: ignore[arg-type]
    return ok, (
        f"spot price is above your max_price {mk.text(bid)} on every model it may run on ({each} per GPU-h, "
        "counting this request); it starts when one drops to your max_price"
    )


def floors(mk: Market, request) -> dict[str, int]:
    """The spot price floor (the price at 0 % utilisation) per GPU-hour of each model
    ``request`` may run on; a bid below all of them never starts. A model the book
    does not price is rated at 0, so its floor is 0."""
    out = {}
    for m in sorted(request.gpu_models) or mk.models():
        try:
            out[mk.key(m)] = mk.book.gpu(mk.key(m)).spot(0)
        except PriceBookError:
            out[mk.key(m)] = 0
    return out


__all__ = ["Market", "check_bid", "demand_milli", "floors", "market"]
