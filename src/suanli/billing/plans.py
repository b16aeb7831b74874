"""Subscription arithmetic for monthly (包月) and one-year reserved plans. Pure.

Monthly: paid per GPU-month up front; cancelling stops the renewal, the paid month
runs out (no refund). Reserved: the whole term paid up front at the reserved price
(seed 004: about 55 % off on-demand); cancelling refunds the unused part of the term
pro rata to the millisecond (seed 004: 支持随时退订（按剩余期限退款）).
Usage of GPUs a subscription covers is rated at zero: the fee already paid for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.billing.pricebook import PriceBook

HOUR_MS = 3_600_000


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class Quote:
    plan: str
    gpu_model: str
    gpu_count: int
    start_ms: int
    end_ms: int
    fee: int  # micro-units, paid up front


def subscribe(book: PriceBook, plan: str, model: str, gpu_count: int, start_ms: int, months: int = 1) -> Quote:
    if gpu_count < 1:
        raise PlanError("a subscription covers at least one GPU")
    g = book.gpu(model)
    if plan == "monthly":
        if months < 1:
            raise PlanError("months must be at least 1")
        hours = book.hours_per_month * months
        return Quote(plan, g.model, gpu_count, start_ms, start_ms + hours * HOUR_MS, g.monthly * gpu_count * months)
    if plan == "reserved":
        return Quote(plan, g.model, gpu_count, start_ms, start_ms + book.reserved_term_hours * HOUR_MS, g.reserved * gpu_count)
    raise PlanError(f"subscriptions are monthly or reserved, not {plan!r}")


def refund(plan: str, fee: int, start_ms: int, end_ms: int, cancel_ms: int) -> int:
    """What cancelling at ``cancel_ms`` gives back: reserved pro rata, half-up; monthly 0."""
    if plan == "monthly":
        return 0
    if plan != "reserved":
        raise PlanError(f"unknown subscription plan {plan!r}")
    term = end_ms - start_ms
    if term <= 0:
        raise PlanError("empty term")
    left = min(max(end_ms - max(cancel_ms, start_ms), 0), term)
    return (fee * left + term // 2) // term


def cover(start: np.ndarray, end: np.ndarray, milli: np.ndarray, order: np.ndarray, capacity: int) -> np.ndarray:
    """Which reserved-priority pieces a subscription of ``capacity`` milli-GPUs pays for.

    Greedy, earliest first (by ``order``): a piece is covered if its GPUs plus those of
    every covered piece overlapping it fit the capacity; the rest is billed on demand.
    Conservative: overlapping pieces are summed, not their peak. Deterministic as far
    as billing needs: a piece's decision depends only on pieces that started before it,
    and learning an earlier piece's end can only free capacity, never take it."""
    n = start.size
    covered = np.zeros(n, dtype=bool)
    for k in np.argsort(order, kind="stable"):
        load = milli[covered & (start < end[k]) & (end > start[k])].sum()
        covered[k] = load + milli[k] <= capacity
    return covered


def on_demand_equivalent(book: PriceBook, model: str, gpu_count: int, hours: float) -> int:
    """What the same GPU-hours would cost on demand (for comparisons in quotes)."""
    return int(round(book.gpu(model).on_demand * gpu_count * hours))
