"""A rating run: read allocations, instances and transfers; meter, rate, post.

    python -m suanli.billing rate --db URL     (or POST /v1/billing/rate, suanli rate)

1. ``since`` = the period holding the last completed run's settled instant (the
   watermark): everything before it is already rated, so only those periods are
   metered again.
2. Intervals -> final records (``metering.split``): ended work up to the cutoff (now),
   running work's periods closed by the settled instant (now - ``SETTLE_MS``), priced with the price version in
   force at each record's period start (old usage keeps its price), rated with
   ``rating``: spot at the model's utilisation at period start (``billing.utilisation``,
   the rule admission and reclaim compare bids with), capped by the allocation's bid
   (``max_price``),
   GPUs under a monthly/reserved subscription at zero (the fee paid for them).
3. ``posting.post``: one transaction per batch, idempotent on (kind, source, period).
4. Advance the watermark to the settled instant.
A crash anywhere leaves committed batches posted once; the next run finishes the rest.
A run only rates and posts: budgets and the hard cap are decided by
``spending.apply_budgets`` and acted on by the control plane (``control.admission``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Select, bindparam, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.billing import debt, metering, plans, rating
from suanli.billing.intervals import ALLOCATION_COLUMNS, Intervals, clip, intervals
from suanli.billing.posting import PostResult, Records, post
from suanli.billing.price_versions import versions
from suanli.billing.pricebook import PLANS, PriceBook, resolve_model
from suanli.billing.store import dt_to_ms, ms_to_dt, now_ms
from suanli.billing.tables import RatingState, Subscription, Transfer, Usage
from suanli.billing.utilisation import capacity_milli, per_period
from suanli.db.kept import kept
from suanli.db.models import Allocation, Instance, Node
from suanli.db.session import Database

PLAN_NAMES = list(PLANS) + ["covered"]


@dataclass
class RunResult:
    run_id: str
    cutoff_ms: int
    since_ms: int
    records: int
    posted: PostResult
    settled_ms: int | None = None  #: running work's periods closed by this instant were rated (the new watermark)


def version_index(effective: np.ndarray, period: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(effective, period, side="right") - 1, 0, None)


def rate_gpu_intervals(
    iv: Intervals,
    books: list[tuple[int, int, PriceBook]],
    cutoff_ms: int,
    since_ms: int,
    period_ms: int,
    capacity: dict[int, int] | None = None,
    covered: Callable[[Intervals, np.ndarray, np.ndarray], np.ndarray] | None = None,
    settled_ms: int | None = None,
) -> Records:
    """Pure: intervals -> rated records (final at ``cutoff_ms``, open intervals' periods
    closed by ``settled_ms``: ``metering.split``). ``covered(iv, index, period)`` gives, per
    reserved-priority record, the plan code of the subscription paying for it, or -1."""
    pc = metering.split(iv.start_ms, iv.end_ms, cutoff_ms, since_ms, period_ms, settled_ms)
    i = pc.index
    model, plan = iv.model_code[i], iv.plan_code[i].copy()
    reserved = plan == PLANS.index("reserved")
    sub_plan = np.full(i.size, -1, dtype=np.int64)
    if covered is not None and reserved.any():
        sub_plan[reserved] = covered(iv, i[reserved], pc.period_start[reserved])
    plan_out = np.where(reserved, np.where(sub_plan >= 0, sub_plan, PLANS.index("on_demand")), plan)
    rate_plan = np.where(reserved & (sub_plan >= 0), rating.COVERED, plan_out)
    spot = plan == PLANS.index("spot")
    util = None
    if spot.any():
        util = np.zeros(i.size, dtype=np.int64)
        util[spot] = per_period(iv, capacity or {}, model[spot], pc.period_start[spot])
    eff = np.array([e for _, e, _ in books], dtype=np.int64)
    vi = version_index(eff, pc.period_start)
    price = np.zeros(i.size, dtype=np.int64)
    bid = None if iv.max_price is None else iv.max_price[i]  # each interval's own bid caps its spot price
    for v in np.unique(vi):
        sel = vi == v
        price[sel] = rating.gpu_prices(
            books[v][2],
            iv.models,
            model[sel],
            rate_plan[sel],
            None if util is None else util[sel],
            None if bid is None else bid[sel],
        )
    rated = rating.rate_gpu(pc.units, iv.milli[i], price)
    vids = np.array([b[0] for b in books], dtype=np.int64)[vi]
    cols = {
        "tenant_id": iv.tenant_id[i],
        "kind": np.zeros(i.size, np.int64),
        "source_id": iv.source_id[i],
        "period_ms": pc.period_start,
        "workload_kind": iv.workload_kind[i],
        "workload_id": iv.workload_id[i],
        "gpu_model": model,
        "plan": plan_out,
        "start_ms": pc.start,
        "end_ms": pc.end,
        "quantity": iv.milli[i],
        "billed_seconds": pc.billed_seconds,
        "unit_price": rated.unit_price,
        "amount": rated.amount,
        "price_version": vids,
    }
    return Records(
        cols,
        ["gpu", "storage", "transfer"],
        ["instance", "job"],
        iv.models,
        PLAN_NAMES,
        {int(v): b.currency for v, _, b in books},
    )


def _concat(parts: list[Records]) -> Records:
    base = parts[0]
    return Records(
        {k: np.concatenate([p.cols[k] for p in parts]) for k in base.cols},
        base.kinds,
        base.workload_kinds,
        base.models,
        base.plans,
        base.currency,
    )


def _read(s: Session, since_dt: datetime, since_ms: int, cutoff_ms: int, mine: Callable) -> tuple:
    """The rows a run needs, in one session (the caller's transaction or a new one)."""
    allocs = _allocations(s, since_dt, mine(Allocation.tenant_id))
    insts = _instances(s, since_dt, mine(Instance.tenant_id))
    transfers = list(
        s.execute(
            select(Transfer.id, Transfer.tenant_id, Transfer.ts_ms, Transfer.gib_milli).where(
                Transfer.ts_ms >= since_ms, Transfer.ts_ms <= cutoff_ms, mine(Transfer.tenant_id)
            )
        )
    )
    return versions(s), allocs, _capacity(s, allocs), insts, _subscriptions(s, allocs), transfers


def _allocations(s: Session, since_dt: datetime, where: Any) -> list:
    return list(
        s.execute(select(*ALLOCATION_COLUMNS).where(or_(Allocation.ended_at.is_(None), Allocation.ended_at >= since_dt), where))
    )


def _instances(s: Session, since_dt: datetime, where: Any) -> list:
    return list(
        s.execute(
            select(
                Instance.id, Instance.tenant_id, Instance.disk_gib, Instance.state, Instance.created_at, Instance.updated_at
            ).where(or_(Instance.state != "deleted", Instance.updated_at >= since_dt), where)
        )
    )


def _capacity(s: Session, allocs: list) -> dict[str, int]:
    """The capacity spot utilisation divides by; read only when spot work is rated."""
    return capacity_milli(s) if any(a.priority == "spot" for a in allocs) else {}


def _subscriptions(s: Session, allocs: list) -> list:
    """What may cover reserved work; read only when reserved work is rated."""
    if not any(a.priority == "reserved" for a in allocs):
        return []
    return list(
        s.execute(
            select(
                Subscription.tenant_id,
                Subscription.gpu_model,
                Subscription.plan,
                Subscription.gpu_count,
                Subscription.start_ms,
                Subscription.end_ms,
                Subscription.cancelled_ms,
            )
        )
    )


def _workload_allocations_statement(owner: Any) -> Select:
    q = select(*ALLOCATION_COLUMNS, Allocation.node_rank, Node.name.label("node_name"))
    since = bindparam("since", type_=Allocation.ended_at.type)
    q = q.outerjoin(Node, Node.id == Allocation.node_id)
    return q.where(or_(Allocation.ended_at.is_(None), Allocation.ended_at >= since), owner.in_(bindparam("ids", expanding=True)))


#: built once: building a statement and its cache key cost more than running it (a listing's hot path)
_WORKLOAD_ALLOCATIONS = {
    "instance": _workload_allocations_statement(Allocation.instance_id),
    "job": _workload_allocations_statement(Allocation.job_id),
}


def workload_allocations(s: Session, kind: str, ids: list[int], since_ms: int) -> list:
    """The allocations of workloads ``ids`` of ``kind`` that ``collect`` would read from
    ``since_ms`` on (``ALLOCATION_COLUMNS``): what ``rate_workloads`` rates; with each
    one's ``node_rank`` and ``node_name``, so that a listing shows what its workloads hold
    from this read rather than another. Plain rows, read on the session's connection
    (``Session.execute`` adds the ORM's handling, a third of a small read's cost)."""
    return list(s.connection().execute(_WORKLOAD_ALLOCATIONS[kind], {"ids": ids, "since": ms_to_dt(since_ms)}))


def rate_workloads(books: list, allocs: list, insts: list, since_ms: int, at_ms: int, period_ms: int) -> Records | None:
    """``collect(..., open_until_ms=at_ms)`` of one tenant, limited to the GPU and storage
    records of some workloads, from their own rows only (``workload_allocations``; for
    instances their rows as ``collect`` reads them, with ``updated_at``): a listing's page
    or the answer to a create, without reading the rest of the tenant's work. Pure. None
    when they held spot or reserved GPUs: those records depend on the tenant's other work
    (spot at its share of the model, subscriptions covering its earliest reserved work
    first), so the caller collects the whole tenant."""
    if any(a.priority in ("spot", "reserved") for a in allocs):
        return None
    since_dt = ms_to_dt(since_ms)
    listed = [r for r in insts if r.state != "deleted" or r.updated_at >= since_dt]  # as ``_instances`` selects
    return _rate((books, allocs, {}, listed, [], []), since_ms, at_ms, period_ms, at_ms, None)


def collect(
    db: Database | None,
    since_ms: int,
    cutoff_ms: int,
    period_ms: int,
    tenant_id: int | None = None,
    open_until_ms: int | None = None,
    session: Session | None = None,
    settled_ms: int | None = None,
) -> Records:
    """Read what may hold unrated periods and rate it (GPU, storage, transfer): ended
    work up to ``cutoff_ms``, running work's periods closed by ``settled_ms`` (default
    the cutoff). ``open_until_ms`` treats running work as ending then (and work that
    starts later as nothing): an estimate of what is accruing (``reports.bill``), never
    posted."""
    since_dt = ms_to_dt(since_ms)
    mine = (lambda col: col == tenant_id) if tenant_id is not None else (lambda col: True)  # noqa: E731
    if session is not None:
        rows = _read(session, since_dt, since_ms, cutoff_ms, mine)
    else:
        assert db is not None
        with db.transaction() as s:  # a transaction: versions() may create version 1
            rows = _read(s, since_dt, since_ms, cutoff_ms, mine)
    return _rate(rows, since_ms, cutoff_ms, period_ms, open_until_ms, settled_ms)


def _rate(
    rows: tuple, since_ms: int, cutoff_ms: int, period_ms: int, open_until_ms: int | None, settled_ms: int | None
) -> Records:
    """``collect``'s records from the rows ``_read`` returned."""
    books, allocs, caps, insts, subs, transfers = rows
    open_end = metering.OPEN if open_until_ms is None else open_until_ms
    iv = intervals(allocs, open_end)
    models = iv.models
    code = {m: i for i, m in enumerate(models)}
    capacity = {code[m]: c for m, c in caps.items() if m in code}

    def covered(iv: Intervals, index: np.ndarray, period: np.ndarray) -> np.ndarray:
        """Per (tenant, model, period): the active subscriptions' GPUs cover reserved work,
        earliest first (``plans.cover``); the plan code of the first such subscription."""
        out = np.full(index.size, -1, dtype=np.int64)
        res = iv.plan_code == PLANS.index("reserved")
        for t, mcode, p in {(int(a), int(b), int(c)) for a, b, c in zip(iv.tenant_id[index], iv.model_code[index], period)}:
            active = [
                (plan, cnt)
                for st, m, plan, cnt, a, b, cancel in subs
                if st == t
                and _same_model(models[mcode], m)
                and a < p + period_ms
                and p < (b if cancel is None or plan == "monthly" else min(b, cancel))
            ]
            if not active:
                continue
            cand = np.flatnonzero(
                res & (iv.tenant_id == t) & (iv.model_code == mcode) & (iv.start_ms < p + period_ms) & (iv.end_ms > p)
            )
            ok = plans.cover(
                np.maximum(iv.start_ms[cand], p),
                np.minimum(iv.end_ms[cand], p + period_ms),
                iv.milli[cand],
                iv.start_ms[cand] * 2**20 + iv.source_id[cand] % 2**20,
                sum(c for _, c in active) * 1000,
            )
            covered_ids = set(iv.source_id[cand[ok]].tolist())
            here = (iv.tenant_id[index] == t) & (iv.model_code[index] == mcode) & (period == p)
            hit = here & np.isin(iv.source_id[index], list(covered_ids))
            out[hit] = PLANS.index(active[0][0])
        return out

    parts = [rate_gpu_intervals(iv, books, cutoff_ms, since_ms, period_ms, capacity, covered, settled_ms)]
    held: dict[int, list[tuple[int, int]]] = {}
    for a, s0, s1 in zip(allocs, iv.start_ms.tolist(), iv.end_ms.tolist()):
        if a.instance_id:
            held.setdefault(a.instance_id, []).append((s0, s1))
    parts.append(_storage(insts, books, cutoff_ms, since_ms, period_ms, parts[0], open_end, held, settled_ms))
    parts.append(_transfers(transfers, books, period_ms, parts[0]))
    return _concat(parts)


def _same_model(node_model: str, sub_model: str) -> bool:
    return resolve_model(node_model, (sub_model,)) is not None


def _running_units(t0: int, a: int, b: int, held: list[tuple[int, int]]) -> int:
    """Storage units (counted from ``t0``) starting in [a, b) while the instance held GPUs."""
    n = 0
    for s0, s1 in held:
        lo, hi = max(a, s0), min(b, s1)
        if hi > lo:
            n += int(
                metering.units_before(np.array([hi]), np.array([t0]))[0]
                - metering.units_before(np.array([lo]), np.array([t0]))[0]
            )
    return n


def _storage(
    insts: list,
    books: list,
    cutoff_ms: int,
    since_ms: int,
    period_ms: int,
    like: Records,
    open_end: int = metering.OPEN,
    held: dict[int, list[tuple[int, int]]] | None = None,
    settled_ms: int | None = None,
) -> Records:
    """Disks bill from creation to deletion: at the running price while the instance
    holds GPUs (an allocation), at the stopped price otherwise."""
    insts = [r for r in insts if r.disk_gib > 0]
    t0 = np.array([dt_to_ms(r.created_at) for r in insts], dtype=np.int64).reshape(len(insts))
    t1 = np.array([dt_to_ms(r.updated_at) if r.state == "deleted" else metering.OPEN for r in insts], dtype=np.int64).reshape(
        len(insts)
    )
    pc = metering.split(t0, clip(t0, t1, open_end), cutoff_ms, since_ms, period_ms, settled_ms)
    i = pc.index
    gib = np.array([r.disk_gib for r in insts], dtype=np.int64).reshape(len(insts))[i]
    eff = np.array([e for _, e, _ in books], dtype=np.int64)
    vi = version_index(eff, pc.period_start)
    price = np.array([b.storage for _, _, b in books], dtype=np.int64)[vi]
    stopped = np.array([b.storage_stopped for _, _, b in books], dtype=np.int64)[vi]
    hpm = np.array([b.hours_per_month for _, _, b in books], dtype=np.int64)[vi]
    ids = np.array([r.id for r in insts], dtype=np.int64).reshape(len(insts))[i]
    held = held or {}
    run = np.array(
        [
            _running_units(int(t0[k]), int(a), int(b), held.get(int(iid), []))
            for k, a, b, iid in zip(i.tolist(), pc.start.tolist(), pc.end.tolist(), ids.tolist())
        ],
        dtype=np.int64,
    ).reshape(i.size)
    amount = (run * gib * price + (pc.units - run) * gib * stopped + 300 * hpm) // (600 * hpm)
    price = np.where(run * 2 >= pc.units, price, stopped)  # the price of most of the record's units
    cols = {
        "tenant_id": np.array([r.tenant_id for r in insts], dtype=np.int64).reshape(len(insts))[i],
        "kind": np.ones(i.size, np.int64),
        "source_id": ids,
        "period_ms": pc.period_start,
        "workload_kind": np.zeros(i.size, np.int64),
        "workload_id": ids,
        "gpu_model": np.full(i.size, like.models.index("-"), np.int64),
        "plan": np.full(i.size, PLANS.index("on_demand"), np.int64),
        "start_ms": pc.start,
        "end_ms": pc.end,
        "quantity": gib,
        "billed_seconds": pc.billed_seconds,
        "unit_price": price,
        "amount": amount,
        "price_version": np.array([b[0] for b in books], dtype=np.int64)[vi],
    }
    return Records(cols, like.kinds, like.workload_kinds, like.models, like.plans, like.currency)


def _transfers(rows: list, books: list, period_ms: int, like: Records) -> Records:
    n = len(rows)
    ts = np.array([r.ts_ms for r in rows], dtype=np.int64).reshape(n)
    eff = np.array([e for _, e, _ in books], dtype=np.int64)
    vi = version_index(eff, ts)
    price = np.array([b.transfer for _, _, b in books], dtype=np.int64)[vi]
    gm = np.array([r.gib_milli for r in rows], dtype=np.int64).reshape(n)
    cols = {
        "tenant_id": np.array([r.tenant_id for r in rows], dtype=np.int64).reshape(n),
        "kind": np.full(n, 2, np.int64),
        "source_id": np.array([r.id for r in rows], dtype=np.int64).reshape(n),
        "period_ms": ts // period_ms * period_ms,
        "workload_kind": np.zeros(n, np.int64),
        "workload_id": np.zeros(n, np.int64),
        "gpu_model": np.full(n, like.models.index("-"), np.int64),
        "plan": np.full(n, PLANS.index("on_demand"), np.int64),
        "start_ms": ts,
        "end_ms": ts,
        "quantity": gm,
        "billed_seconds": np.zeros(n, np.int64),
        "unit_price": price,
        "amount": (gm * price + 500) // 1000,  # milli-GiB x per-GiB price, half-up
        "price_version": np.array([b[0] for b in books], dtype=np.int64)[vi],
    }
    return Records(cols, like.kinds, like.workload_kinds, like.models, like.plans, like.currency)


def _advance(db: Database, cutoff: int, rid: str) -> None:
    """Move the watermark forward (never back); the first run creates the row, and
    concurrent first runs race harmlessly on its primary key."""
    with db.transaction() as s:
        if s.get(RatingState, 1) is None:
            try:
                with s.begin_nested():
                    s.add(RatingState(id=1, watermark_ms=0, last_run=""))
                    s.flush()
            except IntegrityError:
                pass
        st = s.get(RatingState, 1, with_for_update=True, populate_existing=True)
        if st is not None and st.watermark_ms < cutoff:
            st.watermark_ms, st.last_run, st.updated_at = cutoff, rid, ms_to_dt(now_ms())


@dataclass(frozen=True)
class Accruing:
    """What is not posted yet, at one instant: ``running`` work as if it stopped then,
    and ``ended`` work (and transfers) whose final records no run has posted yet."""

    running: int
    ended: int

    @property
    def total(self) -> int:
        return self.running + self.ended


def accruing_parts(
    db: Database | None, tenant_id: int, at_ms: int, period_ms: int = 3_600_000, session: Session | None = None
) -> Accruing:
    """``accruing``, split into running and ended work (``reports.bill`` shows them apart:
    money for ended work is not "accruing", it is waiting for its record)."""
    if session is not None:
        return accruing_many(session, [tenant_id], at_ms, period_ms)[tenant_id]
    assert db is not None
    with db.transaction() as s:  # a transaction: versions() may create version 1
        return accruing_many(s, [tenant_id], at_ms, period_ms)[tenant_id]


def accruing_many(s: Session, tenant_ids: Iterable[int], at_ms: int, period_ms: int = 3_600_000) -> dict[int, Accruing]:
    """``accruing_parts`` of each tenant, from one reading of all of theirs: the hard cap
    asks it for every tenant with running work at every tick. The figures are those of
    one ``accruing_parts`` call per tenant: a tenant holding spot GPUs is rated on its own
    rows (a spot estimate at that tenant's share, as its bill shows it), the others in
    one rating pass together, since none of their records depends on another tenant's
    rows (reserved cover is per tenant). Why: the control loop asks every poll, and a
    pass per tenant cost 50 tenants' figures 2.3 times the CPU of one pass for all."""
    tenants = sorted(set(tenant_ids))
    if not tenants:
        return {}
    at_dt = ms_to_dt(at_ms)
    since = unrated_since(s, at_ms, period_ms)
    posted: dict[int, set] = {t: set() for t in tenants}
    for t, kind, src, p in s.execute(
        select(Usage.tenant_id, Usage.kind, Usage.source_id, Usage.period_ms).where(
            Usage.tenant_id.in_(tenants), Usage.period_ms >= since
        )
    ):
        posted[t].add((kind, src, p))
    books, allocs, caps, insts, subs, transfers = _read(s, ms_to_dt(since), since, at_ms, lambda col: col.in_(tenants))
    # running at ``at_ms``: GPUs still held then, disks not yet deleted then
    running: dict[int, set] = {t: set() for t in tenants}
    for a in allocs:
        if a.ended_at is None or a.ended_at > at_dt:
            running[a.tenant_id].add(("gpu", a.id))
    for i in insts:
        if i.state != "deleted" or i.updated_at > at_dt:
            running[i.tenant_id].add(("storage", i.id))
    allocs_of, insts_of, transfers_of = _by_tenant(allocs, tenants), _by_tenant(insts, tenants), _by_tenant(transfers, tenants)
    spot = {a.tenant_id for a in allocs if a.priority == "spot"}
    together = [t for t in tenants if t not in spot]
    parts = {t: [0, 0] for t in tenants}
    for group in [[t] for t in tenants if t in spot] + ([together] if together else []):
        rows = (
            books,
            [a for t in group for a in allocs_of[t]],
            caps,
            [i for t in group for i in insts_of[t]],
            subs,
            [x for t in group for x in transfers_of[t]],
        )
        recs = _rate(rows, since, at_ms, period_ms, at_ms, None)
        c = recs.cols
        for t, k, src, p, a in zip(
            c["tenant_id"].tolist(), c["kind"].tolist(), c["source_id"].tolist(), c["period_ms"].tolist(), c["amount"].tolist()
        ):
            kind = recs.kinds[k]
            if (kind, src, p) not in posted[t]:
                parts[t][0 if (kind, src) in running[t] else 1] += int(a)
    return {t: Accruing(*parts[t]) for t in tenants}


def unrated_since(s: Session, at_ms: int, period_ms: int) -> int:
    """The start of the period holding the watermark (at most ``at_ms``): what is
    accruing at ``at_ms`` lies in records from there on."""
    return min(watermark(s), at_ms) // period_ms * period_ms


def watermark(s: Session) -> int:
    """The cutoff of the last rating run; kept with the catalog (``db.kept``), which each
    run's move of it changes: a create and a page ask for it, a run moves it every 10 s."""
    return kept(s, "watermark", lambda s: int(s.scalar(select(RatingState.watermark_ms).where(RatingState.id == 1)) or 0))


def _by_tenant(rows: list, tenants: list[int]) -> dict[int, list]:
    """Rows (each with a ``tenant_id``) split by tenant in one pass, read order kept."""
    out: dict[int, list] = {t: [] for t in tenants}
    for r in rows:
        out[r.tenant_id].append(r)
    return out


def accruing(db: Database | None, tenant_id: int, at_ms: int, period_ms: int = 3_600_000, session: Session | None = None) -> int:
    """Not yet posted: running work as if it stopped now, plus ended work no run has
    rated yet. An estimate for cost visibility and the hard cap; never posted. Pass
    ``session`` when calling inside a transaction (SQLite allows one writer). Work that
    starts after ``at_ms`` counts nothing (``intervals.clip``): ``at_ms`` may be a past
    rating cutoff."""
    return accruing_parts(db, tenant_id, at_ms, period_ms, session).total


#: Lag of the settled instant behind now: an allocation's start or end is stamped just
#: before its transaction commits, so a run only takes an interval it sees open for one
#: that ran through a period that closed this long ago. Ended work (its end committed,
#: so seen) is rated up to now.
SETTLE_MS = 60_000


def run(
    db: Database,
    cutoff_ms: int | None = None,
    period_ms: int = metering.DEFAULT_PERIOD_MS,
    batch: int = 50_000,
    run_id: str | None = None,
    after_batch: Callable[[int], None] | None = None,
) -> RunResult:
    """One idempotent rating run. By default it rates ended work up to now and running
    work's periods that closed ``SETTLE_MS`` ago; with ``cutoff_ms`` everything final at
    that instant (the caller vouches that its rows have settled). It writes billing
    tables only and applies no budget (``spending.apply_budgets``)."""
    now = now_ms()
    cutoff = now if cutoff_ms is None else cutoff_ms
    settled = min(cutoff, now - SETTLE_MS) if cutoff_ms is None else cutoff
    rid = run_id or uuid.uuid4().hex[:16]
    with db.sessions() as s:
        watermark = s.scalar(select(RatingState.watermark_ms).where(RatingState.id == 1)) or 0
    since = min(watermark, settled) // period_ms * period_ms
    recs = collect(db, since, cutoff, period_ms, settled_ms=settled)
    with db.sessions() as s:
        recs = debt.apply(s, recs)
    posted = post(db, recs, rid, batch, after_batch)
    _advance(db, settled, rid)
    return RunResult(rid, cutoff, since, len(recs), posted, settled)
