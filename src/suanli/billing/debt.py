"""A stopped disk's storage charge accrues as debt only within a limit.

A prepaid tenant whose money ran out has its running work stopped, but its instances
keep their disks, and a disk costs storage by the hour. That charge goes on as debt
until the balance reaches the tenant's floor: minus (credit limit + storage debt
limit). Past the floor the storage is still rated and posted, but its charge is
``waived`` (the record keeps both figures, so nothing is hidden or lost) and the disk
is kept; after a top-up, storage is charged again from the next record on.

Only storage is limited: GPU time during a notice is work the tenant ran. Post-paid
tenants have no floor. Records already posted are never changed (their key is final),
so a re-run limits only what it newly posts.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from suanli.billing.posting import Records
from suanli.billing.store import balances
from suanli.billing.tables import Usage
from suanli.billing.terms import terms_of


def floors(s: Session, tenant_ids: Iterable[int]) -> dict[int, int]:
    """Per tenant the lowest balance storage may take it to; post-paid tenants absent."""
    return {t: f for t, terms in terms_of(s, tenant_ids).items() if (f := terms.storage_floor()) is not None}


def limit(recs: Records, new: np.ndarray, floor: dict[int, int], bal: dict[int, int]) -> Records:
    """``recs`` with each floored tenant's new storage charges cut so that its balance,
    after this run's new charges, stays at or above its floor; what is cut goes to
    ``waived``. ``new`` marks the records not yet posted. Earliest storage first. Pure."""
    amount = recs.cols["amount"].copy()
    waived = recs.cols["waived"].copy()
    storage = recs.kinds.index("storage")
    tenant, kind = recs.cols["tenant_id"], recs.cols["kind"]
    for t, low in floor.items():
        mine = new & (tenant == t)
        left = bal.get(t, 0) - int(amount[mine & (kind != storage)].sum()) - low
        rows = np.flatnonzero(mine & (kind == storage))
        for k in rows[np.lexsort((recs.cols["source_id"][rows], recs.cols["start_ms"][rows]))]:
            charge = min(int(amount[k]), max(left, 0))
            waived[k] += int(amount[k]) - charge
            amount[k] = charge
            left -= charge
    cols = dict(recs.cols, amount=amount, waived=waived)
    return Records(cols, recs.kinds, recs.workload_kinds, recs.models, recs.plans, recs.currency)


def apply(s: Session, recs: Records) -> Records:
    """``limit`` with what it reads: the floors of tenants with storage in ``recs``,
    their balances, and which of their records are posted already."""
    tenant, kind = recs.cols["tenant_id"], recs.cols["kind"]
    floor = floors(s, {int(t) for t in np.unique(tenant[kind == recs.kinds.index("storage")])})
    bal = balances(s, floor)
    # a tenant that stays above its floor even if every record here were new needs no more
    floor = {t: low for t, low in floor.items() if bal[t] - int(recs.cols["amount"][tenant == t].sum()) < low}
    if not floor:
        return recs
    sel = np.flatnonzero(np.isin(tenant, list(floor)))
    keys = list(
        zip([recs.kinds[int(k)] for k in kind[sel]], recs.cols["source_id"][sel].tolist(), recs.cols["period_ms"][sel].tolist())
    )
    posted: set[tuple[str, int, int]] = set()
    for lo in range(0, len(keys), 500):
        q = select(Usage.kind, Usage.source_id, Usage.period_ms).where(
            tuple_(Usage.kind, Usage.source_id, Usage.period_ms).in_(keys[lo : lo + 500])
        )
        posted.update((str(a), int(b), int(c)) for a, b, c in s.execute(q))
    new = np.zeros(len(recs), dtype=bool)
    new[sel] = [k not in posted for k in keys]
    return limit(recs, new, floor, bal)
