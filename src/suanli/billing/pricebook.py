"""The billing price book: what a tenant pays per GPU model and plan.

Every price is an integer of micro-units (see ``money``): on-demand and spot per
GPU-hour, monthly per GPU-month, reserved per GPU for the whole term, storage per
GiB-month, transfer per GiB. Fractional GPUs pay by milli (rate x milli / 1000).

A book is immutable; an edit (``with_price``) returns a new book, which the store
saves as a new version, so usage rated earlier keeps the price it was rated at.
The bundled default (``data/pricebook.yaml``) holds the seeds' published prices;
plans a seed did not quote are derived with the seed's plan rules and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from suanli import gpu_names
from suanli.billing.money import MICROS, MoneyError, div_half_up, to_decimal, to_micros

PLANS = ("on_demand", "monthly", "reserved", "spot")
PRICE_FIELDS = ("on_demand", "monthly", "reserved", "spot_floor", "spot_cap")
BOOK_FIELDS = ("storage", "storage_stopped", "transfer")


class PriceBookError(ValueError):
    """A price book that is inconsistent or an edit that names nothing known."""


@dataclass(frozen=True)
class GpuPrice:
    model: str
    on_demand: int  # per GPU-hour
    monthly: int  # per GPU-month
    reserved: int  # per GPU for the reserved term, paid up front
    spot_floor: int  # per GPU-hour at zero utilisation
    spot_cap: int  # per GPU-hour at full utilisation
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def spot(self, utilisation_permille: int, max_price: int | None = None) -> int:
        """Spot rises linearly from floor to cap with utilisation; a bid caps what is paid
        (above the bid the scheduler reclaims, it never charges more)."""
        u = min(max(int(utilisation_permille), 0), 1000)
        price = self.spot_floor + div_half_up((self.spot_cap - self.spot_floor) * u, 1000)
        return price if max_price is None else min(price, int(max_price))


@dataclass(frozen=True)
class PriceBook:
    currency: str
    hours_per_month: int
    reserved_term_hours: int
    reserved_discount: Decimal
    spot_notice_minutes: int
    storage: int  # per GiB-month, running instance
    storage_stopped: int  # per GiB-month, stopped instance
    transfer: int  # per GiB
    gpus: dict[str, GpuPrice]
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def gpu(self, model: str) -> GpuPrice:
        key = resolve_model(model, tuple(self.gpus))
        if key is None:
            raise PriceBookError(f"no price for GPU model {model!r}; priced models: {', '.join(sorted(self.gpus))}")
        return self.gpus[key]

    def hourly(self, model: str, plan: str, utilisation_permille: int = 0, max_price: int | None = None) -> int:
        """Per GPU-hour for metered plans; monthly and reserved as their hourly equivalent."""
        g = self.gpu(model)
        if plan == "on_demand":
            return g.on_demand
        if plan == "spot":
            return g.spot(utilisation_permille, max_price)
        if plan == "monthly":
            return div_half_up(g.monthly, self.hours_per_month)
        if plan == "reserved":
            return div_half_up(g.reserved, self.reserved_term_hours)
        raise PriceBookError(f"unknown plan {plan!r}; choose one of {', '.join(PLANS)}")

    def to_dict(self) -> dict[str, Any]:
        """The resolved book (every price explicit) as JSON-able text, for a version row."""
        t = lambda m: f"{to_decimal(m):f}"  # noqa: E731
        return {
            "currency": self.currency,
            "hours_per_month": self.hours_per_month,
            "plan_rules": {
                "reserved_term_hours": self.reserved_term_hours,
                "reserved_discount": str(self.reserved_discount),
                "spot_notice_minutes": self.spot_notice_minutes,
            },
            "storage": {"per_gib_month": t(self.storage), "stopped_per_gib_month": t(self.storage_stopped)},
            "transfer": {"per_gib": t(self.transfer)},
            "sources": dict(self.sources),
            "gpus": [
                {"model": g.model, **{f: t(getattr(g, f)) for f in PRICE_FIELDS}, "sources": dict(g.sources)}
                for g in self.gpus.values()
            ],
        }

    def with_price(self, model: str | None, plan: str, value: str | int | float | Decimal, note: str = "") -> PriceBook:
        """A new book with one price changed (``model`` None for storage/transfer).
        A new model needs ``on_demand`` or ``monthly``; its other plans are derived."""
        plan = plan.replace("-", "_")  # the CLI's spelling (on-demand) is the book's key (on_demand)
        micros = to_micros(value)
        src = note or "set by operator"
        if model is None or plan in BOOK_FIELDS:
            if plan not in BOOK_FIELDS:
                raise PriceBookError(f"a {plan!r} price needs a GPU model; book-wide prices: {', '.join(BOOK_FIELDS)}")
            return replace(self, **{plan: micros}, sources={**self.sources, plan: src})  # type: ignore[arg-type]
        field_ = "spot_floor" if plan == "spot" else plan
        if field_ not in PRICE_FIELDS:
            raise PriceBookError(f"unknown plan {plan!r}; choose one of {', '.join(PRICE_FIELDS + BOOK_FIELDS)}")
        key = resolve_model(model, tuple(self.gpus))
        gpus = dict(self.gpus)
        if key is None:
            if field_ not in ("on_demand", "monthly"):
                raise PriceBookError(f"{model!r} has no prices yet: set its on_demand or monthly price first")
            model = gpu_names.canonical_or_none(model) or model  # one name per GPU: the catalog's
            gpus[model] = _derive(model, {field_: micros}, self._rules(), {field_: src})
        else:
            g = gpus[key]
            new = replace(g, **{field_: micros}, sources={**g.sources, field_: src})  # type: ignore[arg-type]
            if new.spot_floor > new.spot_cap:
                raise PriceBookError(f"spot floor {to_decimal(new.spot_floor)} above spot cap {to_decimal(new.spot_cap)}")
            gpus[key] = new
        return replace(self, gpus=gpus)

    def _rules(self) -> dict[str, Any]:
        return {
            "hpm": self.hours_per_month,
            "term": self.reserved_term_hours,
            "disc": self.reserved_discount,
            "prem": Decimal("0.30"),
            "floor": Decimal("0.20"),
            "cap": Decimal("0.60"),
        }


def resolve_model(name: str, keys: tuple[str, ...]) -> str | None:
    """A node's model name (``H100``, ``RTX4090``) or a renter's (``h100``, ``4090``) to
    the book's key, by the one rule every command uses (``suanli.gpu_names.lookup``:
    exact, spelling-insensitive, then the same catalog row: ``H100`` is the book's
    ``H100 SXM5 80GB``)."""
    return _resolve(name, keys)


@lru_cache(maxsize=4096)
def _resolve(name: str, keys: tuple[str, ...]) -> str | None:
    return gpu_names.lookup(name, keys)


def _ratio(value: Any, what: str) -> Decimal:
    d = Decimal(str(value))
    if not (0 <= d <= 1):
        raise PriceBookError(f"{what} must be between 0 and 1, got {value}")
    return d


def _derive(model: str, given: dict[str, int], r: dict[str, Any], sources: dict[str, str]) -> GpuPrice:
    """Fill missing plans from the seed's rules; each derived price names its rule."""
    src = dict(sources)
    od, mo = given.get("on_demand"), given.get("monthly")
    prem = 1 + r["prem"]
    if od is None and mo is None:
        raise PriceBookError(f"{model}: give on_demand or monthly (or monthly_node with gpus_per_node)")
    if od is None:
        assert mo is not None
        od = int((Decimal(mo) / r["hpm"] * prem).to_integral_value())
        src.setdefault("on_demand", f"derived: monthly / {r['hpm']} h x {prem} (seed 004 on-demand premium)")
    if mo is None:
        mo = int((Decimal(od) * r["hpm"] / prem).to_integral_value())
        src.setdefault("monthly", f"derived: on-demand x {r['hpm']} h / {prem} (seed 004 on-demand premium)")
    res = given.get("reserved")
    if res is None:
        res = int((Decimal(od) * r["term"] * (1 - r["disc"])).to_integral_value())
        src.setdefault("reserved", f"derived: on-demand x {r['term']} h x {1 - r['disc']} (seed 004: 1-year 55 % off)")
    floor = given.get("spot_floor", int((Decimal(od) * r["floor"]).to_integral_value()))
    cap = given.get("spot_cap", int((Decimal(od) * r["cap"]).to_integral_value()))
    src.setdefault("spot_floor", f"derived: on-demand x {r['floor']} (seed 004: spot as low as 20 %)")
    src.setdefault("spot_cap", f"derived: on-demand x {r['cap']} (assumption: spot price at full utilisation)")
    if floor > cap:
        raise PriceBookError(f"{model}: spot floor above spot cap")
    return GpuPrice(model, od, mo, res, floor, cap, src)


def parse(data: dict[str, Any]) -> PriceBook:
    """A book from its YAML/JSON form (the default file or a stored version).
    Raises ``PriceBookError`` naming the bad entry; nothing is half-built."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise PriceBookError("a price book is a mapping with a 'gpus' list")
    try:
        rules = dict(data.get("plan_rules") or {})
        r: dict[str, Any] = {
            "hpm": int(data.get("hours_per_month", 720)),
            "term": int(rules.get("reserved_term_hours", 8760)),
            "disc": _ratio(rules.get("reserved_discount", "0.55"), "reserved_discount"),
            "prem": Decimal(str(rules.get("on_demand_premium_over_monthly", "0.30"))),
            "floor": _ratio(rules.get("spot_floor_ratio", "0.20"), "spot_floor_ratio"),
            "cap": _ratio(rules.get("spot_cap_ratio", "0.60"), "spot_cap_ratio"),
        }
        if r["hpm"] <= 0 or r["term"] <= 0:
            raise PriceBookError("hours_per_month and reserved_term_hours must be positive")
        gpus: dict[str, GpuPrice] = {}
        for e in data["gpus"]:
            model = str(e.get("model") or "").strip()
            if not model:
                raise PriceBookError("every gpus entry needs a model")
            given = {f: to_micros(e[f]) for f in PRICE_FIELDS if e.get(f) is not None}
            if "monthly" not in given and e.get("monthly_node") is not None:
                n = int(e.get("gpus_per_node", 1))
                if n < 1:
                    raise PriceBookError(f"{model}: gpus_per_node must be at least 1")
                given["monthly"] = div_half_up(to_micros(e["monthly_node"]), n)
            srcs = dict(e.get("sources") or {})
            if e.get("source"):
                for f in given:
                    srcs.setdefault(f, str(e["source"]))
            if model in gpus:
                raise PriceBookError(f"{model} is listed twice")
            gpus[model] = _derive(model, given, r, srcs)
        st, tr = data.get("storage") or {}, data.get("transfer") or {}
        sources = dict(data.get("sources") or {})
        for k, sec in (("storage", st), ("transfer", tr)):
            if sec.get("source"):
                sources.setdefault(k, str(sec["source"]))
        return PriceBook(
            currency=str(data.get("currency", "CNY")),
            hours_per_month=r["hpm"],
            reserved_term_hours=r["term"],
            reserved_discount=r["disc"],
            spot_notice_minutes=int(rules.get("spot_notice_minutes", 5)),
            storage=to_micros(st.get("per_gib_month", "0.8")),
            storage_stopped=to_micros(st.get("stopped_per_gib_month", st.get("per_gib_month", "0.8"))),
            transfer=to_micros(tr.get("per_gib", "0.12")),
            gpus=gpus,
            sources=sources,
        )
    except MoneyError as exc:
        raise PriceBookError(f"price book: {exc}") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        if isinstance(exc, PriceBookError):
            raise
        raise PriceBookError(f"price book: {exc}") from None


@lru_cache(maxsize=1)
def default_book() -> PriceBook:
    """The bundled seed prices."""
    text = resources.files("suanli.billing").joinpath("data/pricebook.yaml").read_text("utf-8")
    return parse(yaml.safe_load(text))


def per_hour_text(micros: int) -> str:
    return f"{Decimal(micros) / MICROS:.4f}"
