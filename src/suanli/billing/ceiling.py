"""The most a tenant's unposted work can come to, from sums instead of a rating pass.

The prepaid rules (``billing.funds``) only ever ask whether what a tenant has left,
balance less what is accruing, is above some amount; less accruing can only leave more.
So a tenant that passes with a *ceiling* of its accruing passes with the exact figure
too, and the exact figure (``rater.accruing_many``: read every interval, rate it, leave
out what is posted) is needed only when the ceiling would change the answer. Why: that
rating pass was most of the CPU of a create, and the control loop asks for every tenant
with work on every pass.

The ceiling takes what ``accruing_many`` rates (GPU intervals, disks, transfers since
the unrated period) and bounds each record rather than rating it:

- an interval's records from ``since`` to ``at`` hold at most ``ceil((at - since) / 6 s)``
  units in all (units are counted from the interval's own start, so its records
  telescope), and at most one record per period;
- every record's price is at most the highest price of any model and plan in the price
  versions in force from ``since`` to ``at`` (spot stays between its floor and cap; a
  bid or a subscription only lowers it);
- every record's amount is its exact product, divided and rounded half up: at most one
  micro-unit above the product.

Posted records are counted too: that only raises the ceiling.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import astuple, dataclass
from fractions import Fraction

from sqlalchemy import bindparam, cast, func, literal, null, or_, select, union_all
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import BindParameter, CompoundSelect

from suanli.billing import rater
from suanli.billing.metering import UNIT_MS
from suanli.billing.price_versions import in_force, versions_in_force
from suanli.billing.pricebook import PriceBook
from suanli.billing.rating import GPU_DEN, UNITS_PER_HOUR, price_table
from suanli.billing.store import dt_to_ms, ms_to_dt
from suanli.billing.tables import Transfer
from suanli.db.models import Allocation, Instance


@dataclass(frozen=True)
class Held:
    """GPU slots or disks a tenant holds or held since the unrated period."""

    amount: int = 0  #: thousandths of a GPU, or GiB, summed over the rows
    rows: int = 0
    first_ms: int = 0  #: the earliest start (GPU) or creation (disk)


@dataclass(frozen=True)
class Sums:
    """What a tenant has that may hold unrated records since the unrated period."""

    gpus: Held = Held()
    disks: Held = Held()
    transfer_milli: int = 0  #: thousandths of a GiB
    transfers: int = 0


@dataclass(frozen=True)
class Dearest:
    """The highest prices any record from the unrated period on may carry."""

    gpu_hour: int  #: per GPU-hour, any model and plan
    gib_hour: Fraction  #: per GiB-hour of disk, running or stopped
    per_gib: int  #: per GiB transferred


def dearest(books: list[tuple[int, int, PriceBook]], since_ms: int, at_ms: int) -> Dearest:
    """``Dearest`` of the price versions ``books`` (oldest first, as ``store.versions``
    gives them) in force from ``since_ms`` to ``at_ms``. Pure."""
    live = [b for _, _, b in in_force(books, since_ms, at_ms)]
    return Dearest(
        max((int(price_table(b, list(b.gpus)).max(initial=0)) for b in live), default=0),
        max((Fraction(max(b.storage, b.storage_stopped), b.hours_per_month) for b in live), default=Fraction(0)),
        max((b.transfer for b in live), default=0),
    )


def ceiling(books: list[tuple[int, int, PriceBook]], since_ms: int, at_ms: int, period_ms: int, sums: Sums) -> int:
    """At least what ``rater.accruing_many`` gives a tenant with ``sums`` at ``at_ms``,
    unrated from ``since_ms`` (a period boundary), under the price versions ``books``. Pure."""
    return bound(dearest(books, since_ms, at_ms), since_ms, at_ms, period_ms, sums)


def bound(prices: Dearest, since_ms: int, at_ms: int, period_ms: int, sums: Sums) -> int:
    """``ceiling`` with the prices worked out once for many tenants. Pure."""

    def most(held: Held, per_unit: Fraction) -> int:
        """Every row's units from its first unrated instant to ``at_ms`` at ``per_unit``
        for each thousandth of a GPU or GiB, plus one micro-unit per record."""
        start = max(since_ms, held.first_ms)
        units = -(-max(at_ms - start, 0) // UNIT_MS)
        records = max(at_ms // period_ms - start // period_ms + 1, 0)
        return _ceil(units * held.amount * per_unit) + records * held.rows

    gpu = most(sums.gpus, Fraction(prices.gpu_hour, GPU_DEN))
    disk = most(sums.disks, prices.gib_hour / UNITS_PER_HOUR)
    transfer = -(-sums.transfer_milli * prices.per_gib // 1000) + sums.transfers
    return gpu + disk + transfer


def _ceil(x: Fraction) -> int:
    return -(-x.numerator // x.denominator)


def _statement() -> CompoundSelect:
    """The three sums of ``sums``, built once: a create asks for them, and building the
    expression cost more than running it."""
    ids: BindParameter[list[int]] = bindparam("ids", expanding=True)
    since = bindparam("since", type_=Allocation.started_at.type)
    milli = func.json_array_length(Allocation.gpu_indices) * Allocation.milli_per_gpu
    gpus = select(literal("gpu"), Allocation.tenant_id, func.sum(milli), func.count(), func.min(Allocation.started_at)).where(
        Allocation.tenant_id.in_(ids), or_(Allocation.ended_at.is_(None), Allocation.ended_at >= since)
    )
    disks = select(
        literal("disk"), Instance.tenant_id, func.sum(Instance.disk_gib), func.count(), func.min(Instance.created_at)
    ).where(Instance.tenant_id.in_(ids), Instance.disk_gib > 0, or_(Instance.state != "deleted", Instance.updated_at >= since))
    moved = select(  # transfers are rated as they are: no start
        literal("transfer"),
        Transfer.tenant_id,
        func.sum(Transfer.gib_milli),
        func.count(),
        cast(null(), Allocation.started_at.type),
    ).where(Transfer.tenant_id.in_(ids), Transfer.ts_ms >= bindparam("since_ms"), Transfer.ts_ms <= bindparam("at_ms"))
    return union_all(*(q.group_by(q.selected_columns[1]) for q in (gpus, disks, moved)))


_SUMS = _statement()


def sums(s: Session, tenant_ids: Iterable[int], since_ms: int, at_ms: int) -> dict[int, Sums]:
    """Each tenant's ``Sums``, in one statement, over the rows ``rater.accruing_many``
    reads for the same ``since_ms`` and ``at_ms``."""
    ids = sorted(set(tenant_ids))
    found: dict[int, dict[str, Held]] = {t: {} for t in ids}
    args = {"ids": ids, "since": ms_to_dt(since_ms), "since_ms": since_ms, "at_ms": at_ms}
    for what, tenant, total, count, first in s.connection().execute(_SUMS, args):  # plain rows: no ORM handling
        found[tenant][what] = Held(int(total or 0), int(count), dt_to_ms(first) if first is not None else 0)
    return {
        t: Sums(f.get("gpu", Held()), f.get("disk", Held()), *astuple(f.get("transfer", Held()))[:2]) for t, f in found.items()
    }


def ceilings(s: Session, tenant_ids: Iterable[int], at_ms: int, period_ms: int = 3_600_000) -> dict[int, int]:
    """``ceiling`` of each tenant: at least its ``rater.accruing_many`` figure."""
    since = rater.unrated_since(s, at_ms, period_ms)
    prices = dearest(versions_in_force(s, since, at_ms), since, at_ms)
    return {t: bound(prices, since, at_ms, period_ms, x) for t, x in sums(s, tenant_ids, since, at_ms).items()}
