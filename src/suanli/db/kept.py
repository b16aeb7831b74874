"""The catalog, read once per process and kept while the database says it has not changed.

The catalog is what every request reads and few change, and seldom: the images offered,
the nodes' sizes, the price versions and subscriptions, the tenants' settings and
payment terms, and the rating watermark, which a rating run moves every 10 s
(``CATALOG_TABLES``). A create read each of them itself, nine of its sixteen statements
(issue 18, session 39). Migration 0020's triggers count every commit that changes one of
them under tenant ``CATALOG`` (-1) of ``db.changes``, so a transaction asks one count
(``token``) and answers every catalog read from the values kept with that count.

The count is read so that a kept value is never older than the transaction reading it:
- on SQLite, from ``page_changes`` in the transaction itself, so count and values come
  from one snapshot;
- on PostgreSQL, by the change watch's look (``db.changes``), begun before the values are
  read, which sees every commit made before it (a commit made between the look and the
  read makes the kept value newer than its count, and it is read again next time).

A transaction that wrote the catalog itself reads it as stored; so does a database whose
server did not turn keeping on (``Database.keep_catalog``), e.g. a script's or a test's
bare ``Database``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from itertools import chain
from typing import Any, Protocol, TypeVar

from sqlalchemy.orm import Session

T = TypeVar("T")


class Seen(Protocol):
    @property
    def opened(self) -> int: ...
    @property
    def counts(self) -> Mapping[int, int]: ...


class Watch(Protocol):
    """What keeping asks of ``db.changes.ChangeWatch`` (which imports ``db.session``)."""

    @property
    def can_tell(self) -> bool: ...
    def look(self, quiet: bool = False, since: float | None = None) -> Seen | None: ...


#: the tables whose rows are the catalog; migration 0020 counts their changes
CATALOG_TABLES = frozenset(
    {"images", "nodes", "billing_price_versions", "billing_subscriptions", "tenants", "billing_terms", "billing_state"}
)
#: tenant id under which the triggers count the catalog's changes (``page_changes``, notices)
CATALOG = -1
#: the key of a session's ``Kept`` in ``Session.info`` (set by ``Database``'s session factories)
KEEPER = "suanli_kept"
_TOKEN = "suanli_kept_token"
_WROTE = "suanli_kept_wrote"


class Kept:
    """One database's kept catalog values, shared by the process's threads."""

    def __init__(self) -> None:
        self._token: Callable[[Session], Hashable | None] | None = None
        self._values: dict[str, tuple[Hashable, Any]] = {}
        self._lock = threading.Lock()

    def enable(self, sqlite: bool, watch: Watch | None) -> None:
        """Keep from now on: SQLite counts in its own transaction, PostgreSQL needs ``watch``."""
        if sqlite:
            self._token = _sqlite_count
        elif watch is not None and watch.can_tell:
            self._token = lambda _s: _watch_count(watch)

    def token(self, s: Session) -> Hashable | None:
        """The catalog's count as of this transaction; None: read the catalog as stored."""
        if self._token is None:
            return None
        if _writes_catalog(s):
            return None
        tx = s.get_transaction()
        memo = s.info.get(_TOKEN)
        if tx is not None and memo is not None and memo[0] is tx:
            return memo[1]
        token = self._token(s)
        tx = s.get_transaction()  # SQLite's count began it
        if tx is not None:
            s.info[_TOKEN] = (tx, token)
        return token

    def read(self, s: Session, key: str, load: Callable[[Session], T]) -> T:
        token = self.token(s)
        if token is None:
            return load(s)
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and hit[0] == token:
            return hit[1]
        value = load(s)
        if not _writes_catalog(s):  # ``load`` wrote (a seed row): not kept until committed
            with self._lock:
                self._values[key] = (token, value)
        return value


def kept(s: Session, key: str, load: Callable[[Session], T]) -> T:
    """``load(s)``, or what it gave in an earlier transaction of this process if the
    catalog has not changed since. ``load`` must read only ``CATALOG_TABLES`` and return
    a value nobody changes (a tuple, a frozen dataclass)."""
    keeper = s.info.get(KEEPER)
    return load(s) if keeper is None else keeper.read(s, key, load)


def kept_whole(s: Session, key: str, load: Callable[[Session], T]) -> T | None:
    """``kept``, where this transaction's catalog reads are kept; else None, and nothing
    read. For a reader that would otherwise read one row of a table: kept, it may ask
    for all of it."""
    keeper = s.info.get(KEEPER)
    if keeper is None or keeper.token(s) is None:
        return None
    return keeper.read(s, key, load)


def note_writes(s: Session, _context: object) -> None:
    """After a flush: a transaction that wrote the catalog reads it as stored from then on."""
    if _changes_catalog(s):
        s.info[_WROTE] = s.get_transaction()


def _changes_catalog(s: Session) -> bool:
    """Catalog rows added, changed or deleted in the session and not yet flushed."""
    return any(getattr(o, "__tablename__", None) in CATALOG_TABLES for o in chain(s.new, s.dirty, s.deleted))


def _writes_catalog(s: Session) -> bool:
    tx = s.get_transaction()
    return (tx is not None and s.info.get(_WROTE) is tx) or _changes_catalog(s)


def _sqlite_count(s: Session) -> Hashable:
    dbapi = s.connection().connection.driver_connection
    row = dbapi.execute("SELECT seq FROM page_changes WHERE tenant_id = ?", (CATALOG,)).fetchone()  # type: ignore[union-attr]
    return 0 if row is None else int(row[0])


def _watch_count(watch: Watch) -> Hashable | None:
    seen = watch.look(since=time.monotonic())  # one look for the threads asking at once
    return None if seen is None else (seen.opened, seen.counts.get(CATALOG, 0))
