"""Purchase plan: reserved + monthly + on-demand + spot GPUs to cover a demand profile.

Optimal mode is a mixed-integer linear programme solved by HiGHS (scipy.optimize.milp):

    minimise   R·c_r·T + Σ_k M_k·c_m·H_k + Σ_t o_t·c_o + Σ_t s_t·c_s·(1 + overhead)
    subject to R + M_k(t) + o_t + s_t >= d_t            (cover every hour's demand)
               s_t <= tolerance · d_t                   (interruption tolerance)
               R, M_k integer >= 0; o_t, s_t >= 0

R = reserved GPUs held for the whole period (T hours), M_k = monthly GPUs in 720-h
block k (billed for the whole block), o_t and s_t = on-demand and spot GPUs in hour t.
Spot's price carries the expected re-work after reclaims (cost.spot_overhead).

Simple mode is seed 004's decision tree, applied to each GPU "slot" k = 1..peak: a slot
busy more than 16 h a day on average is reserved; otherwise, if the workload must scale
at any time, it runs on on-demand + spot (spot up to the tolerance), else on spot alone.

Both report the saving against running all demand on on-demand.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from suanli.advisor.catalog import find_gpu
from suanli.advisor.cost import spot_overhead
from suanli.advisor.errors import AdvisorError, require_fraction, require_positive
from suanli.advisor.pricebook import PriceBook, default_pricebook


@dataclass(frozen=True)
class PlanPrices:
    """Per GPU-hour prices of one provider, with where each came from."""

    provider: str
    gpu: str
    on_demand: float
    monthly: float
    reserved: float
    spot: float
    spot_overhead: float
    sources: dict[str, str]


@dataclass(frozen=True)
class PurchasePlan:
    mode: str
    gpu: str
    provider: str
    currency: str
    hours: int
    peak_gpus: float
    mean_gpus: float
    reserved_gpus: int
    monthly_gpus: list[int]  # per 720-h block
    on_demand_gpu_hours: float
    spot_gpu_hours: float
    cost: dict[str, float]  # by plan
    total_cost: float
    all_on_demand_cost: float
    saving_fraction: float
    interruption_tolerance: float
    prices: PlanPrices
    notes: list[str] = field(default_factory=list)


def read_demand_csv(text: str) -> np.ndarray:
    """GPUs needed per hour from CSV text: a ``gpus`` column, or the last column."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise AdvisorError("demand CSV is empty")
    header = [c.strip().lower() for c in rows[0]]
    col = header.index("gpus") if "gpus" in header else len(header) - 1
    body = rows[1:] if not _is_number(rows[0][col]) else rows
    values = []
    for i, r in enumerate(body, start=2 if body is not rows else 1):
        try:
            v = float(r[col])
        except (ValueError, IndexError):
            raise AdvisorError(f"demand CSV line {i}: {r[col] if col < len(r) else ''!r} is not a number of GPUs") from None
        if v < 0 or math.isnan(v):
            raise AdvisorError(f"demand CSV line {i}: GPUs must be >= 0, got {v!r}")
        values.append(v)
    if not values:
        raise AdvisorError("demand CSV has a header but no rows")
    return np.asarray(values, dtype=float)


def load_demand(path: str | Path) -> np.ndarray:
    try:
        return read_demand_csv(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise AdvisorError(f"demand file not found: {str(path)!r}") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def plan_prices(book: PriceBook, gpu: str, provider: str | None = None, gang_size: int = 8) -> PlanPrices:
    """One provider's four plan prices for ``gpu`` (quoted where possible, else derived).
    Without ``provider``: the provider quoting the most plans, first listed on a tie."""
    name = find_gpu(gpu).name
    offers = book.for_gpu(name)
    if not offers:
        raise AdvisorError(f"no offers for {name} in the price book")
    providers = list(dict.fromkeys(o.provider for o in book.offers if o.gpu == name))
    if provider is None:
        provider = max(
            providers, key=lambda p: (sum(1 for o in offers if o.provider == p and not o.derived), -providers.index(p))
        )
    elif provider not in providers:
        raise AdvisorError(f"provider {provider!r} has no {name} offers; choose one of: {', '.join(providers)}")
    mine = {o.plan: o for o in sorted(offers, key=lambda o: o.derived, reverse=True) if o.provider == provider}
    missing = [p for p in ("on_demand", "monthly", "reserved", "spot") if p not in mine]
    if missing:
        raise AdvisorError(f"{provider} lacks {', '.join(missing)} prices for {name}")
    return PlanPrices(
        provider=provider,
        gpu=name,
        on_demand=mine["on_demand"].price_per_gpu_hour,
        monthly=mine["monthly"].price_per_gpu_hour,
        reserved=mine["reserved"].price_per_gpu_hour,
        spot=mine["spot"].price_per_gpu_hour,
        spot_overhead=spot_overhead(book.rules, gang_size),
        sources={p: o.source for p, o in mine.items()},
    )


def _result(
    mode: str,
    demand: np.ndarray,
    prices: PlanPrices,
    book: PriceBook,
    reserved: int,
    monthly: list[int],
    od: np.ndarray,
    spot: np.ndarray,
    tolerance: float,
    notes: list[str],
) -> PurchasePlan:
    hpm = int(book.hours_per_month)
    block_hours = [min(hpm, len(demand) - k * hpm) for k in range(len(monthly))]
    cost = {
        "reserved": reserved * prices.reserved * len(demand),
        "monthly": sum(m * prices.monthly * hpm for m in monthly),
        "on_demand": float(od.sum()) * prices.on_demand,
        "spot": float(spot.sum()) * prices.spot * (1 + prices.spot_overhead),
    }
    total = sum(cost.values())
    baseline = float(demand.sum()) * prices.on_demand
    if any(h < hpm for h in block_hours) and any(monthly):
        notes.append("the last month is partial but billed in full")
    return PurchasePlan(
        mode=mode,
        gpu=prices.gpu,
        provider=prices.provider,
        currency=book.currency,
        hours=len(demand),
        peak_gpus=float(demand.max()),
        mean_gpus=float(demand.mean()),
        reserved_gpus=reserved,
        monthly_gpus=monthly,
        on_demand_gpu_hours=float(od.sum()),
        spot_gpu_hours=float(spot.sum()),
        cost=cost,
        total_cost=total,
        all_on_demand_cost=baseline,
        saving_fraction=(1 - total / baseline) if baseline else 0.0,
        interruption_tolerance=tolerance,
        prices=prices,
        notes=notes,
    )


def optimal_plan(
    demand: np.ndarray, prices: PlanPrices, book: PriceBook | None = None, tolerance: float = 0.5, use_monthly: bool = True
) -> PurchasePlan:
    """Cheapest expected mix (MILP, HiGHS); ``tolerance`` = share of each hour's demand
    that may run on interruptible spot GPUs."""
    book = book or default_pricebook()
    require_fraction("interruption tolerance", tolerance)
    d = np.asarray(demand, dtype=float)
    if d.size == 0 or np.any(d < 0):
        raise AdvisorError("demand must be a non-empty list of GPU counts >= 0")
    T, hpm = d.size, int(book.hours_per_month)
    K = math.ceil(T / hpm) if use_monthly else 0
    # Variable order: R, M_0..M_{K-1}, o_0..o_{T-1}, s_0..s_{T-1}
    n = 1 + K + 2 * T
    c = np.concatenate(
        [
            [prices.reserved * T],
            np.full(K, prices.monthly * hpm),
            np.full(T, prices.on_demand),
            np.full(T, prices.spot * (1 + prices.spot_overhead)),
        ]
    )
    # Sparse constraint matrices: a year of hours is 8,760 rows x 17,500 columns.
    t_idx = np.arange(T)
    rows = np.concatenate([t_idx, t_idx, t_idx] + ([t_idx] if K else []))
    cols = np.concatenate([np.zeros(T, dtype=int), 1 + K + t_idx, 1 + K + T + t_idx] + ([1 + t_idx // hpm] if K else []))
    from scipy import sparse  # imported here: SciPy costs every CLI start 0.3 s otherwise
    from scipy.optimize import Bounds, LinearConstraint, milp

    cover = sparse.csr_array((np.ones(rows.size), (rows, cols)), shape=(T, n))
    spot_cap = sparse.csr_array((np.ones(T), (t_idx, 1 + K + T + t_idx)), shape=(T, n))
    constraints = [LinearConstraint(cover, lb=d, ub=np.inf), LinearConstraint(spot_cap, lb=0, ub=tolerance * d)]
    integrality = np.concatenate([np.ones(1 + K), np.zeros(2 * T)])
    # mip_rel_gap 0: HiGHS otherwise stops within 0.01 % of the bound, and "optimal" then
    # came out above the decision tree's plan (demand [0, 1, 1, 2]: 52.07979 > 52.07971)
    res = milp(
        c,
        constraints=constraints,
        integrality=integrality,
        bounds=Bounds(np.zeros(n), np.full(n, np.inf)),
        options={"mip_rel_gap": 0},
    )
    if not res.success:
        raise AdvisorError(f"purchase plan optimisation failed: {res.message}")
    x = res.x
    reserved = int(round(x[0]))
    monthly = [int(round(v)) for v in x[1 : 1 + K]]
    od = np.clip(x[1 + K : 1 + K + T], 0, None)
    spot = np.clip(x[1 + K + T :], 0, None)
    return _result(
        "optimal", d, prices, book, reserved, monthly, od, spot, tolerance, [f"MILP solved by HiGHS: {T} hours, {n} variables"]
    )


def decision_tree_plan(
    demand: np.ndarray, prices: PlanPrices, book: PriceBook | None = None, tolerance: float = 0.5, needs_elastic: bool = True
) -> PurchasePlan:
    """Seed 004's tree per GPU slot: >16 h/day busy -> reserved; else elastic ->
    on-demand + spot (spot up to ``tolerance``); else spot only."""
    book = book or default_pricebook()
    require_fraction("interruption tolerance", tolerance)
    d = np.asarray(demand, dtype=float)
    if d.size == 0 or np.any(d < 0):
        raise AdvisorError("demand must be a non-empty list of GPU counts >= 0")
    peak = int(math.ceil(d.max()))
    reserved = 0
    for k in range(1, peak + 1):
        busy = np.clip(d - (k - 1), 0, 1)  # share of slot k used each hour
        if busy.mean() * 24 > 16:
            reserved = k
        else:
            break
    rest = np.clip(d - reserved, 0, None)
    if needs_elastic:
        spot = np.minimum(rest, tolerance * d)
        od = rest - spot
    else:
        spot, od = rest, np.zeros_like(rest)
    notes = [
        f"seed 004 decision tree: {reserved} slot(s) busy > 16 h/day -> reserved; "
        f"rest -> {'on-demand + spot' if needs_elastic else 'spot only'}"
    ]
    return _result("decision-tree", d, prices, book, reserved, [], od, spot, tolerance, notes)


def mix_saving(
    reserved_share: float = 0.3,
    spot_share: float = 0.5,
    on_demand_share: float = 0.2,
    reserved_discount: float = 0.55,
    spot_ratio: float = 0.2,
) -> float:
    """Saving of a fixed capacity mix against all on-demand (seed 004's "30 % reserved +
    50 % spot + 20 % on-demand" case): 1 - (0.3 x 0.45 + 0.5 x 0.2 + 0.2) = 56.5 %,
    more than the seed's 42 %, which needs spot at ~49 % of on-demand once re-work and
    price swings are counted."""
    for name, v in (("reserved_share", reserved_share), ("spot_share", spot_share), ("on_demand_share", on_demand_share)):
        require_positive(name, v, allow_zero=True)
    if abs(reserved_share + spot_share + on_demand_share - 1) > 1e-9:
        raise AdvisorError("reserved, spot and on-demand shares must sum to 1")
    relative = reserved_share * (1 - reserved_discount) + spot_share * spot_ratio + on_demand_share
    return 1 - relative
