"""Prepaid means prepaid: may a tenant start work, and must its running work stop?

Every tenant an operator creates pays in advance (``prepaid``): new work starts only
if what the tenant has left covers its first billing unit (6 s of its hourly rate),
and once running work has spent the balance it gets a notice of ``grace_s`` and is
then stopped (the control plane acts: instances stop and keep their disk, jobs are
requeued from their checkpoint). An operator may give a tenant ``credit`` (its balance
may go down to minus the credit limit) or ``postpaid`` terms (no limit; billed by
invoice). The operator's own tenant, created on first start, is post-paid.

"Left" is the balance less what is accruing and not yet rated (``rater.accruing``), so
the rule acts within seconds, not when a rating run posts. Reads only, except
``low_balance_alerts``, which writes billing's own notices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.billing import rater, spot
from suanli.billing.ceiling import ceilings
from suanli.billing.metering import UNIT_MS
from suanli.billing.money import as_text, fmt, fmt_price
from suanli.billing.price_versions import current_book
from suanli.billing.quote import quote
from suanli.billing.store import balances, now_ms
from suanli.billing.tables import Notice, TermsRow
from suanli.billing.terms import Terms, terms_of

log = logging.getLogger(__name__)

T = TypeVar("T")


def first_unit(per_hour: int) -> int:
    """The charge for one billing unit at ``per_hour`` micro-units an hour, rounded up."""
    return -(-per_hour * UNIT_MS // 3_600_000)


def refusal(terms: Terms, bal: int, accruing: int, per_hour: int, currency: str) -> str | None:
    """Why new work at ``per_hour`` may not start under ``terms``, or None. Pure."""
    left = terms.left(bal, accruing)
    need = first_unit(per_hour)
    if left is None or need == 0 or left >= need:
        return None
    owed = f" after {fmt_price(accruing, currency)} accruing" if accruing > 0 else ""
    credit = f" plus credit {fmt(terms.credit_limit, currency)}" if terms.terms == "credit" else ""
    return (
        f"prepaid balance {fmt(bal, currency)}{credit} leaves {fmt(left, currency)}{owed}; this work costs "
        f"{fmt(per_hour, currency)}/h, its first {UNIT_MS // 1000}-second unit {fmt_price(need, currency)}: "
        "ask an operator to top up (suanli topup TENANT AMOUNT)"
    )


def figures(s: Session, tenant_id: int, at_ms: int) -> tuple[int, int]:
    """(balance, accruing) of a tenant at ``at_ms``: what every rule here compares."""
    return figures_many(s, [tenant_id], at_ms)[tenant_id]


def figures_many(s: Session, tenant_ids: Iterable[int], at_ms: int) -> dict[int, tuple[int, int]]:
    """``figures`` of many tenants, from one reading of their balances and one of their
    work (``rater.accruing_many``)."""
    ids = sorted(set(tenant_ids))
    bal, acc = balances(s, ids), rater.accruing_many(s, ids, at_ms)
    return {t: (bal[t], acc[t].total) for t in ids}


class Figures:
    """The figures of some tenants, read only as exactly as each rule needs. Every rule
    here asks whether balance less accruing is above some amount, and less accruing can
    only leave more: a tenant that passes with a ceiling of its accruing (``ceiling``,
    three sums) passes with the exact figure too. The exact figures (a rating pass, for
    all the tenants at once) are read only when a ceiling fails a rule. Why: a create
    and every control-loop pass ask, and the rating pass was most of a create's CPU."""

    def __init__(self, s: Session, tenant_ids: Iterable[int], at_ms: int) -> None:
        self._s, self._ids, self._at = s, sorted(set(tenant_ids)), at_ms
        self._balance = balances(s, self._ids)
        try:
            self._ceiling = ceilings(s, self._ids, at_ms)
        except Exception:  # odd data must not stop the rules: they are judged on the exact figures
            log.exception("funds: cannot read the tenants' ceilings; judging on the exact figures")
            self._ceiling = {}
        self._exact: dict[int, tuple[int, int]] | None = None

    def judge(self, tenant_id: int, rule: Callable[[int, int], T | None]) -> T | None:
        """``rule(balance, accruing)`` on the exact figures. ``rule`` answers None for a
        tenant with enough left, and may answer otherwise only as accruing grows."""
        top = self._ceiling.get(tenant_id)
        if top is not None and rule(self._balance[tenant_id], top) is None:
            return None
        return rule(*self.exact(tenant_id))

    def exact(self, tenant_id: int) -> tuple[int, int]:
        """(balance, accruing), exact: one rating pass for all the tenants, the first time
        one is asked for; one tenant's odd data must not keep the others unread, so if
        that pass fails, each tenant is read alone."""
        if self._exact is None:
            try:
                self._exact = figures_many(self._s, self._ids, self._at)
            except Exception:
                log.exception("funds: cannot read the tenants' figures together; reading them one by one")
                self._exact = {}
        if tenant_id not in self._exact:
            self._exact[tenant_id] = figures(self._s, tenant_id, self._at)
        return self._exact[tenant_id]


def per_hour(
    s: Session, request: Any, num_nodes: int, disk_gib: int = 0, bid: int | None = None, market: spot.Market | None = None
) -> int:
    """The most ``request`` (a scheduler Request) can cost an hour wherever it may land:
    its GPUs at the current price book (spot at the market now, capped by the bid)
    plus its disk. Pass ``market`` to price many requests against one reading."""
    mk = market or spot.market(s, busy=request.priority.value == "spot")
    models = sorted(request.gpu_models) or mk.models()
    milli = spot.demand_milli(request, num_nodes)
    lines = quote(
        mk.book,
        models,
        request.gpu_count,
        request.gpu_milli,
        num_nodes,
        request.priority.value,
        None,
        disk_gib,
        None if bid is None else as_text(bid),
        utilisation={m: mk.utilisation(m, milli) for m in models},
    )
    return max((q.per_hour for q in lines), default=0)


def start_refusal(s: Session, tenant_id: int, cost_per_hour: int, at_ms: int | None = None) -> str | None:
    """Why this tenant may not start new work costing ``cost_per_hour``, or None."""
    at = now_ms() if at_ms is None else at_ms
    terms = terms_of(s, [tenant_id])[tenant_id]
    if terms.terms == "postpaid":
        return None
    currency = current_book(s, at)[1].currency
    return Figures(s, [tenant_id], at).judge(tenant_id, partial(refusal, terms, per_hour=cost_per_hour, currency=currency))


@dataclass(frozen=True)
class Shortfall:
    tenant_id: int
    reason: str
    grace_s: int


def out_of_funds(s: Session, tenant_ids: Iterable[int], at_ms: int | None = None) -> list[Shortfall]:
    """Tenants among ``tenant_ids`` (those with running work) whose prepaid balance (or
    credit) is spent, running work counted. A tenant whose figures cannot be read is
    logged and skipped: one tenant's odd data must not lift everyone's limit."""
    at = now_ms() if at_ms is None else at_ms
    prepaid = {tid: terms for tid, terms in terms_of(s, tenant_ids).items() if terms.terms != "postpaid"}
    if not prepaid:
        return []
    currency = current_book(s, at)[1].currency
    figs = Figures(s, prepaid, at)
    out = []
    for tid, terms in sorted(prepaid.items()):
        try:
            short = figs.judge(tid, partial(_spent, terms, currency))
        except Exception:
            log.exception("funds: cannot read tenant %s's balance; skipped this pass", tid)
            continue
        if short is not None:
            out.append(short)
    return out


def _spent(terms: Terms, currency: str, bal: int, acc: int) -> Shortfall | None:
    """The tenant's shortfall if its prepaid balance (or credit) is spent, else None."""
    left = terms.left(bal, acc)
    if left is None or left > 0:
        return None
    why = f"prepaid balance spent ({fmt(bal, currency)}, {fmt(acc, currency)} accruing); "
    return Shortfall(terms.tenant_id, why + f"top up within {terms.grace_s} s or running work stops", terms.grace_s)


def _low(threshold: int, currency: str, bal: int, acc: int) -> str | None:
    """The low-balance alert if what is left is below ``threshold``, else None."""
    left = bal - acc
    if left >= threshold:
        return None
    return f"balance low: {fmt(left, currency)} left, below your alert at {fmt(threshold, currency)}"


def low_balance_alerts(s: Session, at_ms: int | None = None) -> list[str]:
    """One alert each time a tenant's remaining funds drop below its threshold (re-armed
    once they are above it again); writes billing notices, returns them as text."""
    at = now_ms() if at_ms is None else at_ms
    currency = current_book(s, at)[1].currency
    rows = list(s.scalars(select(TermsRow).where(TermsRow.low_balance_micros.is_not(None)).order_by(TermsRow.tenant_id)))
    figs = Figures(s, [row.tenant_id for row in rows], at)
    actions = []
    for row in rows:
        try:
            message = figs.judge(row.tenant_id, partial(_low, row.low_balance_micros or 0, currency))
        except Exception:
            log.exception("low balance: cannot read tenant %s's balance; skipped this pass", row.tenant_id)
            continue
        if message is not None and not row.low_alerted:
            s.add(Notice(tenant_id=row.tenant_id, kind="alert", message=message))
            actions.append(f"tenant {row.tenant_id}: low balance")
        row.low_alerted = message is not None
    return actions


def terms_doc(s: Session, tenant_id: int, at_ms: int | None = None, read: tuple[int, int] | None = None) -> dict:
    """A tenant's terms and what it has left, as the API shows them; ``read``: its
    ``figures`` at ``at_ms`` where the caller read them already (the bill)."""
    at = now_ms() if at_ms is None else at_ms
    t = terms_of(s, [tenant_id])[tenant_id]
    currency = current_book(s, at)[1].currency
    bal, acc = read if read is not None else figures(s, tenant_id, at)
    left = t.left(bal, acc)
    money = lambda m: None if m is None else float(as_text(m))  # noqa: E731
    return {
        "tenant_id": tenant_id,
        "terms": t.terms,
        "credit_limit": money(t.credit_limit),
        "grace_s": t.grace_s,
        "low_balance": money(t.low_balance),
        "storage_debt_limit": money(t.storage_debt_limit),
        "balance": money(bal),
        "accruing": money(acc),
        "left": money(left),
        "left_text": "no limit (post-paid)" if left is None else fmt(left, currency),
        "currency": currency,
    }
