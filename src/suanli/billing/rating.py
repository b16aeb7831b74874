"""Rating: usage records times prices, vectorised with NumPy. Pure.

Amounts are exact integers of micro-units: ``units x milli x price`` is an exact
int64 product (a record spans at most one rating period, so it cannot overflow)
divided once, half-up, by the unit conversion. Posting the sum of records therefore
posts exactly what the records say, to the micro-unit.

``rate_naive`` is the row-by-row Decimal version: the reference the property tests
compare against and the baseline ``bench/rating_throughput.py`` measures.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from suanli.billing.metering import UNIT_MS
from suanli.billing.pricebook import PLANS, PriceBook, PriceBookError

log = logging.getLogger(__name__)

UNITS_PER_HOUR = 3_600_000 // UNIT_MS  # 600
GPU_DEN = UNITS_PER_HOUR * 1000  # units/h x milli per GPU
COVERED = -1  # plan code of usage a subscription already paid


@dataclass(frozen=True)
class Rated:
    unit_price: np.ndarray  # int64 micro-units per GPU-hour (GPU) or per GiB-month (storage)
    amount: np.ndarray  # int64 micro-units


def _half_up(num: np.ndarray, den: int) -> np.ndarray:
    return (num + den // 2) // den  # amounts are never negative


def price_table(book: PriceBook, models: list[str]) -> np.ndarray:
    """(model, field) matrix: on_demand, monthly-as-hourly, reserved-as-hourly,
    spot floor, spot cap — per GPU-hour, micro-units."""
    out = np.zeros((len(models), 5), dtype=np.int64)
    for i, m in enumerate(models):
        try:
            g = book.gpu(m)
        except PriceBookError:
            if m != "-":  # "-" is the placeholder model of storage/transfer records
                log.warning("no price for GPU model %r: its usage is rated at 0 until the price book has one", m)
            continue
        out[i] = (g.on_demand, book.hourly(m, "monthly"), book.hourly(m, "reserved"), g.spot_floor, g.spot_cap)
    return out


def gpu_prices(
    book: PriceBook,
    models: list[str],
    model_code: np.ndarray,
    plan_code: np.ndarray,
    util_permille: np.ndarray | None = None,
    max_price: np.ndarray | None = None,
) -> np.ndarray:
    """Per-record price per GPU-hour. ``plan_code`` indexes ``PLANS``; ``COVERED``
    (usage under a monthly or reserved subscription) is priced 0. Spot rises from floor
    to cap with utilisation; ``max_price`` (< 0: none) caps it."""
    table = price_table(book, models)
    mc = np.asarray(model_code, dtype=np.int64)
    pc = np.asarray(plan_code, dtype=np.int64)
    price = table[mc, np.clip(pc, 0, 2)]
    spot = pc == PLANS.index("spot")
    if spot.any():
        u = (
            np.zeros(mc.size, dtype=np.int64)
            if util_permille is None
            else np.clip(np.asarray(util_permille, dtype=np.int64), 0, 1000)
        )
        floor, cap = table[mc, 3], table[mc, 4]
        sp = floor + _half_up((cap - floor) * u, 1000)
        if max_price is not None:
            mp = np.asarray(max_price, dtype=np.int64)
            sp = np.where(mp >= 0, np.minimum(sp, mp), sp)
        price = np.where(spot, sp, price)
    return np.where(pc == COVERED, 0, price)


def rate_gpu(units: np.ndarray, milli: np.ndarray, price_per_gpu_hour: np.ndarray) -> Rated:
    """``units`` 6-second units of ``milli`` thousandths of a GPU (8 GPUs = 8000)."""
    u, m, p = (np.asarray(a, dtype=np.int64) for a in (units, milli, price_per_gpu_hour))
    if (u < 0).any() or (m < 0).any() or (p < 0).any():
        raise ValueError("units, milli and prices must be non-negative")
    return Rated(p, _half_up(u * m * p, GPU_DEN))


def rate_storage(units: np.ndarray, gib: np.ndarray, price_per_gib_month: np.ndarray | int, hours_per_month: int) -> Rated:
    u, g = np.asarray(units, dtype=np.int64), np.asarray(gib, dtype=np.int64)
    p = np.broadcast_to(np.asarray(price_per_gib_month, dtype=np.int64), u.shape)
    return Rated(np.array(p), _half_up(u * g * p, UNITS_PER_HOUR * hours_per_month))


def rate_transfer(gib_milli: np.ndarray, price_per_gib: int) -> Rated:
    """Data transfer in thousandths of a GiB."""
    g = np.asarray(gib_milli, dtype=np.int64)
    p = np.full(g.shape, int(price_per_gib), dtype=np.int64)
    return Rated(p, _half_up(g * p, 1000))


# -- the naive reference ------------------------------------------------------------------
def rate_naive(book: PriceBook, records: list[dict]) -> list[int]:
    """Row by row with Decimal: {units, milli, model, plan, util_permille?, max_price?}."""
    out = []
    for r in records:
        plan = r["plan"]
        if plan == "covered":
            price = Decimal(0)
        else:
            price = Decimal(book.hourly(r["model"], plan, r.get("util_permille", 0), r.get("max_price")))
        # seconds x GPUs x price per hour, divided once (a chain of divisions would round
        # at Decimal's 28 digits and could turn an exact .5 into .4999...)
        amount = Decimal(r["units"] * (UNIT_MS // 1000)) * Decimal(r["milli"]) * price / Decimal(3600 * 1000)
        out.append(int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP)))
    return out
