"""A deterministic event heap: (time, kind, sequence), as in SimPy's core.

Events of one instant are applied in kind order (finishes free capacity before
arrivals compete for it) and, within a kind, in the order they were pushed.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from enum import IntEnum
from typing import Any


class EventKind(IntEnum):
    FINISH = 0
    NODE_RECOVER = 1
    NODE_FAIL = 2
    NOTICE_EXPIRED = 3
    ARRIVAL = 4


#: Events that belong to the workload; faults and repairs go on forever.
WORK = (EventKind.FINISH, EventKind.NOTICE_EXPIRED, EventKind.ARRIVAL)


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self.pending: Counter[EventKind] = Counter()

    def push(self, at: float, kind: EventKind, payload: Any) -> None:
        heapq.heappush(self._heap, (at, int(kind), next(self._seq), payload))
        self.pending[kind] += 1

    def __bool__(self) -> bool:
        return bool(self._heap)

    def peek_time(self) -> float:
        return self._heap[0][0]

    def pop_instant(self):
        """Yield (kind, payload) for every event at the earliest time, in order
        (events pushed for that same instant while yielding are included)."""
        at = self._heap[0][0]
        while self._heap and self._heap[0][0] == at:
            _, kind, _, payload = heapq.heappop(self._heap)
            self.pending[EventKind(kind)] -= 1
            yield EventKind(kind), payload

    def work_pending(self) -> int:
        return sum(self.pending[k] for k in WORK)
