"""Billing reads for the API: usage records, the bill, invoices, quotes."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from suanli.billing import funds, invoice, ledger, rater
from suanli.billing.budgets import month_start_ms, period_of
from suanli.billing.money import as_text, fmt, fmt_exact
from suanli.billing.price_versions import current_book, versions
from suanli.billing.spending import spent_this_month
from suanli.billing.store import BillingError, balance, ms_to_dt, now_ms
from suanli.billing.tables import BudgetRow, LedgerEntry, Notice, Posting, PriceVersion, Subscription, Usage
from suanli.db.models import Node, Tenant
from suanli.db.session import Database


def iso(ms: int) -> str:
    return ms_to_dt(ms).isoformat().replace("+00:00", "Z")


def usage_out(u: Usage) -> dict:
    return {
        "workload_kind": u.workload_kind if u.kind != "transfer" else None,
        "workload_id": u.workload_id if u.kind != "transfer" else None,
        "kind": u.kind,
        "gpu_model": None if u.gpu_model == "-" else u.gpu_model,
        "plan": u.plan if u.kind == "gpu" else u.kind,
        "started_at": iso(u.start_ms),
        "ended_at": iso(u.end_ms),
        "period_start": iso(u.period_ms),
        "billed_seconds": u.billed_seconds,
        "quantity": u.quantity,
        "quantity_unit": {"gpu": "milli-GPU", "storage": "GiB", "transfer": "milli-GiB"}[u.kind],
        "unit_price": float(as_text(u.unit_price)),
        "amount": float(as_text(u.amount)),
        "amount_micros": u.amount,
        "waived": float(as_text(u.waived)),  # storage past the debt limit, not charged
        "currency": u.currency,
        "price_version": u.price_version,
        "tenant_id": u.tenant_id,
        "source_id": u.source_id,
    }


def usage(
    db: Database, tenant_id: int | None, since_ms: int | None = None, until_ms: int | None = None, limit: int = 1000
) -> list[dict]:
    with db.sessions() as s:
        q = select(Usage).order_by(Usage.period_ms.desc(), Usage.kind, Usage.source_id).limit(limit)
        if tenant_id is not None:
            q = q.where(Usage.tenant_id == tenant_id)
        if since_ms is not None:
            q = q.where(Usage.period_ms >= since_ms)
        if until_ms is not None:
            q = q.where(Usage.period_ms < until_ms)
        return [usage_out(u) for u in s.scalars(q)]


def bill(db: Database, tenant_id: int, at_ms: int | None = None) -> dict:
    at = now_ms() if at_ms is None else at_ms
    start = month_start_ms(at)
    with db.transaction() as s:
        _, book = current_book(s)
        t = s.get(Tenant, tenant_id)
        rows = s.execute(
            select(Usage.kind, Usage.gpu_model, Usage.plan, func.sum(Usage.billed_seconds), func.sum(Usage.amount))
            .where(Usage.tenant_id == tenant_id, Usage.period_ms >= start)
            .group_by(Usage.kind, Usage.gpu_model, Usage.plan)
        ).all()
        subs = s.execute(
            select(func.coalesce(func.sum(Subscription.fee - Subscription.refund), 0)).where(
                Subscription.tenant_id == tenant_id, Subscription.start_ms >= start
            )
        ).scalar()
        bal = balance(s, tenant_id)
        spent = spent_this_month(s, tenant_id, at)
        acc = rater.accruing_parts(None, tenant_id, at, session=s)
        # what it has left, from the same figures at the same instant as the bill shows them
        terms = funds.terms_doc(s, tenant_id, at, (bal, acc.total))
        b = s.get(BudgetRow, tenant_id)
        notices = [
            {"kind": n.kind, "message": n.message, "at": n.created_at.isoformat()}
            for n in s.scalars(select(Notice).where(Notice.tenant_id == tenant_id).order_by(Notice.id.desc()).limit(10))
        ]
    c = book.currency
    return {
        "tenant_id": tenant_id,
        "tenant": t.name if t else None,
        "currency": c,
        "period": period_of(at),
        "balance": float(as_text(bal)),
        "balance_micros": bal,
        "balance_text": fmt(bal, c),
        "charges": [
            {
                "kind": k,
                "gpu_model": None if m == "-" else m,
                "plan": p if k == "gpu" else k,
                "billed_seconds": int(sec),
                "amount": float(as_text(int(a))),
                "amount_micros": int(a),
                "amount_text": fmt_exact(int(a), c),
            }
            for k, m, p, sec, a in rows
        ],
        "subscriptions_micros": int(subs or 0),
        # running work as if it stopped now; ended work whose record is not posted yet
        # (a run posts it moments after the end) is shown apart, never as accruing
        "accruing_micros": acc.running,
        "accruing": float(as_text(acc.running)),
        "accruing_text": fmt(acc.running, c),
        "ended_unrated_micros": acc.ended,
        "ended_unrated_text": fmt(acc.ended, c),
        "current_period_total": float(as_text(spent)),
        "current_period_total_micros": spent,
        "current_period_total_text": fmt_exact(spent, c),  # the charges (and fees) add up to it as shown
        "budget": None
        if b is None
        else {
            "limit": None if b.limit_micros is None else float(as_text(b.limit_micros)),
            "thresholds": b.thresholds,
            "hard_cap": b.hard_cap,
            "notice_s": b.notice_s,
            "alerted": b.alerted if b.period == period_of(at) else [],
        },
        "notices": notices,
        "terms": terms,
    }


def invoice_doc(db: Database, tenant_id: int, month: str) -> dict:
    try:
        d = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise BillingError(f"month: expected YYYY-MM, got {month!r}") from None
    start = int(d.timestamp() * 1000)
    nxt = month_start_ms(start + 32 * 86_400_000)
    with db.transaction() as s:
        _, book = current_book(s)
        t = s.get(Tenant, tenant_id)
        rows = s.execute(
            select(
                Usage.kind, Usage.gpu_model, Usage.plan, Usage.quantity, Usage.billed_seconds, Usage.amount, Usage.waived
            ).where(Usage.tenant_id == tenant_id, Usage.period_ms >= start, Usage.period_ms < nxt)
        ).all()
        subs = [
            {"id": r.id, "plan": r.plan, "gpu_model": r.gpu_model, "gpu_count": r.gpu_count, "fee": r.fee, "refund": r.refund}
            for r in s.scalars(
                select(Subscription).where(
                    Subscription.tenant_id == tenant_id, Subscription.start_ms >= start, Subscription.start_ms < nxt
                )
            )
        ]
        pays = [
            {"date": e.created_at.date().isoformat(), "memo": e.memo, "amount": -int(p.amount)}
            for e, p in s.execute(
                select(LedgerEntry, Posting)
                .join(Posting, Posting.entry_id == LedgerEntry.id)
                .where(
                    LedgerEntry.kind == "topup",
                    LedgerEntry.tenant_id == tenant_id,
                    Posting.account == ledger.prepaid(tenant_id),
                    LedgerEntry.created_at >= ms_to_dt(start),
                    LedgerEntry.created_at < ms_to_dt(nxt),
                )
            )
        ]
        bal = balance(s, tenant_id)
    lines = invoice.usage_lines([(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows])
    waived = sum(int(r[6]) for r in rows)
    who = {"id": tenant_id, "name": t.name if t else str(tenant_id)}
    return invoice.build(who, month, book.currency, lines, subs, pays, bal, waived)


def price_list(db: Database) -> dict:
    with db.transaction() as s:
        vid, book = current_book(s)
        versions(s)  # makes sure version 1 exists
        hist = [
            {
                "version": r.id,
                "effective_at": iso(r.effective_ms),
                # version 1 is effective from the epoch on purpose (usage of any age has a
                # price); ``since_start`` says so, ``created_at`` when it was written
                "since_start": r.effective_ms == 0,
                "created_at": r.created_at.isoformat(timespec="seconds").replace("+00:00", "Z") if r.created_at else None,
                "author": r.author,
                "note": r.note,
            }
            for r in s.scalars(select(PriceVersion).order_by(PriceVersion.id))
        ]
    return {"version": vid, "book": book.to_dict(), "versions": hist}


def offered_models(db: Database) -> list[str]:
    with db.sessions() as s:
        return sorted(set(s.scalars(select(Node.gpu_model).distinct())))
