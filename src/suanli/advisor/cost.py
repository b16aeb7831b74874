"""Cost of a configuration across offers and plans.

Billing per plan (price book rules, from seed 004 unless said otherwise):

* on-demand: per GPU-hour used;
* monthly: whole months of ``hours_per_month`` (720 h) per GPU, used or not; offers sold
  as 8-GPU bare-metal nodes bill whole nodes;
* reserved: 1-year term at 45 % of on-demand, refundable pro rata (seed 004: 支持随时
  退订, 按剩余期限退款), so billed per hour held;
* spot: per hour at the spot price, plus expected re-work after reclaims. A gang of n GPUs
  is reclaimed at n x the per-GPU rate, and every reclaim costs half a checkpoint interval
  of lost work plus a restart: overhead = n x rate x (interval / 2 + restart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from suanli.advisor.catalog import find_gpu
from suanli.advisor.errors import AdvisorError, require_positive
from suanli.advisor.pricebook import PLANS, PlanRules, PriceBook


@dataclass(frozen=True)
class CostLine:
    """What one offer would charge for ``gpus`` GPUs over ``hours`` of work."""

    provider: str
    gpu: str
    gpus: int
    plan: str
    rate_per_gpu_hour: float
    effective_rate_per_gpu_hour: float  # spot: including expected re-work
    billed_gpu_hours: float
    total: float
    currency: str
    derived: bool
    source: str
    note: str = ""


def spot_overhead(rules: PlanRules, gpus: int) -> float:
    """Expected extra work fraction on spot for a gang of ``gpus`` GPUs."""
    require_positive("gpus", gpus)
    lost_per_reclaim = rules.checkpoint_interval_hours / 2 + rules.restart_hours
    return rules.spot_interruptions_per_gpu_hour * gpus * lost_per_reclaim


def cost_options(book: PriceBook, gpu: str, gpus: int, hours: float, plans: tuple[str, ...] = PLANS) -> list[CostLine]:
    """Every offer for ``gpu`` priced for ``gpus`` GPUs over ``hours`` hours, cheapest first."""
    require_positive("gpus", gpus)
    require_positive("hours", hours)
    for plan in plans:
        if plan not in PLANS:
            raise AdvisorError(f"unknown plan {plan!r}; choose one of: {', '.join(PLANS)}")
    name = find_gpu(gpu).name
    lines: list[CostLine] = []
    hpm = book.hours_per_month
    for offer in book.for_gpu(name):
        if offer.plan not in plans:
            continue
        rate = offer.price_per_gpu_hour
        effective, billed, note = rate, hours, ""
        unit = offer.gpus_per_unit
        billed_gpus = math.ceil(gpus / unit) * unit  # bare-metal nodes are rented whole
        if offer.plan == "monthly":
            months = math.ceil(hours / hpm)
            billed = months * hpm
            note = f"{months} whole month(s) of {hpm:g} h"
        elif offer.plan == "reserved":
            note = "1-year term, refundable pro rata (seed 004)"
        elif offer.plan == "spot":
            overhead = spot_overhead(book.rules, gpus)
            effective = rate * (1 + overhead)
            billed = hours * (1 + overhead)
            note = f"+{overhead:.0%} expected re-work after reclaims"
            if overhead >= 0.5:
                note += "; too many GPUs in one gang for spot"
        if billed_gpus != gpus:
            note = "; ".join(x for x in (note, f"sold in {unit}-GPU nodes: {billed_gpus} GPUs billed") if x)
        lines.append(
            CostLine(
                provider=offer.provider,
                gpu=name,
                gpus=gpus,
                plan=offer.plan,
                rate_per_gpu_hour=rate,
                effective_rate_per_gpu_hour=effective,
                billed_gpu_hours=billed * billed_gpus,
                total=rate * billed * billed_gpus,
                currency=book.currency,
                derived=offer.derived,
                source=offer.source,
                note=note,
            )
        )
    return sorted(lines, key=lambda c: (c.total, c.derived))


def best_per_plan(lines: list[CostLine]) -> dict[str, CostLine]:
    """Cheapest line of each plan, preferring quoted prices over derived ones at a tie."""
    best: dict[str, CostLine] = {}
    for line in lines:
        if line.plan not in best or (line.total, line.derived) < (best[line.plan].total, best[line.plan].derived):
            best[line.plan] = line
    return best
