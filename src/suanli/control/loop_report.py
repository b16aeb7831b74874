"""What the control loop tells the API processes, through the database: its counters
(one ``loop_status`` row) and why each waiting row waits (``waiting_reasons``).

``suanli server`` runs the loop in a worker process apart from the API's workers
(``api.supervisor``), so what the loop knows in memory must be written where they read.
The loop writes after a tick: the reasons only when they changed (a diff: rows that stopped
waiting deleted, new or changed ones written), the counters at most every
``STATUS_EVERY_S``; a reader does one indexed query.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import delete, select, tuple_

from suanli.control.waiting import Reason
from suanli.db.clock import utcnow
from suanli.db.models import LoopStatus, WaitingReason
from suanli.db.session import Database

#: the counters are written at most this often (a write per tick would cost SQLite's lock)
STATUS_EVERY_S = 1.0

Key = tuple[str, int]


@dataclass(frozen=True)
class Counters:
    owner: str
    ticks: int
    launched: int
    conflicts: int
    policy_errors: int
    last_tick_s: float
    waiting: int
    updated_at: datetime | None
    #: the reclaim phases' counters (``control.plane.PhaseStats``)
    notices: int = 0
    reclaimed: int = 0
    migrations: int = 0
    failed_over: int = 0


class Publisher:
    """The loop's side: remembers what it last wrote, so a tick that changed nothing writes nothing."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._written: dict[Key, tuple[str, str, datetime]] = {}
        self._loaded = False
        self._status_at = -float("inf")

    def load_since(self) -> dict[Key, tuple[str, datetime]]:
        """The reasons a previous loop (a restarted worker's) wrote: their ``since`` carries on."""
        with self.db.reads() as s:
            rows = s.scalars(select(WaitingReason)).all()
        self._written = {(r.kind, r.workload_id): (r.code, r.detail, r.since) for r in rows}
        self._loaded = True
        return {k: (code, since) for k, (code, _, since) in self._written.items()}

    def publish(
        self,
        counters: Counters,
        unplaced: dict[Key, Reason],
        since: dict[Key, tuple[str, datetime]],
        force: bool = False,
    ) -> None:
        if not self._loaded:
            self.load_since()
        now = utcnow()
        want = {k: (r.code, r.detail, since[k][1] if k in since else now) for k, r in unplaced.items()}
        gone = [k for k in self._written if k not in want]
        changed = {k: v for k, v in want.items() if self._written.get(k) != v}
        status_due = force or time.monotonic() - self._status_at >= STATUS_EVERY_S
        if not gone and not changed and not status_due:
            return
        with self.db.transaction() as s:
            for chunk in _chunks(gone + list(changed), 500):
                s.execute(delete(WaitingReason).where(tuple_(WaitingReason.kind, WaitingReason.workload_id).in_(chunk)))
            s.add_all(
                WaitingReason(kind=k[0], workload_id=k[1], code=code, detail=detail, since=at)
                for k, (code, detail, at) in changed.items()
            )
            if status_due:
                row = s.get(LoopStatus, 1)
                if row is None:
                    row = LoopStatus(id=1)
                    s.add(row)
                for name, value in counters.__dict__.items():
                    if name != "updated_at":
                        setattr(row, name, value)
                row.updated_at = now
        self._written = want
        if status_due:
            self._status_at = time.monotonic()


def _chunks(keys: list[Key], n: int) -> Iterable[list[Key]]:
    for i in range(0, len(keys), n):
        yield keys[i : i + n]


def counters(db: Database) -> Counters | None:
    """The loop's counters as it last wrote them (None: no loop has run on this database)."""
    with db.reads() as s:
        row = s.get(LoopStatus, 1)
        if row is None:
            return None
        return Counters(**{f.name: getattr(row, f.name) for f in fields(Counters)})


def waiting(db: Database, kind: str, ids: Iterable[int]) -> dict[int, tuple[Reason, datetime | None]]:
    """Why each of these rows waits, and since when (rows the loop saw waiting only)."""
    wanted = list(ids)
    if not wanted:
        return {}
    got: dict[int, tuple[Reason, datetime | None]] = {}
    with db.reads() as s:
        for i in range(0, len(wanted), 500):
            rows = s.scalars(
                select(WaitingReason).where(WaitingReason.kind == kind, WaitingReason.workload_id.in_(wanted[i : i + 500]))
            )
            got.update({r.workload_id: (Reason(r.code, r.detail), r.since) for r in rows})
    return got
