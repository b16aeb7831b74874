"""The audit log: who did what to which object, from where, and how it ended.

Records are append-only and hash-chained: each carries the SHA-256 of the previous
record's hash and its own fields, and ``audit_head`` keeps the tip. Changing a record,
deleting one from the middle or the end, or reordering them breaks the chain at that
record, which ``verify`` names. (Whoever can write the database can also rewrite the
whole chain; the chain makes an edit evident, it does not make one impossible. Export the
log, or its tip, elsewhere to pin it.)

Every append first updates the head row, which takes its lock (a row lock on PostgreSQL,
the write lock on SQLite), so concurrent appends are serialised and the chain never
forks. That lock is one for the whole platform, held until the appending transaction
commits: an API process writes through a ``Writer``, which appends what its threads
have waiting in one transaction (group commit), so the lock is taken once per batch
rather than once per request. Retention deletes the oldest records and appends an
``audit.pruned`` record that names the hash the remaining chain starts from, so a
pruned start is told from a deleted one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from suanli.db.clock import utcnow
from suanli.db.models import AuditHead, AuditRecord
from suanli.db.session import Database

GENESIS = "0" * 64
#: seed 004: audit records are kept for seven years
DEFAULT_RETENTION_DAYS = 7 * 365 + 2
PRUNED = "audit.pruned"


@dataclass(frozen=True)
class Entry:
    """One thing done: ``action`` (``instances.stop``), ``object`` (``instance/7``),
    ``result`` (the HTTP status, or ``ok``/``denied`` for what is not a request)."""

    actor: str
    action: str
    object: str = ""
    result: str = "ok"
    actor_id: int | None = None
    actor_role: str = ""
    tenant_id: int | None = None
    source: str = ""
    detail: dict = field(default_factory=dict)


_COLUMNS = [c.key for c in AuditRecord.__table__.columns]


def _fields(r: AuditRecord) -> list:
    return [
        r.id,
        r.at.isoformat(),
        r.actor_id,
        r.actor,
        r.actor_role,
        r.tenant_id,
        r.action,
        r.object,
        r.source,
        r.result,
        r.detail,
    ]


def record_hash(prev_hash: str, r: AuditRecord) -> str:
    """SHA-256 over the previous hash and this record's fields, canonical JSON."""
    body = json.dumps([prev_hash, *_fields(r)], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def append(session: Session, entry: Entry, at: datetime | None = None) -> AuditRecord:
    """Add ``entry`` at the chain's tip, in ``session``'s transaction."""
    return append_all(session, [entry], at)[0]


def append_all(session: Session, entries: list[Entry], at: datetime | None = None) -> list[AuditRecord]:
    """Add ``entries`` at the chain's tip in their order, in ``session``'s transaction:
    one statement takes the lock and reads the tip, one inserts, one moves the tip. The
    records are written as plain rows (an append-only table: the session never needs
    them as its objects), without the ORM's unit of work."""
    head = session.connection()
    moved = update(AuditHead).where(AuditHead.id == 1).values(last_id=AuditHead.last_id + len(entries))
    last_id, prev_hash = head.execute(moved.returning(AuditHead.last_id, AuditHead.last_hash)).one()  # the lock
    when = at or utcnow()
    records = []
    for n, entry in enumerate(entries, start=last_id - len(entries) + 1):
        r = AuditRecord(
            id=n,
            at=when,
            actor_id=entry.actor_id,
            actor=_clip(entry.actor, 100),
            actor_role=_clip(entry.actor_role, 20),
            tenant_id=entry.tenant_id,
            action=_clip(entry.action, 100),
            object=_clip(entry.object, 200),
            source=_clip(entry.source, 100),
            result=_clip(entry.result, 40),
            detail=entry.detail,
            prev_hash=prev_hash,
        )
        r.hash = prev_hash = record_hash(prev_hash, r)
        records.append(r)
    head.execute(insert(AuditRecord), [{c: getattr(r, c) for c in _COLUMNS} for r in records])
    head.execute(update(AuditHead).where(AuditHead.id == 1).values(last_hash=prev_hash))
    return records


def write(db: Database, entry: Entry) -> AuditRecord:
    """``append`` in a transaction of its own."""
    with db.transaction() as s:
        return append(s, entry)


@dataclass
class _Waiting:
    entry: Entry
    record: AuditRecord | None = None
    error: BaseException | None = None


class Writer:
    """``write`` for the many threads of one process (the API's handlers), by group
    commit: the first thread to find no batch in flight appends every entry waiting, its
    own and the others', in one transaction; the others find theirs written when it
    commits. Every caller still returns only once its record is committed. A batch that
    fails is retried an entry at a time, so one bad entry fails only its own caller."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._waiting: list[_Waiting] = []
        self._queue = threading.Lock()  #: guards ``_waiting``
        self._writing = threading.Lock()  #: one batch in flight per process

    def write(self, entry: Entry) -> AuditRecord:
        mine = _Waiting(entry)
        with self._queue:
            self._waiting.append(mine)
        with self._writing:
            if mine.record is None and mine.error is None:
                with self._queue:
                    batch, self._waiting = self._waiting, []
                self._append(batch)
        if mine.error is not None:
            raise mine.error
        assert mine.record is not None
        return mine.record

    def _append(self, batch: list[_Waiting]) -> None:
        try:
            with self.db.transaction() as s:
                records = append_all(s, [w.entry for w in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:
                for w in batch:
                    self._append([w])
            return
        except BaseException as exc:  # interrupted: no caller may wait for a batch nobody writes
            for w in batch:
                w.error = exc
            raise
        for w, r in zip(batch, records, strict=True):
            w.record = r


@dataclass(frozen=True)
class Verdict:
    ok: bool
    checked: int
    #: the first record that does not chain (None: the break is after the last record)
    bad_id: int | None = None
    problem: str = ""


def _chain(s: Session, batch: int = 2000) -> Iterator[AuditRecord]:
    last = 0
    while True:
        rows = list(s.scalars(select(AuditRecord).where(AuditRecord.id > last).order_by(AuditRecord.id).limit(batch)))
        if not rows:
            return
        yield from rows
        last = rows[-1].id


def verify(db: Database) -> Verdict:
    """Walk the chain from its first record to the head; name the first that breaks it."""
    with db.sessions() as s:
        head = s.execute(select(AuditHead.last_id, AuditHead.last_hash).where(AuditHead.id == 1)).one()
        prev_hash: str | None = None
        prev_id = n = 0
        for r in _chain(s):
            if prev_hash is None:  # the start: the genesis, or where retention pruned
                prev_hash = GENESIS if r.prev_hash == GENESIS else _pruned_anchor(s, r)
                if prev_hash is None:
                    return Verdict(False, n, r.id, f"record {r.id} follows a record that is missing (deleted?)")
                prev_id = r.id - 1
            elif r.id != prev_id + 1:
                return Verdict(False, n, r.id, f"records {prev_id + 1}..{r.id - 1} are missing (deleted?)")
            if r.prev_hash != prev_hash:
                return Verdict(
                    False, n, r.id, f"record {r.id} does not follow record {prev_id}: it or its predecessor was changed"
                )
            if record_hash(r.prev_hash, r) != r.hash:
                return Verdict(False, n, r.id, f"record {r.id} was changed after it was written")
            prev_hash, prev_id, n = r.hash, r.id, n + 1
        if (prev_id or 0) != head.last_id or (prev_hash or GENESIS) != head.last_hash:
            first_missing = (prev_id or 0) + 1
            return Verdict(
                False,
                n,
                first_missing,
                f"the log ends at record {prev_id or 0} but its head says {head.last_id} (records deleted?)",
            )
        return Verdict(True, n)


def _pruned_anchor(s: Session, first: AuditRecord) -> str | None:
    """The hash the chain starts from after retention pruned before ``first``, if a
    prune record vouches for it."""
    for p in s.scalars(select(AuditRecord).where(AuditRecord.action == PRUNED).order_by(AuditRecord.id.desc())):
        if p.detail.get("first_kept") == first.id and p.detail.get("anchor") == first.prev_hash:
            return first.prev_hash
    return None


def prune(db: Database, keep_days: int, now: datetime | None = None) -> int:
    """Delete the records older than ``keep_days`` (never the newest: the chain must
    start somewhere) and append an ``audit.pruned`` record that vouches for the record
    the chain now starts from. Returns how many were deleted."""
    cutoff = (now or utcnow()) - timedelta(days=keep_days)
    with db.transaction() as s:
        s.execute(update(AuditHead).where(AuditHead.id == 1).values(last_id=AuditHead.last_id))  # the lock, first
        tip = s.scalar(select(AuditHead.last_id).where(AuditHead.id == 1)) or 0
        last_old = s.scalar(select(func.max(AuditRecord.id)).where(AuditRecord.at < cutoff, AuditRecord.id < tip))
        if last_old is None:
            return 0
        first_kept = s.scalar(select(AuditRecord).where(AuditRecord.id > last_old).order_by(AuditRecord.id).limit(1))
        assert first_kept is not None  # the tip is kept
        gone = s.scalar(select(func.count()).select_from(AuditRecord).where(AuditRecord.id <= last_old)) or 0
        s.execute(delete(AuditRecord).where(AuditRecord.id <= last_old))
        detail = {"deleted": gone, "before": cutoff.isoformat(), "first_kept": first_kept.id, "anchor": first_kept.prev_hash}
        append(s, Entry(actor="suanli", actor_role="system", action=PRUNED, object="audit", detail=detail))
        return gone


@dataclass(frozen=True)
class Query:
    tenant_id: int | None = None
    actor: str | None = None
    action: str | None = None
    since: datetime | None = None
    after_id: int = 0
    limit: int = 100


def records(db: Database, q: Query) -> list[AuditRecord]:
    """Records matching ``q``, oldest first, after ``after_id`` (the pager)."""
    stmt = select(AuditRecord).where(AuditRecord.id > q.after_id)
    if q.tenant_id is not None:
        stmt = stmt.where(AuditRecord.tenant_id == q.tenant_id)
    if q.actor:
        stmt = stmt.where(AuditRecord.actor == q.actor)
    if q.action:
        stmt = stmt.where(AuditRecord.action.startswith(q.action, autoescape=True))
    if q.since is not None:
        stmt = stmt.where(AuditRecord.at >= q.since)
    with db.sessions() as s:
        return list(s.scalars(stmt.order_by(AuditRecord.id).limit(q.limit)))


def as_dict(r: AuditRecord) -> dict:
    return {
        "id": r.id,
        "at": r.at.isoformat(),
        "actor_id": r.actor_id,
        "actor": r.actor,
        "actor_role": r.actor_role,
        "tenant_id": r.tenant_id,
        "action": r.action,
        "object": r.object,
        "source": r.source,
        "result": r.result,
        "detail": r.detail,
        "prev_hash": r.prev_hash,
        "hash": r.hash,
    }
