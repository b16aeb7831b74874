"""What each GPU model on this platform costs right now: the one answer every price
shown to a renter comes from (``suanli gpus``, the console's GPUs view, the advisor's
"on this platform" rows, listings' current rate).

An ``Offer`` is per *node* model (the names nodes register, ``H100``), priced through
the current price book (keyed by catalog names, ``H100 SXM5 80GB``; ``PriceBook.gpu``
resolves one to the other) and, for spot, at the model's utilisation now (the rule
admission, reclaim and rating share, ``billing.utilisation``). A model the book does
not price has no offer: its usage is rated at zero, and saying a price for it would lie.
Free capacity is not here: what is free to rent is a placement question (ready nodes,
whole GPUs on one node), answered by the control plane's GPU summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from suanli.billing import spot
from suanli.billing.money import div_half_up
from suanli.billing.pricebook import PriceBookError


@dataclass(frozen=True)
class Offer:
    """Prices in micro-units of ``currency``; ``*_per_hour`` per GPU-hour."""

    model: str  # the node model name
    priced_as: str  # the price book's name for it
    currency: str
    on_demand_per_hour: int
    spot_per_hour: int  # now, at ``utilisation_permille``
    utilisation_permille: int
    monthly_per_month: int  # per GPU, a calendar month of ``hours_per_month``
    monthly_per_hour: int  # the same as an hourly equivalent
    reserved_per_term: int  # per GPU, the whole reserved term, paid up front
    reserved_per_hour: int
    reserved_term_hours: int

    def per_hour(self, plan: str) -> int:
        """Per GPU-hour on ``plan`` (``on_demand``, ``spot``, ``monthly``, ``reserved``)."""
        return {
            "on_demand": self.on_demand_per_hour,
            "spot": self.spot_per_hour,
            "monthly": self.monthly_per_hour,
            "reserved": self.reserved_per_hour,
        }[plan]


def offers(s: Session, at_ms: int | None = None, busy: bool = True) -> dict[str, Offer]:
    """Every registered node model the current book prices, keyed by node model name,
    in the caller's session; reads only. ``busy=False`` skips reading what is allocated
    (``spot.market``): the spot figures are then an idle market's, for callers that
    price no spot work."""
    mk = spot.market(s, at_ms, busy=busy)
    book = mk.book
    out: dict[str, Offer] = {}
    for model in sorted(mk.capacity):
        try:
            g = book.gpu(model)
        except PriceBookError:
            continue
        out[model] = Offer(
            model=model,
            priced_as=g.model,
            currency=book.currency,
            on_demand_per_hour=g.on_demand,
            spot_per_hour=g.spot(mk.utilisation(model)),
            utilisation_permille=mk.utilisation(model),
            monthly_per_month=g.monthly,
            monthly_per_hour=div_half_up(g.monthly, book.hours_per_month),
            reserved_per_term=g.reserved,
            reserved_per_hour=div_half_up(g.reserved, book.reserved_term_hours),
            reserved_term_hours=book.reserved_term_hours,
        )
    return out
