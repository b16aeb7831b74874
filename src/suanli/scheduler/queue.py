"""Pending work, in the order the scheduler serves it.

Order: priority class (reserved, on-demand, spot), then a fairness key, then
arrival. A scheduling pass walks the queue in that order and places what fits;
work that does not fit waits while later, smaller work may go ahead (backfill).
``strict_fifo`` turns backfill off: the pass stops at the first request that does
not fit, the classic FIFO baseline.

The fairness hook (``fair_key``) orders work of one class, e.g. by each tenant's
current usage against its quota, so one tenant's burst does not starve the rest.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

from suanli.scheduler.model import Request


@dataclass(order=True)
class _Entry:
    sort_key: tuple
    key: Hashable = field(compare=False)
    request: Request = field(compare=False)


class PendingQueue:
    def __init__(self, fair_key: Callable[[Hashable, Request], float] | None = None) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        self._sorted: list[_Entry] = []  # service order; may hold removed entries until compacted
        self._seq = itertools.count()
        self.fair_key = fair_key

    def push(self, key: Hashable, request: Request, arrival: float) -> None:
        """Queue ``key``; pushing a key already queued is a no-op (idempotent requeue)."""
        if key in self._entries:
            return
        fair = self.fair_key(key, request) if self.fair_key else 0.0
        sort_key = (-request.priority.rank, fair, arrival, next(self._seq))
        entry = _Entry(sort_key, key, request)
        self._entries[key] = entry
        bisect.insort(self._sorted, entry)

    def remove(self, key: Hashable) -> None:
        self._entries.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def ordered(self) -> Iterator[tuple[Hashable, Request]]:
        """A snapshot in service order; safe to ``remove`` and ``push`` while iterating."""
        if len(self._sorted) > 2 * len(self._entries) + 64:
            self._sorted = [e for e in self._sorted if self._entries.get(e.key) is e]
        for entry in list(self._sorted):
            if self._entries.get(entry.key) is entry:
                yield entry.key, entry.request
