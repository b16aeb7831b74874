"""The cost figures of a page of instances or jobs, kept for a few seconds.

Why: a listing's cost figures (``billing.workload_cost``) were most of its work, 13 of a
list's 16 statements (rated sums, posted records, a rater pass per tenant), while the
console and ``watch``-style scripts ask for the same page every few seconds. A page asked
again within ``max_age_ms`` is answered from memory when nothing that sets its figures
changed: each row's state (every transition stamps ``updated_at``: placed, stopped,
failed over, deleted) and the billing stamp (a rating run, a price version, a
subscription bought or cancelled; ``workload_cost.billing_stamp``, one statement).
What may be older than the request, by at most ``max_age_ms`` (5 s, inside billing's 10-s
visibility rule): what accrued meanwhile, and a spot rate following the market's
utilisation. Each API worker process keeps its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from suanli.billing import workload_cost
from suanli.billing.workload_cost import Kind, WorkloadCost
from suanli.clock import SYSTEM, Clock
from suanli.db.models import Instance, Job
from suanli.db.session import Database

Figures = dict[int, WorkloadCost]


@dataclass
class CostCache:
    max_age_ms: int = 5_000
    size: int = 4_096  # pages; when full it starts again empty
    clock: Clock = SYSTEM  # ages the pages (the figures themselves are at the wall clock's now)
    _pages: dict[tuple, tuple[int, tuple, Figures]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def costs(self, db: Database, kind: Kind, rows: Sequence[Instance] | Sequence[Job]) -> Figures:
        """``workload_cost.costs`` of ``rows``, computed at most ``max_age_ms`` ago for
        the same rows in the same states under the same billing stamp."""
        key = (kind, tuple(sorted((r.id, r.state, r.updated_at) for r in rows)))
        stamp = workload_cost.billing_stamp(db)
        at = self.clock.now_ms()
        with self._lock:
            hit = self._pages.get(key)
        if hit is not None and hit[1] == stamp and 0 <= at - hit[0] <= self.max_age_ms:
            return hit[2]
        found = workload_cost.costs(db, kind, [r.id for r in rows])
        with self._lock:
            if len(self._pages) >= self.size:
                self._pages.clear()
            self._pages[key] = (at, stamp, found)
        return found

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()


__all__ = ["CostCache"]
