"""Budgets: alert thresholds and the optional hard cap. Pure.

A budget is per tenant and per calendar month (UTC). Crossing a threshold (a
percentage of the monthly limit) raises one alert per threshold per month. With
``hard_cap`` on, a tenant whose budget or prepaid balance has run out first gets a
notice, and its instances are stopped (jobs cancelled) once ``notice_s`` has passed
without a top-up or a higher budget; new work is refused meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from suanli.billing.money import fmt


@dataclass(frozen=True)
class Budget:
    tenant_id: int
    limit: int | None  # micro-units per month; None: alerts off, balance-only cap
    thresholds: tuple[int, ...] = (50, 80, 100)
    hard_cap: bool = False
    notice_s: int = 300  # seed 004's spot notice, reused as the grace period


@dataclass(frozen=True)
class CapAction:
    action: str  # ok | notice | stop
    reason: str = ""


def period_of(ms: int) -> str:
    """The budget month of an instant: ``2026-11``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m")


def month_start_ms(ms: int) -> int:
    d = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return int(datetime(d.year, d.month, 1, tzinfo=UTC).timestamp() * 1000)


def alerts_due(budget: Budget, spent: int, alerted: Sequence[int]) -> list[int]:
    """Thresholds newly crossed by ``spent`` this month (each alerts once)."""
    if not budget.limit:
        return []
    pct = spent * 100 / budget.limit
    return [t for t in sorted(budget.thresholds) if pct >= t and t not in alerted]


def exhausted(budget: Budget, spent: int, balance: int, currency: str = "CNY") -> str | None:
    """Why the tenant is out of money, or None."""
    if balance <= 0:
        return f"prepaid balance is {fmt(balance, currency)}"
    if budget.limit is not None and spent >= budget.limit:
        return f"monthly budget {fmt(budget.limit, currency)} is spent ({fmt(spent, currency)})"
    return None


def cap_action(
    budget: Budget, spent: int, balance: int, notice_since_ms: int | None, now_ms: int, currency: str = "CNY"
) -> CapAction:
    """What the hard cap does now: nothing, give notice, or stop the tenant's work."""
    why = exhausted(budget, spent, balance, currency)
    if not budget.hard_cap or why is None:
        return CapAction("ok")
    if notice_since_ms is None:
        return CapAction("notice", f"{why}: instances stop in {budget.notice_s} s unless topped up")
    if now_ms - notice_since_ms >= budget.notice_s * 1000:
        return CapAction("stop", f"{why}: stopped by the hard cap after {budget.notice_s} s notice")
    left = budget.notice_s - (now_ms - notice_since_ms) // 1000
    return CapAction("notice", f"{why}: instances stop in {left} s unless topped up")
