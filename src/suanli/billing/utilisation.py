"""Spot utilisation: the one rule for "how busy is a GPU model".

Utilisation = GPU milli of the model allocated at an instant over the milli of every
registered GPU of that model (any node state), in permille, rounded down, at most
1000; a model with no registered GPUs counts as full. The spot price rises with it
(``pricebook.GpuPrice.spot``).

Three users, one rule and one reading of the rows: the rater prices each spot record
at the utilisation at its period start (``per_period``); admission and reclaim compare
bids with the price at the utilisation *now* (``busy_now``, through ``spot.market``).
So for one instant billing, scheduling and reclaim see one figure.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from suanli.billing.intervals import Intervals
from suanli.billing.store import ms_to_dt
from suanli.db.kept import kept
from suanli.db.models import Allocation, Node


def permille(busy_milli: np.ndarray | int, capacity_milli: int) -> np.ndarray | int:
    """Allocated milli over the model's registered milli, in permille, rounded down,
    at most 1000; a model with no registered GPUs counts as full."""
    if capacity_milli <= 0:
        return np.full(np.shape(busy_milli), 1000, dtype=np.int64) if np.ndim(busy_milli) else 1000
    out = np.minimum(1000, np.maximum(np.asarray(busy_milli, dtype=np.int64), 0) * 1000 // capacity_milli)
    return out if np.ndim(out) else int(out)


def busy_milli(iv: Intervals, model: int, at: np.ndarray) -> np.ndarray:
    """GPU milli of model ``model`` allocated at each instant of ``at``: intervals started
    by t minus intervals ended by t, from sorted cumulative sums."""
    mine = iv.model_code == model
    starts, ends = iv.start_ms[mine], iv.end_ms[mine]
    so, eo = np.argsort(starts), np.argsort(ends)
    cs = np.concatenate([[0], np.cumsum(iv.milli[mine][so])])
    ce = np.concatenate([[0], np.cumsum(iv.milli[mine][eo])])
    return cs[np.searchsorted(starts[so], at, side="right")] - ce[np.searchsorted(ends[eo], at, side="right")]


def per_period(iv: Intervals, capacity: dict[int, int], model_code: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Permille of each model's GPUs allocated at each period start (spot rating);
    ``capacity`` is registered milli per model code."""
    out = np.zeros(model_code.size, dtype=np.int64)
    for m in np.unique(model_code):
        cap = capacity.get(int(m), 0)
        want = model_code == m
        if not cap:
            out[want] = 1000
            continue
        p, back = np.unique(period[want], return_inverse=True)  # a few distinct period starts
        out[want] = np.asarray(permille(busy_milli(iv, int(m), p), cap))[back]
    return out


def capacity_milli(s: Session) -> dict[str, int]:
    """GPU milli registered per node model (every node, whatever its state): the
    denominator of spot utilisation. Kept while the catalog is unchanged (``db.kept``)."""
    return dict(kept(s, "capacity_milli", _capacity_milli))


def _capacity_milli(s: Session) -> MappingProxyType[str, int]:
    caps: dict[str, int] = {}
    for m, c in s.execute(select(Node.gpu_model, Node.gpu_count)):
        caps[m] = caps.get(m, 0) + int(c) * 1000
    return MappingProxyType(caps)


def busy_now(s: Session, at_ms: int) -> dict[str, int]:
    """GPU milli allocated per node model at ``at_ms``: what ``busy_milli`` counts at that
    instant (held from its start up to, not including, its end), summed by the database.
    Every renter's listing asks it (the spot rate now), so it must not read every
    allocation on the platform; to the millisecond it is the rater's count."""
    at = ms_to_dt(at_ms)
    milli = func.json_array_length(Allocation.gpu_indices) * Allocation.milli_per_gpu
    rows = s.execute(
        select(Allocation.gpu_model, func.sum(milli))
        .where(Allocation.started_at <= at, or_(Allocation.ended_at.is_(None), Allocation.ended_at > at))
        .group_by(Allocation.gpu_model)
    )
    return {m: int(n) for m, n in rows if m != "-" and n}
