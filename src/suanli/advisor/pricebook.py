"""Price book: offers (provider x GPU x plan) in one currency per GPU-hour, with sources.

The default ``data/pricebook.yaml`` holds the prices the seed articles publish. Sources
quote different units (per GPU-hour, per 8-GPU node-month, in USD), so loading converts
every quote to currency per GPU-hour. Where a provider quotes one plan only, the other
plans are derived with the book's ``plan_rules`` (seed 004's +30 % on-demand premium,
55 % reserved discount, spot at 20 % of on-demand) and marked ``derived`` so nobody
mistakes them for quotes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from suanli.advisor.catalog import find_gpu
from suanli.advisor.errors import AdvisorError

PLANS = ("on_demand", "monthly", "reserved", "spot")
UNIT_HOURS = {"gpu_hour": 1.0, "gpu_month": None, "node_hour": 1.0, "node_month": None}


@dataclass(frozen=True)
class Offer:
    """One price, normalised to currency per GPU-hour."""

    provider: str
    gpu: str  # catalog name
    plan: str
    price_per_gpu_hour: float
    source: str
    derived: bool = False
    instance: str = ""
    quoted: str = ""  # the price as the source wrote it
    gpus_per_unit: int = 1  # sold only in whole units (an 8-GPU bare-metal node)


@dataclass(frozen=True)
class PlanRules:
    """How plans relate when a source quotes only one, and spot's interruption model."""

    on_demand_premium_over_monthly: float = 0.30
    reserved_discount: float = 0.55
    reserved_term_hours: float = 8760.0
    spot_ratio: float = 0.20
    spot_notice_minutes: float = 5.0
    spot_interruptions_per_gpu_hour: float = 0.01
    checkpoint_interval_hours: float = 1.0
    restart_hours: float = 0.25
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PriceBook:
    currency: str
    hours_per_month: float
    rules: PlanRules
    offers: tuple[Offer, ...]

    def for_gpu(self, gpu_name: str, plan: str | None = None) -> list[Offer]:
        """Offers for one catalog GPU (optionally one plan), cheapest first."""
        hits = [o for o in self.offers if o.gpu == gpu_name and (plan is None or o.plan == plan)]
        return sorted(hits, key=lambda o: (o.price_per_gpu_hour, o.derived))

    def cheapest(self, gpu_name: str, plan: str) -> Offer | None:
        hits = self.for_gpu(gpu_name, plan)
        quoted = [o for o in hits if not o.derived]
        best = quoted or hits
        return best[0] if best else None


def _per_gpu_hour(entry: dict[str, Any], hours_per_month: float, fx: dict[str, float]) -> float:
    unit = entry.get("unit", "gpu_hour")
    if unit not in UNIT_HOURS:
        raise AdvisorError(f"price book: unknown unit {unit!r} for {entry.get('provider')!r}")
    price = float(entry["price"])
    if price < 0:
        raise AdvisorError(f"price book: negative price {price} for {entry.get('provider')!r}")
    per_unit_gpus = float(entry.get("gpus_per_unit", 1)) if unit.startswith("node") else 1.0
    hours = hours_per_month if unit.endswith("month") else 1.0
    currency = entry.get("currency")
    rate = fx.get(currency, None) if currency else 1.0
    if rate is None:
        raise AdvisorError(f"price book: no exchange rate for currency {currency!r}")
    return price * rate / per_unit_gpus / hours


def parse_pricebook(data: dict[str, Any]) -> PriceBook:
    """Build a PriceBook from the YAML structure (see data/pricebook.yaml)."""
    if not isinstance(data, dict) or "offers" not in data:
        raise AdvisorError("price book must be a mapping with an 'offers' list")
    currency = str(data.get("currency", "CNY"))
    hpm = float(data.get("hours_per_month", 720))
    fx = {str(k): float(v) for k, v in (data.get("fx_to_currency") or {currency: 1.0}).items()}
    fx.setdefault(currency, 1.0)
    raw_rules = dict(data.get("plan_rules") or {})
    sources = {k: str(v) for k, v in raw_rules.items() if k.endswith("_source")}
    known = PlanRules.__dataclass_fields__
    rules = PlanRules(**{k: float(v) for k, v in raw_rules.items() if k in known and k != "sources"}, sources=sources)
    quoted: list[Offer] = []
    for entry in data["offers"]:
        plan = entry.get("plan")
        if plan not in PLANS:
            raise AdvisorError(f"price book: unknown plan {plan!r}; choose one of {', '.join(PLANS)}")
        gpu = find_gpu(str(entry["gpu"])).name
        quoted.append(
            Offer(
                provider=str(entry["provider"]),
                gpu=gpu,
                plan=plan,
                price_per_gpu_hour=_per_gpu_hour(entry, hpm, fx),
                source=str(entry.get("source", "")),
                instance=str(entry.get("instance", "")),
                quoted=f"{entry['price']} {entry.get('currency', currency)}/{entry.get('unit', 'gpu_hour')}",
                gpus_per_unit=int(entry.get("gpus_per_unit", 1)) if str(entry.get("unit", "")).startswith("node") else 1,
            )
        )
    return PriceBook(currency=currency, hours_per_month=hpm, rules=rules, offers=tuple(quoted + derive_offers(quoted, rules)))


def derive_offers(quoted: list[Offer], rules: PlanRules) -> list[Offer]:
    """Fill the plans a provider did not quote, from the plan rules (marked derived)."""
    out: list[Offer] = []
    groups: dict[tuple[str, str], dict[str, Offer]] = {}
    for o in quoted:
        groups.setdefault((o.provider, o.gpu), {})[o.plan] = o
    prem = 1 + rules.on_demand_premium_over_monthly
    for (provider, gpu), plans in groups.items():
        od = plans.get("on_demand")
        od_rate = od.price_per_gpu_hour if od else None
        if od_rate is None and "monthly" in plans:
            od_rate = plans["monthly"].price_per_gpu_hour * prem
            out.append(
                Offer(
                    provider,
                    gpu,
                    "on_demand",
                    od_rate,
                    derived=True,
                    source=f"derived: monthly x {prem:.2f} (seed 004 on-demand premium)",
                )
            )
        if od_rate is None:  # only a spot quote: nothing to derive from
            continue
        if "monthly" not in plans:
            out.append(
                Offer(
                    provider,
                    gpu,
                    "monthly",
                    od_rate / prem,
                    derived=True,
                    source=f"derived: on-demand / {prem:.2f} (seed 004 on-demand premium)",
                )
            )
        if "reserved" not in plans:
            out.append(
                Offer(
                    provider,
                    gpu,
                    "reserved",
                    od_rate * (1 - rules.reserved_discount),
                    derived=True,
                    source=f"derived: on-demand x {1 - rules.reserved_discount:.2f} (seed 004: 1-year reserved 55 % off)",
                )
            )
        if "spot" not in plans:
            out.append(
                Offer(
                    provider,
                    gpu,
                    "spot",
                    od_rate * rules.spot_ratio,
                    derived=True,
                    source=f"derived: on-demand x {rules.spot_ratio:.2f} (seed 004: spot as low as 20 % of on-demand)",
                )
            )
    return out


@lru_cache(maxsize=1)
def default_pricebook() -> PriceBook:
    """The bundled price book (seed prices)."""
    text = resources.files("suanli.advisor").joinpath("data/pricebook.yaml").read_text("utf-8")
    return parse_pricebook(yaml.safe_load(text))


def load_pricebook(path: str | Path | None = None) -> PriceBook:
    """A price book from a YAML file, or the bundled default when ``path`` is None."""
    if path is None:
        return default_pricebook()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text("utf-8"))
    except FileNotFoundError:
        raise AdvisorError(f"price book not found: {str(p)!r}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise AdvisorError(f"cannot read price book {str(p)!r}: {exc}") from None
    return parse_pricebook(data)
