"""Admission decisions: may this waiting work start now, under its tenant's grants,
budget and spot bid? Billing decides; the control plane acts (``control.admission``
holds what is held and fails what is rejected, in its own transaction).

``decide(session, work)`` reads only, in the caller's session. Each work item has
``kind``, ``id``, ``request`` (a scheduler Request) and ``num_nodes``, and may carry its
``row`` as read in that session (else it is read). Its answer:

- **held** ``{(kind, id): reason}``: not now (a grant's GPUs in use, a hard cap
  reached, a prepaid balance that does not cover the first billing unit, a bid below
  the spot price); the reason is shown to the user;
- **rejected** ``{(kind, id): reason}``: never under the tenant's grants;
- **codes** ``{(kind, id): code}``: why each held item waits, for scripts:
  ``quota``, ``balance`` (a hard cap or a prepaid balance) or ``price-above-bid``;
- **narrowed** ``{(kind, id): models}``: spot work whose bid only some of its allowed
  models meet; it must be placed on those only, so the price check holds for the model
  it lands on.

Each request is priced with its own GPUs counted as allocated, not with other work
admitted in the same pass (which may not be placed); if several start together and
push the price above a bid, reclaim settles it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from suanli.billing import funds, quotas, spending, spot
from suanli.billing.price_versions import current_book
from suanli.billing.store import dt_to_ms, ms_to_dt, now_ms
from suanli.billing.tables import Grant
from suanli.billing.terms import terms_of
from suanli.db.models import Allocation, Instance, Job

Key = tuple[str, int]


@dataclass
class Decision:
    held: dict[Key, str] = field(default_factory=dict)
    rejected: dict[Key, str] = field(default_factory=dict)
    narrowed: dict[Key, frozenset[str]] = field(default_factory=dict)
    codes: dict[Key, str] = field(default_factory=dict)


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


def _rows(s: Session, work: Sequence) -> dict[Key, Instance | Job]:
    """The rows of ``work``: an item's own ``row`` where it carries one read in this
    session (the control loop's queue), the others in one query per kind (a ``get``
    each cost a query per waiting row on every tick: a queue of 1,000 took a third of a
    second). A row read again in its session is not refreshed by the read, so this is
    what the query would give."""
    out: dict[Key, Instance | Job] = {}
    for kind in ("instance", "job"):
        model: type[Instance] | type[Job] = Instance if kind == "instance" else Job
        ids = []
        for w in work:
            if w.kind != kind:
                continue
            row = getattr(w, "row", None)
            if isinstance(row, model) and row in s:
                out[(kind, w.id)] = row
            else:
                ids.append(w.id)
        for i in range(0, len(ids), 500):  # bounded IN lists
            found: list[Instance | Job] = list(s.scalars(select(model).where(model.id.in_(ids[i : i + 500]))))
            out.update(((kind, row.id), row) for row in found)
    return out


def decide(s: Session, work: Sequence, at_ms: int | None = None) -> Decision:
    """Held, rejected and narrowed work (module docstring); reads only."""
    out = Decision()
    if not work:
        return out
    at = now_ms() if at_ms is None else at_ms
    owners = {}
    bids: dict[Key, int] = {}
    disks: dict[Key, int] = {}
    rows = _rows(s, work)
    for w in work:
        row = rows.get((w.kind, w.id))
        if row is not None:
            owners[(w.kind, w.id)] = row.tenant_id
            disks[(w.kind, w.id)] = getattr(row, "disk_gib", 0) or 0
            if row.priority == "spot" and row.max_price_micros is not None:
                bids[(w.kind, w.id)] = row.max_price_micros
    mk: spot.Market | None = None
    tenants = set(owners.values())
    grants = _grants(s, tenants)
    in_use, minutes = _grant_usage(s, grants, at)
    capped = spending.capped(s, tenants, at)
    terms = terms_of(s, tenants)
    left: funds.Figures | None = None  # every prepaid tenant's, read once per pass
    currency = current_book(s, at)[1].currency
    per_hour: dict[tuple, int] = {}  # by what ``funds.per_hour`` prices: a queue holds many alike
    for w in work:
        key = (w.kind, w.id)
        tid = owners.get(key)
        if tid is None:
            continue
        if tid in capped:
            out.held[key] = f"billing: {capped[tid]}; top up or raise the budget to start"
            out.codes[key] = "balance"
            continue
        req = w.request
        milli = (req.gpu_milli or req.gpu_count * 1000) * max(1, w.num_nodes)
        d = quotas.Demand(tid, tuple(sorted(req.gpu_models)), milli, req.priority.value)
        dec = quotas.admit(grants, d, in_use, minutes, at)
        if dec.action == "queue":
            out.held[key] = dec.reason
            out.codes[key] = "quota"
            continue
        if dec.action == "reject":
            out.rejected[key] = dec.reason
            continue
        if key in bids and milli:
            mk = mk or spot.market(s, at)
            models, why = spot.check_bid(mk, req, w.num_nodes, bids[key])
            if why is not None:
                out.held[key] = why
                out.codes[key] = "price-above-bid"
                continue
            if models and models != (req.gpu_models or frozenset(mk.models())):
                out.narrowed[key] = models
        if terms[tid].terms != "postpaid":
            if left is None:  # every prepaid tenant's at once, when the first is needed
                left = funds.Figures(s, [t for t in tenants if terms[t].terms != "postpaid"], at)
            mk = mk or spot.market(s, at)
            shape = (req.gpu_models, req.gpu_count, req.gpu_milli, req.priority, w.num_nodes, disks[key], bids.get(key))
            if shape not in per_hour:
                per_hour[shape] = funds.per_hour(s, req, w.num_nodes, disks[key], bids.get(key), mk)
            cost = per_hour[shape]
            why = left.judge(tid, partial(funds.refusal, terms[tid], per_hour=cost, currency=currency))
            if why is not None:
                out.held[key] = f"billing: {why}"
                out.codes[key] = "balance"
                continue
        if dec.grant_id is not None:  # admitted: count it against the grant for the rest of this pass
            in_use[dec.grant_id] = in_use.get(dec.grant_id, 0) + milli
    return out
