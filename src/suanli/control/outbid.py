"""Outbid: running spot work whose bid (``max_price``) is below the current spot
price of the model it runs on (``billing.spot``: the price the rater uses, at the
utilisation now) gets a notice, lowest bid first, and only as many as it takes:
work already under notice counts as gone, so reclaiming one bidder can bring the
price back under the next one's bid. A notice is final, as on AWS.
"""

from __future__ import annotations

from sqlalchemy import select

from suanli.backends.base import Handle
from suanli.billing import spot
from suanli.control import workloads
from suanli.control.notice import notice_of, notify
from suanli.control.plane import Plane
from suanli.db.models import Allocation
from suanli.scheduler import PriorityClass


def outbid(plane: Plane) -> list[tuple[str, int]]:
    """Notice running spot work whose bid is below the current spot price of a model
    it runs on; lowest bid first (newest first among equal bids), and once noticed
    its GPUs count as gone for the bids after it."""
    spot_class = PriorityClass.SPOT.value
    with plane.db.transaction() as s:
        active = list(s.scalars(select(Allocation).where(Allocation.ended_at.is_(None), Allocation.priority == spot_class)))
        if all(a.max_price_micros is None for a in active):  # the bid is copied onto each slot (capacity.take)
            return []
        owned: dict[tuple[str, int], list[tuple[str, int, float]]] = {}
        for a in active:
            owned.setdefault(workloads.owner_of(a), []).append(
                (a.gpu_model, len(a.gpu_indices) * a.milli_per_gpu, a.started_at.timestamp())
            )
        mk = spot.market(s)
        cands = []
        for (kind, wid), allocs in owned.items():
            row = workloads.get(s, kind, wid)
            if row is None or row.state != "running" or not row.handles:
                continue
            if notice_of(row) is not None:  # leaving already: its GPUs do not set the price
                for m, milli, _ in allocs:
                    mk.busy[m] = mk.busy.get(m, 0) - milli
            elif row.max_price_micros is not None:
                cands.append(
                    (
                        row.max_price_micros,
                        -max(t for _, _, t in allocs),
                        kind,
                        wid,
                        allocs,
                        [Handle.from_json(h) for h in row.handles],
                    )
                )
    told: list[tuple[str, int]] = []
    for bid, _, kind, wid, allocs, handles in sorted(cands, key=lambda c: c[:4]):
        over = [(m, p) for m in sorted({m for m, _, _ in allocs}) if (p := mk.price(m)) is not None and p > bid]
        if not over:
            continue
        m, p = over[0]
        why = (
            f"spot price {mk.price_text(p)}/GPU-h for {m} is above max_price {mk.text(bid)} "
            f"(at {mk.utilisation(m) / 10:g} % utilisation)"
        )
        if notify(plane, kind, wid, handles, "price", m, why=why):
            told.append((kind, wid))
            for am, milli, _ in allocs:
                mk.busy[am] = mk.busy.get(am, 0) - milli
    return told
