"""What a tenant has spent this month, and what its budget decides about it.

``apply_budgets`` runs after rating (the control plane's billing worker calls it):
for every tenant with a budget it raises each threshold alert once a month, gives
the hard-cap notice and, once the notice has run out, decides to stop the tenant.
It writes only billing tables (budget rows, notices) and *returns* the tenants to
stop: stopping them is the control plane's act (``control.admission.enforce_budgets``).
``capped`` is the same hard-cap rule for admission: tenants whose new work is held.

Budgets count work still running (``rater.accruing``), not only rated records, so a
cap acts within a rating interval rather than when the hour closes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli.billing import budgets, rater
from suanli.billing.price_versions import current_book
from suanli.billing.store import balance, now_ms
from suanli.billing.tables import BudgetRow, Notice, Subscription, Usage
from suanli.db.session import Database

log = logging.getLogger(__name__)


@dataclass
class BudgetRun:
    """What one pass over the budgets decided: ``actions`` as text (alerts, notices,
    stops) and the tenants whose running work must stop."""

    actions: list[str] = field(default_factory=list)
    stop: list[int] = field(default_factory=list)


def spent_this_month(s: Session, tenant_id: int, at_ms: int) -> int:
    start = budgets.month_start_ms(at_ms)
    usage = s.scalar(
        select(func.coalesce(func.sum(Usage.amount), 0)).where(Usage.tenant_id == tenant_id, Usage.period_ms >= start)
    )
    subs = s.scalar(
        select(func.coalesce(func.sum(Subscription.fee - Subscription.refund), 0)).where(
            Subscription.tenant_id == tenant_id, Subscription.start_ms >= start
        )
    )
    return int(usage or 0) + int(subs or 0)


def _budget(row: BudgetRow) -> budgets.Budget:
    return budgets.Budget(row.tenant_id, row.limit_micros, tuple(row.thresholds or ()), row.hard_cap, row.notice_s)


def apply_budgets(db: Database, at_ms: int | None = None) -> BudgetRun:
    """Alerts for thresholds crossed; notice, then a stop decision, for hard-capped
    tenants out of money. Stops nothing itself."""
    at = now_ms() if at_ms is None else at_ms
    out = BudgetRun()
    with db.sessions() as s:
        tenants = list(s.scalars(select(BudgetRow.tenant_id)))
    # work running now counts before it is rated: a cap must not wait for the hour to close
    pending: dict[int, int] = {}
    for t in tenants:
        try:
            pending[t] = rater.accruing(db, t, at)
        except Exception:  # one tenant's odd data must not switch off every other cap
            log.exception("budgets: cannot read tenant %s's accruing usage; its budget is skipped this pass", t)
    with db.transaction() as s:
        currency = current_book(s)[1].currency
        for row in s.scalars(
            select(BudgetRow).order_by(BudgetRow.tenant_id).with_for_update()
        ):  # one alert per threshold, even with concurrent runs
            if row.tenant_id not in pending:
                continue
            period = budgets.period_of(at)
            if row.period != period:
                row.period, row.alerted = period, []
            b = _budget(row)
            extra = pending[row.tenant_id]
            spent, bal = spent_this_month(s, row.tenant_id, at) + extra, balance(s, row.tenant_id) - extra
            for t in budgets.alerts_due(b, spent, row.alerted or []):
                s.add(
                    Notice(
                        tenant_id=row.tenant_id,
                        kind="alert",
                        message=f"{t} % of the monthly budget used ({spent * 100 // max(b.limit or 1, 1)} %)",
                    )
                )
                row.alerted = sorted([*(row.alerted or []), t])
                out.actions.append(f"tenant {row.tenant_id}: alert {t} %")
            act = budgets.cap_action(b, spent, bal, row.notice_since_ms, at, currency)
            if act.action == "ok":
                row.notice_since_ms = None
            elif act.action == "notice" and row.notice_since_ms is None:
                row.notice_since_ms = at
                s.add(Notice(tenant_id=row.tenant_id, kind="notice", message=act.reason))
                out.actions.append(f"tenant {row.tenant_id}: notice")
            elif act.action == "stop":
                out.stop.append(row.tenant_id)
                s.add(Notice(tenant_id=row.tenant_id, kind="stopped", message=act.reason))
                out.actions.append(f"tenant {row.tenant_id}: stop")
    return out


def capped(s: Session, tenant_ids: Iterable[int], at_ms: int) -> dict[int, str]:
    """Hard-capped tenants among ``tenant_ids`` whose budget or balance is spent
    (running work counted), with the reason; in the caller's session."""
    out: dict[int, str] = {}
    ids = set(tenant_ids)
    for row in s.scalars(select(BudgetRow).where(BudgetRow.tenant_id.in_(ids), BudgetRow.hard_cap.is_(True))):
        try:
            extra = rater.accruing(None, row.tenant_id, at_ms, session=s)
        except Exception:  # fail closed for this tenant only: a cap that cannot be read holds
            log.exception("hard cap: cannot read tenant %s's accruing usage", row.tenant_id)
            out[row.tenant_id] = "the hard cap's figures cannot be read now; new work waits"
            continue
        why = budgets.exhausted(
            _budget(row), spent_this_month(s, row.tenant_id, at_ms) + extra, balance(s, row.tenant_id) - extra
        )
        if why:
            out[row.tenant_id] = why
    return out
