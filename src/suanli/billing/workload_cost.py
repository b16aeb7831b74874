"""What each instance or job has cost so far and what it costs per hour now: the
figures instance and job listings show (``GET /v1/instances``, ``/v1/jobs``).

Cost so far = what billing has rated for the workload (its GPU and storage usage
records, ``billing_usage`` rows keyed by ``workload_kind``/``workload_id``) plus what
is accruing and not yet rated: running work as if it stopped now, and ended work no
rating run has reached, estimated the way ``rater.accruing`` estimates a tenant's (one
``rater.collect`` per tenant of the page, minus the records already posted), so the
accruing parts of a tenant's workloads add up to its bill's accruing figure (less
transfers, which belong to no workload). Never posted.

The rate now, per hour, is what the workload's current holdings cost at today's prices:

- GPUs: each allocation it holds, at its plan's price per GPU-hour now
  (``billing.offers``: on demand; spot at the model's utilisation now, capped by the
  bid; reserved work a subscription of its tenant covers at 0, otherwise on demand),
  times the GPUs it holds; 0 once it holds none (a stopped instance, a finished job);
- storage (instances only): its disk from creation to deletion, at the running price
  per GiB-month while it holds GPUs and the stopped price otherwise (a stopped or
  pending instance still pays for its disk), over the book's hours per month;
  0 once deleted.

A model the book does not price is rated at zero, so its rate is 0. Data transfer
is billed per GiB moved, not per hour, and is in neither figure.

A whole page is a few queries whatever its length: the workloads, the watermark, their
rated sums before the watermark's period, the records posted since (both rated and the
keys accruing leaves out, in one statement, so a rating run committing meanwhile is
counted once), the allocations they hold and the market now (only if they hold GPUs),
and what is accruing: rated from the page's own rows (``rater.rate_workloads``)
unless some of its work held spot or reserved GPUs, whose records depend on the
tenant's other work; then one ``collect`` per tenant on the page (one for a renter's
own listing), or one platform-wide ``collect`` for a page of more than
``PER_TENANT_UP_TO`` tenants (its spot estimates then use the model's utilisation, as
the posted records will, where a tenant's own uses its share).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import bindparam, cast, func, null, or_, select, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import BindParameter, CompoundSelect

from suanli.billing import metering, rater
from suanli.billing.money import div_half_up
from suanli.billing.offers import Offer, offers
from suanli.billing.posting import Records
from suanli.billing.price_versions import current_book, versions_in_force
from suanli.billing.pricebook import resolve_model
from suanli.billing.store import dt_to_ms, ms_to_dt, now_ms
from suanli.billing.tables import PriceVersion, Subscription, Usage
from suanli.db.kept import kept
from suanli.db.models import Allocation, Instance, Job
from suanli.db.session import Database

Kind = Literal["instance", "job"]

#: Pages of at most this many tenants are estimated per tenant (one ``collect`` each).
PER_TENANT_UP_TO = 4


@dataclass(frozen=True)
class WorkloadCost:
    """Micro-units of ``currency``."""

    kind: Kind
    id: int
    currency: str
    rated: int  # posted usage records (GPU and storage)
    accruing: int  # not yet rated: an estimate, never posted
    gpu_per_hour: int  # the GPUs it holds now, at their plan's price now
    storage_per_hour: int  # its disk now (running or stopped price); 0 for jobs

    @property
    def so_far(self) -> int:
        return self.rated + self.accruing

    @property
    def per_hour(self) -> int:
        return self.gpu_per_hour + self.storage_per_hour


@dataclass(frozen=True)
class Figures:
    """What a page shows of its workloads' money and holdings, from one set of reads."""

    costs: dict[int, WorkloadCost]
    #: by workload id, the allocations each holds now, in node rank order: rows with the
    #: columns ``rater.workload_allocations`` reads (``node_name``, ``node_rank``,
    #: ``gpu_model``, ``gpu_indices``, ``milli_per_gpu``...)
    held: dict[int, list[Any]]


def costs(
    db: Database, kind: Kind, ids: Iterable[int], at_ms: int | None = None, period_ms: int = metering.DEFAULT_PERIOD_MS
) -> dict[int, WorkloadCost]:
    """Cost so far and rate now of workloads ``ids`` of ``kind``, keyed by id; ids that
    do not exist are left out. Reads only, in a read session (``Database.reads``: on
    SQLite it does not wait for writers); a database no server bootstrapped is priced
    with the seed book, unwritten."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    return _reading(db, at_ms, lambda s, at: _figures(s, kind, _rows(s, kind, wanted), at, period_ms)).costs


def figures_of_rows(
    db: Database, kind: Kind, rows: list[Any], at_ms: int | None = None, period_ms: int = metering.DEFAULT_PERIOD_MS
) -> Figures:
    """``costs`` of workloads the caller has just read (a listing's rows), one statement
    fewer than reading them again, and the allocations they hold now, from the read the
    costs make of them."""
    if not rows:
        return Figures({}, {})
    return _reading(db, at_ms, lambda s, at: _figures(s, kind, rows, at, period_ms))


def _reading(db: Database, at_ms: int | None, read: Callable[[Session, int], Figures]) -> Figures:
    for attempt in range(3):
        at = now_ms() if at_ms is None else at_ms
        try:
            with db.reads() as s:
                return read(s, at)
        except metering.MeteringError:
            # work that started after ``at`` was taken (its commit came between) reads as
            # ending before it starts: look again, from a later now
            if at_ms is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _rows(s: Session, kind: Kind, ids: list[int]) -> list[Any]:
    """What ``_figures`` reads of each workload (and ``rater.rate_workloads`` of an instance)."""
    if kind == "instance":
        q = select(Instance.id, Instance.tenant_id, Instance.created_at, Instance.disk_gib, Instance.state, Instance.updated_at)
        return list(s.execute(q.where(Instance.id.in_(ids))))
    return list(s.execute(select(Job.id, Job.tenant_id, Job.created_at).where(Job.id.in_(ids))))


def at_creation(db: Database, kind: Kind, rows: list[Instance] | list[Job]) -> dict[int, WorkloadCost]:
    """What new workloads cost as at their creation, keyed by id: what ``costs`` gives at
    that instant, with no read but the price book. Nothing is rated or accruing yet (a new
    id has no records, and nothing has accrued over no time), no GPUs are held, and an
    instance's disk is at the stopped price while it waits to be placed. A create answers
    with these: the reads ``costs`` makes (usage, posted records, allocations, the market)
    were most of a create's CPU, for figures that cannot be anything else yet."""
    out: dict[int, WorkloadCost] = {}
    with db.reads() as s:
        for r in rows:
            _, book = current_book(s, dt_to_ms(r.created_at))
            gib = int(getattr(r, "disk_gib", 0) or 0) if kind == "instance" else 0
            storage = div_half_up(gib * book.storage_stopped, book.hours_per_month)
            out[r.id] = WorkloadCost(kind, r.id, book.currency, 0, 0, 0, storage)
    return out


def billing_stamp(s: Session) -> tuple:
    """What changes a workload's rate besides its own row, in one statement (kept with the
    catalog, ``db.kept``): the newest price version, and the newest subscription and
    cancellation (what reserved work costs). Equal stamps and an unchanged row mean the
    same figures but for what accrued in between and the spot market's drift
    (``api.page_cache``). A rating run is not in it: it moves what accrued into what is
    rated, the total stays."""
    return kept(s, "billing_stamp", _billing_stamp)


def _billing_stamp(s: Session) -> tuple:
    return tuple(
        s.execute(
            select(
                select(func.max(PriceVersion.id)).scalar_subquery(),
                select(func.max(Subscription.id)).scalar_subquery(),
                select(func.max(Subscription.cancelled_ms)).scalar_subquery(),
            )
        ).one()
    )


def _usage_statement() -> CompoundSelect:
    """What ``_figures`` reads of the posted records, in one statement, built once. Before
    ``since`` (settled: no run writes there any more) each workload's sum, in rows whose
    ``kind`` is NULL; from ``since`` on, every record of the tenants, which tells both what
    is rated and which keys are posted, so a run committing meanwhile is counted once: in
    rated or in accruing."""
    tenants: BindParameter[list[int]] = bindparam("tenants", expanding=True)
    since = bindparam("since", type_=Usage.period_ms.type)
    settled = (
        select(
            cast(null(), Usage.kind.type),
            cast(null(), Usage.source_id.type),
            cast(null(), Usage.period_ms.type),
            Usage.workload_kind,
            Usage.workload_id,
            func.sum(Usage.amount),
        )
        .where(
            Usage.tenant_id.in_(tenants),  # the (tenant_id, period_ms) index
            Usage.period_ms >= bindparam("first", type_=Usage.period_ms.type),
            Usage.period_ms < since,
            Usage.workload_kind == bindparam("kind", type_=Usage.workload_kind.type),
            Usage.workload_id.in_(bindparam("wids", expanding=True)),
            Usage.kind != "transfer",
        )
        .group_by(Usage.workload_kind, Usage.workload_id)
    )
    recent = select(Usage.kind, Usage.source_id, Usage.period_ms, Usage.workload_kind, Usage.workload_id, Usage.amount).where(
        Usage.tenant_id.in_(tenants), Usage.period_ms >= since
    )
    return union_all(settled, recent)


_USAGE = _usage_statement()


def _figures(s: Session, kind: Kind, rows: list[Any], at: int, period_ms: int) -> Figures:
    """``rows``: each workload's id, tenant_id and created_at, and an instance's disk_gib,
    state and updated_at (``_rows``, or the ORM rows a listing read)."""
    if not rows:
        return Figures({}, {})
    tenant_of = {int(r.id): int(r.tenant_id) for r in rows}
    # the disks that bill now: an instance's until it is deleted
    disks = {int(r.id): int(r.disk_gib) for r in rows if kind == "instance" and r.state != "deleted" and r.disk_gib}
    tenants = sorted(set(tenant_of.values()))
    first = min(dt_to_ms(r.created_at) for r in rows) // period_ms * period_ms

    since = rater.unrated_since(s, at, period_ms)  # as rater.accruing: what a run may still post
    wids = list(tenant_of)
    rated: dict[int, int] = dict.fromkeys(tenant_of, 0)
    posted: set[tuple[str, int, int]] = set()
    args = {"tenants": tenants, "wids": wids, "kind": kind, "first": first, "since": since}
    for k, src, p, wk, wid, amount in s.connection().execute(_USAGE, args):  # plain rows: no ORM handling
        if k is None:  # a workload's records before ``since``, summed
            rated[int(wid)] += int(amount or 0)
            continue
        posted.add((k, int(src), int(p)))
        if k != "transfer" and wk == kind and int(wid) in rated:
            rated[int(wid)] += int(amount)

    # the page's own allocations, read once: what it accrues (unless spot or reserved) and holds now
    allocs = rater.workload_allocations(s, kind, wids, since)
    own = rater.rate_workloads(versions_in_force(s, since, at), allocs, rows if kind == "instance" else [], since, at, period_ms)
    accruing = _accruing(s, kind, tenant_of, tenants, since, posted, at, period_ms, own)
    gpu, storage, currency = _rates(s, kind, allocs, tenants, disks, at)
    held: dict[int, list[Any]] = {}
    for a in sorted((a for a in allocs if a.ended_at is None), key=lambda a: a.node_rank):
        held.setdefault(int(a.instance_id if kind == "instance" else a.job_id), []).append(a)
    return Figures(
        {i: WorkloadCost(kind, i, currency, rated[i], accruing.get(i, 0), gpu.get(i, 0), storage.get(i, 0)) for i in tenant_of},
        held,
    )


def _accruing(
    s: Session,
    kind: Kind,
    tenant_of: dict[int, int],
    tenants: list[int],
    since: int,
    posted: set[tuple[str, int, int]],
    at: int,
    period_ms: int,
    own: Records | None,
) -> dict[int, int]:
    """Per workload: the records a rating run would make now (running work as if it
    stopped at ``at``) that are not posted yet; as ``rater.accruing``, by workload.
    ``own``: the page's records from its own rows (``rater.rate_workloads``); None when it
    held spot or reserved GPUs: then per tenant, as ``rater.accruing`` (and so the bill)
    estimates, or for a page of many tenants (an operator's listing) one platform-wide
    collect, whose spot estimates use the model's utilisation, as the posted records will."""
    out: dict[int, int] = {}
    if own is not None:
        found = [own]
    else:
        scopes = tenants if len(tenants) <= PER_TENANT_UP_TO else [None]
        found = [rater.collect(None, since, at, period_ms, tenant_id=t, open_until_ms=at, session=s) for t in scopes]
    for recs in found:
        c = recs.cols
        want = recs.workload_kinds.index(kind)
        for k, wk, wid, src, p, a in zip(
            c["kind"].tolist(),
            c["workload_kind"].tolist(),
            c["workload_id"].tolist(),
            c["source_id"].tolist(),
            c["period_ms"].tolist(),
            c["amount"].tolist(),
        ):
            name = recs.kinds[k]
            if name == "transfer" or wk != want or wid not in tenant_of or (name, src, p) in posted:
                continue
            out[wid] = out.get(wid, 0) + int(a)
    return out


def _rates(
    s: Session, kind: Kind, allocs: list, tenants: list[int], disks: dict[int, int], at: int
) -> tuple[dict[int, int], dict[int, int], str]:
    """Per workload: GPUs per hour and storage per hour now; and the book's currency.
    ``allocs``: the workloads' allocations since the rated periods (a superset of those
    held at ``at``)."""
    _, book = current_book(s, at)
    at_dt = ms_to_dt(at)
    held = [a for a in allocs if (a.ended_at is None or a.ended_at > at_dt) and a.started_at <= at_dt]
    # the market is read only for GPUs held, and what is allocated only for spot ones
    prices = offers(s, at, busy=any(a.priority == "spot" for a in held)) if held else {}
    covered = _covered(s, tenants, at) if any(a.priority == "reserved" for a in held) else set()
    gpu: dict[int, int] = {}
    for a in held:
        wid = int(a.instance_id if kind == "instance" else a.job_id)
        offer = prices.get(a.gpu_model)
        price = 0 if offer is None else _price(offer, a.priority, a.max_price_micros, a.id in covered)
        milli = len(a.gpu_indices) * a.milli_per_gpu
        gpu[wid] = gpu.get(wid, 0) + div_half_up(milli * price, 1000)
    holding = {int(a.instance_id) for a in held if kind == "instance"}
    storage = {
        iid: div_half_up(gib * (book.storage if iid in holding else book.storage_stopped), book.hours_per_month)
        for iid, gib in disks.items()
    }
    return gpu, storage, book.currency


def _price(offer: Offer, priority: str, bid: int | None, covered: bool) -> int:
    """Per GPU-hour now for an allocation of ``priority``: as the rater prices it."""
    if priority == "spot":
        return offer.spot_per_hour if bid is None else min(offer.spot_per_hour, bid)
    if priority == "reserved" and covered:
        return 0  # its tenant's subscription paid for it
    return offer.on_demand_per_hour


def _covered(s: Session, tenants: list[int], at: int) -> set[int]:
    """Reserved-priority allocations held now that the active subscriptions of their
    tenant cover: per (tenant, model), earliest allocation first while the subscribed
    GPUs last (``plans.cover`` on the allocations held at ``at``)."""
    subs: dict[tuple[int, str], int] = {}
    for t, m, plan, n, cancelled in s.execute(
        select(
            Subscription.tenant_id,
            Subscription.gpu_model,
            Subscription.plan,
            Subscription.gpu_count,
            Subscription.cancelled_ms,
        ).where(Subscription.tenant_id.in_(tenants), Subscription.start_ms <= at, Subscription.end_ms > at)
    ):
        if plan != "monthly" and cancelled is not None and cancelled <= at:
            continue  # a cancelled reserved term ends at once; a cancelled month runs out
        subs[(int(t), m)] = subs.get((int(t), m), 0) + int(n) * 1000
    if not subs:
        return set()
    out: set[int] = set()
    used: dict[tuple[int, str], int] = {}
    for aid, t, model, idx, milli in s.execute(
        select(Allocation.id, Allocation.tenant_id, Allocation.gpu_model, Allocation.gpu_indices, Allocation.milli_per_gpu)
        .where(
            Allocation.tenant_id.in_(tenants),
            Allocation.priority == "reserved",
            or_(Allocation.ended_at.is_(None), Allocation.ended_at > ms_to_dt(at)),
            Allocation.started_at <= ms_to_dt(at),
        )
        .order_by(Allocation.started_at, Allocation.id)
    ):
        key = next((k for k in subs if k[0] == int(t) and resolve_model(model, (k[1],)) is not None), None)
        if key is None:
            continue
        need = len(idx) * milli
        if used.get(key, 0) + need <= subs[key]:
            used[key] = used.get(key, 0) + need
            out.add(int(aid))
    return out


__all__ = ["Figures", "WorkloadCost", "billing_stamp", "costs", "figures_of_rows"]
