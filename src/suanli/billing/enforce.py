"""Where billing meets the control plane: budget alerts and the hard cap after a
rating run, and quota/balance admission inside the scheduling pass.

``admission(session, work)`` is the one call-out the scheduler makes: it returns
the waiting rows to hold (queue, with the reason shown to the user) and fails the
rows that can never be admitted under their tenant's grants, in the scheduler's
own transaction. Spot work with a bid (``max_price``) is held while the spot price
of every model it may run on is above the bid (``billing.spot``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from suanli.billing import budgets, quotas, rater, spot
from suanli.billing.store import balance, current_book, dt_to_ms, ms_to_dt, now_ms
from suanli.billing.tables import BudgetRow, Grant, Notice, Subscription, Usage
from suanli.control.auth import Principal
from suanli.db.models import Allocation, Instance, Job
from suanli.db.session import Database

log = logging.getLogger(__name__)


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


def apply_budgets(db: Database, at_ms: int | None = None) -> list[str]:
    """Alerts for thresholds crossed; notice, then stop, for hard-capped tenants out of money."""
    at = now_ms() if at_ms is None else at_ms
    actions: list[str] = []
    to_stop: list[int] = []
    with db.sessions() as s:
        tenants = list(s.scalars(select(BudgetRow.tenant_id)))
    # work running now counts before it is rated: a cap must not wait for the hour to close
    pending = {t: rater.accruing(db, t, at) for t in tenants}
    with db.transaction() as s:
        currency = current_book(s)[1].currency
        for row in s.scalars(
            select(BudgetRow).order_by(BudgetRow.tenant_id).with_for_update()
        ):  # one alert per threshold, even with concurrent runs
            period = budgets.period_of(at)
            if row.period != period:
                row.period, row.alerted = period, []
            b = _budget(row)
            extra = pending.get(row.tenant_id, 0)
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
                actions.append(f"tenant {row.tenant_id}: alert {t} %")
            act = budgets.cap_action(b, spent, bal, row.notice_since_ms, at, currency)
            if act.action == "ok":
                row.notice_since_ms = None
            elif act.action == "notice" and row.notice_since_ms is None:
                row.notice_since_ms = at
                s.add(Notice(tenant_id=row.tenant_id, kind="notice", message=act.reason))
                actions.append(f"tenant {row.tenant_id}: notice")
            elif act.action == "stop":
                to_stop.append(row.tenant_id)
                s.add(Notice(tenant_id=row.tenant_id, kind="stopped", message=act.reason))
                actions.append(f"tenant {row.tenant_id}: stop")
    for tid in to_stop:
        stop_tenant(db, tid)
    return actions


def stop_tenant(db: Database, tenant_id: int) -> None:
    """Stop running instances and cancel active jobs through the control plane's services."""
    from suanli.control import instances, jobs

    who = Principal(0, tenant_id, "billing", "admin")
    with db.sessions() as s:
        insts = list(
            s.scalars(
                select(Instance.id).where(
                    Instance.tenant_id == tenant_id, Instance.state.in_(("pending", "running")), Instance.desired == "running"
                )
            )
        )
        js = list(s.scalars(select(Job.id).where(Job.tenant_id == tenant_id, Job.state.in_(("queued", "running")))))
    for i in insts:
        try:
            instances.stop(db, who, i)
        except Exception as exc:  # a concurrent change: the next run retries
            log.warning("hard cap: cannot stop instance %s: %s", i, exc)
    for j in js:
        try:
            jobs.cancel(db, who, j)
        except Exception as exc:
            log.warning("hard cap: cannot cancel job %s: %s", j, exc)


# -- admission ------------------------------------------------------------------------------
def _grants(s: Session, tenant_ids: set[int]) -> list[quotas.Grant]:
    rows = s.scalars(select(Grant).where(Grant.revoked.is_(False), Grant.tenant_id.in_(tenant_ids)))
    return [
        quotas.Grant(
            g.id,
            g.tenant_id,
            g.gpu_model,
            g.max_gpu_milli,
            g.gpu_minutes,
            g.qos,
            dt_to_ms(g.expires_at) if g.expires_at else None,
        )
        for g in rows
    ]


def _grant_usage(s: Session, grants: list[quotas.Grant], at_ms: int) -> tuple[dict[int, int], dict[int, float]]:
    """Per grant: GPUs (milli) held now and GPU-minutes used since the grant was made."""
    in_use: dict[int, int] = {}
    minutes: dict[int, float] = {}
    if not grants:
        return in_use, minutes
    tenants = {g.tenant_id for g in grants}
    created = {r.id: dt_to_ms(r.created_at) for r in s.scalars(select(Grant).where(Grant.id.in_([g.id for g in grants])))}
    since = ms_to_dt(min(created.values()))  # nothing that ended before the oldest grant counts
    rows = list(
        s.execute(
            select(
                Allocation.tenant_id,
                Allocation.gpu_model,
                Allocation.gpu_indices,
                Allocation.milli_per_gpu,
                Allocation.started_at,
                Allocation.ended_at,
            ).where(Allocation.tenant_id.in_(tenants), or_(Allocation.ended_at.is_(None), Allocation.ended_at >= since))
        )
    )
    for g in grants:
        for r in rows:
            if r.tenant_id != g.tenant_id or not g.covers_model([r.gpu_model]):
                continue
            milli = len(r.gpu_indices) * r.milli_per_gpu
            if r.ended_at is None:
                in_use[g.id] = in_use.get(g.id, 0) + milli
            t0 = max(dt_to_ms(r.started_at), created[g.id])
            t1 = dt_to_ms(r.ended_at) if r.ended_at else at_ms
            if t1 > t0:
                minutes[g.id] = minutes.get(g.id, 0.0) + (t1 - t0) / 60_000 * milli / 1000
    return in_use, minutes


def admission(
    s: Session, work: Sequence, spot_models: dict[tuple[str, int], frozenset[str]] | None = None
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], str]]:
    """For the scheduling pass: ``(held, rejected)``, each ``{(kind, id): reason}``.
    ``work`` items have ``kind``, ``id``, ``request`` (a scheduler Request) and ``num_nodes``.

    Spot work with a bid is held when no model it may run on is at or below the bid;
    when only some are, ``spot_models`` (if given) receives ``{(kind, id): models}`` and
    the caller must place it on those models only, so the price check holds for the
    model it lands on. Each request is priced with its own GPUs counted as allocated,
    not with other work admitted in the same pass (which may not be placed); if several
    start together and push the price above a bid, reclaim settles it."""
    held: dict[tuple[str, int], str] = {}
    rejected: dict[tuple[str, int], str] = {}
    if not work:
        return held, rejected
    at = now_ms()
    owners = {}
    bids: dict[tuple[str, int], int] = {}
    for w in work:
        row = s.get(Instance if w.kind == "instance" else Job, w.id)
        if row is not None:
            owners[(w.kind, w.id)] = row.tenant_id
            if row.priority == "spot" and row.max_price_micros is not None:
                bids[(w.kind, w.id)] = row.max_price_micros
    mk: spot.Market | None = None
    tenants = set(owners.values())
    grants = _grants(s, tenants)
    in_use, minutes = _grant_usage(s, grants, at)
    capped = {}
    for row in s.scalars(select(BudgetRow).where(BudgetRow.tenant_id.in_(tenants), BudgetRow.hard_cap.is_(True))):
        extra = rater.accruing(None, row.tenant_id, at, session=s)
        why = budgets.exhausted(_budget(row), spent_this_month(s, row.tenant_id, at) + extra, balance(s, row.tenant_id) - extra)
        if why:
            capped[row.tenant_id] = why
    for w in work:
        key = (w.kind, w.id)
        tid = owners.get(key)
        if tid is None:
            continue
        if tid in capped:
            held[key] = f"billing: {capped[tid]}; top up or raise the budget to start"
            continue
        req = w.request
        milli = (req.gpu_milli or req.gpu_count * 1000) * max(1, w.num_nodes)
        d = quotas.Demand(tid, tuple(sorted(req.gpu_models)), milli, req.priority.value)
        dec = quotas.admit(grants, d, in_use, minutes, at)
        if dec.action == "queue":
            held[key] = dec.reason
            continue
        if dec.action == "reject":
            rejected[key] = dec.reason
            continue
        if key in bids and milli:
            mk = mk or spot.market(s, at)
            models, why = spot.check_bid(mk, req, w.num_nodes, bids[key])
            if why is not None:
                held[key] = why
                continue
            if spot_models is not None and models and models != (req.gpu_models or frozenset(mk.models())):
                spot_models[key] = models
        if dec.grant_id is not None:  # admitted: count it against the grant for the rest of this pass
            in_use[dec.grant_id] = in_use.get(dec.grant_id, 0) + milli
    return held, rejected


def fail_rejected(s: Session, rejected: dict[tuple[str, int], str]) -> None:
    """Fail rows no grant can ever admit, in the scheduler's transaction."""
    from suanli.control.lifecycle import transition

    for (kind, wid), reason in rejected.items():
        row = s.get(Instance if kind == "instance" else Job, wid)
        if row is None or row.state not in ("pending", "queued"):
            continue
        transition(s, row, "failed", reason)
        if kind == "job":
            row.finished_at = ms_to_dt(now_ms())
