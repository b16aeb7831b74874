"""Rent versus build: cost per used GPU-hour of an owned cluster, and the break-even
utilisation against a rental price.

    annual cost      = (GPU + server/network capex) x (1 - residual) / years
                       + facility & power per year + operations staff per year
    build cost/GPU-h = annual cost / (GPUs x 8,760 h x utilisation)
    break-even util  = annual cost / (GPUs x 8,760 h x rent price per GPU-hour)

Defaults are seed 003's 256 x H100 example, at the midpoints of its ranges: GPUs 50-60 M
CNY, servers and network 8-12 M, facility and power 3-5 M a year, operations 2-3 M a
year, 3-year depreciation, 60 % utilisation, against 84,480 CNY per 8-GPU node-month
(14.67 CNY per GPU-hour). Those line items total 84.5 M CNY over three years, inside the
seed's 80-100 M.

The seed's "12-15 CNY per GPU-hour at 60 %" and "renting wins below 60 %" only follow
if the hardware keeps value after three years; the seed itself says it has not counted
the residual-value risk (这还没有算上GPU过时带来的残值风险). The default therefore
assumes a 40 % resale value, which gives 14.5 CNY/GPU-h and a 59 % break-even; with no
resale value the same line items give 20.9 CNY/GPU-h and an 85 % break-even. The result
carries both, so nobody has to trust the assumption blindly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from suanli.advisor.catalog import find_gpu
from suanli.advisor.errors import AdvisorError, require_fraction, require_positive
from suanli.advisor.pricebook import PriceBook, default_pricebook

HOURS_PER_YEAR = 8760.0
SEED003_GPUS = 256

#: Purchase prices per GPU (currency of the default price book). Only seed 003 gives one.
GPU_PURCHASE_PRICE: dict[str, tuple[float, str]] = {
    "H100 SXM5 80GB": (55e6 / SEED003_GPUS, "seed 003: H100 80G x 256 约5,000-6,000万 (midpoint)"),
}


@dataclass(frozen=True)
class TCOAssumptions:
    """Everything the build side costs; per-GPU figures scale seed 003's 256-GPU totals."""

    gpus: int = SEED003_GPUS
    gpu_model: str = "H100 SXM5 80GB"
    gpu_price: float | None = None  # per GPU; None: from GPU_PURCHASE_PRICE
    servers_network_per_gpu: float = 10e6 / SEED003_GPUS  # seed 003: 800-1,200万
    facility_power_per_gpu_year: float = 4e6 / SEED003_GPUS  # seed 003: 300-500万/年 (300 kW)
    operations_per_gpu_year: float = 2.5e6 / SEED003_GPUS  # seed 003: 200-300万/年, 3-5 engineers
    depreciation_years: float = 3.0  # seed 003: GPU折旧(3年)
    residual_fraction: float = 0.40  # assumption: resale value left after depreciation_years
    utilization: float = 0.60  # seed 003: 年均利用率在60%左右
    rent_per_gpu_hour: float | None = None  # None: cheapest monthly quote in the price book


@dataclass(frozen=True)
class TCOResult:
    """Rent-versus-build answer; per-GPU-hour components sum to build_cost_per_gpu_hour."""

    gpus: int
    gpu_model: str
    currency: str
    utilization: float
    build_cost_per_gpu_hour: float
    rent_cost_per_gpu_hour: float
    break_even_utilization: float
    cheaper: str  # "rent" or "build" at the given utilisation
    annual_cost: float
    capex: float
    total_cost_of_ownership: float  # capex + opex over the depreciation years, before resale
    resale_value: float
    components_per_gpu_hour: dict[str, float]
    assumptions: dict[str, float | str | None]
    sources: dict[str, str]
    sensitivity: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rent_price(model: str, book: PriceBook) -> tuple[float, str]:
    offer = book.cheapest(model, "monthly") or book.cheapest(model, "on_demand")
    if offer is None:
        raise AdvisorError(f"no rental price for {model} in the price book; pass --rent-price")
    return offer.price_per_gpu_hour, f"{offer.provider} {offer.plan}: {offer.source}"


def _annual(a: TCOAssumptions, gpu_price: float) -> tuple[float, float, dict[str, float]]:
    capex_gpu = a.gpus * gpu_price
    capex_srv = a.gpus * a.servers_network_per_gpu
    keep = 1 - a.residual_fraction
    parts = {
        "gpu_depreciation": capex_gpu * keep / a.depreciation_years,
        "servers_network_depreciation": capex_srv * keep / a.depreciation_years,
        "facility_power": a.gpus * a.facility_power_per_gpu_year,
        "operations": a.gpus * a.operations_per_gpu_year,
    }
    return sum(parts.values()), capex_gpu + capex_srv, parts


def compute_tco(assumptions: TCOAssumptions | None = None, book: PriceBook | None = None) -> TCOResult:
    """Build cost per used GPU-hour, rent price and break-even utilisation."""
    a = assumptions or TCOAssumptions()
    book = book or default_pricebook()
    require_positive("gpus", a.gpus)
    require_positive("depreciation_years", a.depreciation_years)
    require_fraction("utilization", a.utilization, allow_zero=False)
    require_fraction("residual_fraction", a.residual_fraction)
    for name in ("servers_network_per_gpu", "facility_power_per_gpu_year", "operations_per_gpu_year"):
        require_positive(name, getattr(a, name), allow_zero=True)
    model = find_gpu(a.gpu_model).name
    a = replace(a, gpu_model=model)
    sources = {
        "capex, facility, operations, depreciation, utilisation": "seed 003 第一步 cost table (midpoints)",
        "residual_fraction": "assumption reconciling seed 003's 12-15 CNY/GPU-h at 60 %",
    }
    if a.gpu_price is None:
        if model not in GPU_PURCHASE_PRICE:
            raise AdvisorError(f"no purchase price known for {model}; pass --gpu-price")
        gpu_price, sources["gpu_price"] = GPU_PURCHASE_PRICE[model]
    else:
        require_positive("gpu_price", a.gpu_price)
        gpu_price, sources["gpu_price"] = a.gpu_price, "given"
    if a.rent_per_gpu_hour is None:
        rent, sources["rent_per_gpu_hour"] = _rent_price(model, book)
    else:
        require_positive("rent_per_gpu_hour", a.rent_per_gpu_hour)
        rent, sources["rent_per_gpu_hour"] = a.rent_per_gpu_hour, "given"

    annual, capex, parts = _annual(a, gpu_price)
    used_hours = a.gpus * HOURS_PER_YEAR * a.utilization
    build = annual / used_hours
    break_even = annual / (a.gpus * HOURS_PER_YEAR * rent)
    sensitivity = []
    for residual in (0.0, 0.2, 0.4):
        for util in (0.3, 0.6, 0.9):
            ann, _, _ = _annual(replace(a, residual_fraction=residual), gpu_price)
            sensitivity.append(
                {
                    "residual_fraction": residual,
                    "utilization": util,
                    "build_cost_per_gpu_hour": ann / (a.gpus * HOURS_PER_YEAR * util),
                    "break_even_utilization": ann / (a.gpus * HOURS_PER_YEAR * rent),
                }
            )
    notes = []
    if break_even > 1:
        notes.append("building never beats this rental price, even at 100 % utilisation")
    gpu_only = a.gpus * gpu_price / a.depreciation_years / used_hours
    notes.append(
        f"GPU depreciation alone with no resale value: {gpu_only:.1f} {book.currency}/GPU-h (what seed 003's 12-15 figure counts)"
    )
    return TCOResult(
        gpus=a.gpus,
        gpu_model=model,
        currency=book.currency,
        utilization=a.utilization,
        build_cost_per_gpu_hour=build,
        rent_cost_per_gpu_hour=rent,
        break_even_utilization=break_even,
        cheaper="rent" if rent < build else "build",
        annual_cost=annual,
        capex=capex,
        total_cost_of_ownership=capex + a.depreciation_years * (parts["facility_power"] + parts["operations"]),
        resale_value=capex * a.residual_fraction,
        components_per_gpu_hour={k: v / used_hours for k, v in parts.items()},
        assumptions={
            "gpu_price": gpu_price,
            "servers_network_per_gpu": a.servers_network_per_gpu,
            "facility_power_per_gpu_year": a.facility_power_per_gpu_year,
            "operations_per_gpu_year": a.operations_per_gpu_year,
            "depreciation_years": a.depreciation_years,
            "residual_fraction": a.residual_fraction,
            "utilization": a.utilization,
            "hours_per_year": HOURS_PER_YEAR,
        },
        sources=sources,
        sensitivity=sensitivity,
        notes=notes,
    )
