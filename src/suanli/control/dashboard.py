"""The dashboard's figures over a window of days: what a tenant spent per day, and for
operators the platform's allocation per GPU model over time, revenue per day, the queue
and node health.

Each figure is one indexed read (``billing_usage`` by tenant and period, allocations that
overlap the window, nodes, waiting rows) summed here in buckets, so the page costs the
same however much history the database holds. Amounts are micro-units as the ledger keeps
them; the caller formats them. Allocation is the share of a model's GPUs held, averaged
over each bucket: an interval counts for the part of the bucket it covers.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from suanli.billing.tables import Usage
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Gpu, Instance, Job, Node

DAY_MS = 86_400_000
MAX_DAYS = 90
#: waiting states of each kind, as the scheduler reads them
WAITING = {"instance": ("pending",), "job": ("queued", "requeued")}


@dataclass
class Series:
    """Values at bucket starts (ISO times), one list per name."""

    starts: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Dashboard:
    days: int
    currency: str
    spend: Series  #: the tenant's rated spend per day (micro-units)
    cluster: dict | None = None  #: operators only: allocation (over time and held now), revenue, queue, nodes


def _day_starts(now: datetime, days: int) -> list[datetime]:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - timedelta(days=days - 1 - i) for i in range(days)]


def _per_day(s: Session, starts: list[datetime], tenant_id: int | None) -> list[float]:
    """Rated amounts per day, by each usage period's start (one grouped read)."""
    first_ms = int(starts[0].timestamp() * 1000)
    day = (Usage.start_ms - first_ms) // DAY_MS  # floor division on both databases
    q = select(day.label("d"), func.sum(Usage.amount)).where(Usage.start_ms >= first_ms)
    if tenant_id is not None:  # the tenant index: (tenant_id, period_ms)
        q = q.where(Usage.tenant_id == tenant_id, Usage.period_ms >= first_ms - DAY_MS)
    out = [0.0] * len(starts)
    for d, amount in s.execute(q.group_by("d")).all():
        if d is not None and 0 <= int(d) < len(out):
            out[int(d)] = float(amount or 0)
    return out


def _allocation(s: Session, now: datetime, days: int) -> Series:
    """Per GPU model, the share of its GPUs held in each bucket (hours for a day or two,
    six hours up to a fortnight, days beyond)."""
    bucket = timedelta(hours=1 if days <= 2 else 6 if days <= 14 else 24)
    n = int(timedelta(days=days) / bucket)
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - n * bucket
    totals = dict(
        s.execute(select(Node.gpu_model, func.count(Gpu.id)).join(Gpu, Gpu.node_id == Node.id).group_by(Node.gpu_model)).all()
    )
    held: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    q = select(
        Allocation.gpu_model, Allocation.gpu_indices, Allocation.milli_per_gpu, Allocation.started_at, Allocation.ended_at
    ).where(Allocation.started_at < end, or_(Allocation.ended_at.is_(None), Allocation.ended_at > start))
    for model, indices, milli, started, ended in s.execute(q):
        gpus = len(indices) * milli / 1000
        lo, hi = max(started, start), min(ended or now, end)
        i = int((lo - start) / bucket)
        while i < n and lo < hi:
            b_end = start + (i + 1) * bucket
            held[model][i] += gpus * (min(hi, b_end) - lo) / bucket
            lo, i = b_end, i + 1
    starts = [(start + i * bucket).isoformat() for i in range(n)]
    return Series(starts, {m: [round(v / totals[m], 6) if totals.get(m) else 0.0 for v in held[m]] for m in sorted(totals)})


def _queue(s: Session, reasons_of: Callable[[str, list[int]], dict[int, str]]) -> dict:
    """Waiting work: how much, and why, by the reason the last scheduling pass gave
    (``reasons_of``: those reasons for a list of rows, in one read)."""
    reasons: Counter[str] = Counter()
    for kind, model in (("instance", Instance), ("job", Job)):
        rows = s.execute(select(model.id, model.reason).where(model.state.in_(WAITING[kind]))).all()
        given = reasons_of(kind, [wid for wid, _ in rows])
        for wid, stored in rows:
            reasons[given.get(wid) or stored or "not tried yet"] += 1
    return {"waiting": sum(reasons.values()), "reasons": [{"reason": r, "count": c} for r, c in reasons.most_common(10)]}


def _held_now(s: Session) -> dict[str, dict[str, float]]:
    """Per GPU model, the GPUs held now (shares summed) and how many there are."""
    totals = dict(
        s.execute(select(Node.gpu_model, func.count(Gpu.id)).join(Gpu, Gpu.node_id == Node.id).group_by(Node.gpu_model)).all()
    )
    held: Counter[str] = Counter()
    for model, indices, milli in s.execute(
        select(Allocation.gpu_model, Allocation.gpu_indices, Allocation.milli_per_gpu).where(Allocation.ended_at.is_(None))
    ):
        held[model] += len(indices) * milli / 1000
    return {m: {"held": round(held[m], 3), "total": totals[m]} for m in sorted(totals)}


def _nodes(s: Session) -> dict:
    states = dict(s.execute(select(Node.state, func.count(Node.id)).group_by(Node.state)).all())
    return {"total": sum(states.values()), "states": states}


def dashboard(
    s: Session,
    tenant_id: int,
    currency: str,
    days: int,
    operator: bool,
    reasons_of: Callable[[str, list[int]], dict[int, str]],
    now: datetime | None = None,
) -> Dashboard:
    """The figures for a tenant's dashboard; ``operator`` adds the platform's."""
    now = now or utcnow()
    starts = _day_starts(now, days)
    labels = [d.date().isoformat() for d in starts]
    board = Dashboard(days, currency, Series(labels, {"spend": _per_day(s, starts, tenant_id)}))
    if operator:
        board.cluster = {
            "allocation": _allocation(s, now, days),
            "held_now": _held_now(s),
            "revenue": Series(labels, {"revenue": _per_day(s, starts, None)}),
            "queue": _queue(s, reasons_of),
            "nodes": _nodes(s),
        }
    return board
