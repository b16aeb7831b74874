"""Has anything a tenant's listing pages show been committed since I last looked? One
round trip per look, on a connection of the watch's own, so a process can tell that
nothing changed without reading what it keeps (``api.page_cache``).

``ChangeWatch.look()`` returns what it saw (``Changes``): per tenant, how many commits
changed that tenant's pages so far, counted by migration 0016's triggers. On SQLite the
triggers count in ``page_changes`` and a look is ``PRAGMA data_version`` (which SQLite
moves whenever another connection commits; it reads the WAL index, no table), then the
counts only if it moved. On PostgreSQL the triggers notify, the watch listens, and a
look is a ``SELECT 1``, after which every notice of a transaction committed before the
look began has been received (the server sends a session's pending notices before it
reports ready for the next query). The server keeps every notice for a listener that
does not read them, and cannot trim its queue (all databases' notices) past the oldest
unread, so a PostgreSQL watch also looks when nobody asked for ``idle_look_s``. A watch
that cannot look (no file, a lost connection) says ``None``: the caller reads what it
needs, as it would without a watch.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.engine import make_url

from suanli.db.kept import CATALOG
from suanli.db.session import Database

log = logging.getLogger(__name__)

#: the channel migration 0016's triggers notify
CHANNEL = "suanli_changes"


@dataclass(frozen=True)
class Changes:
    """What one look saw: per tenant, commits that changed its pages (tenant 0: every
    tenant's; tenant -1: the catalog, ``db.kept``). Counts only grow while the watch keeps
    its connection (``opened``)."""

    opened: int
    counts: Mapping[int, int]

    def token(self, tenant_id: int | None) -> Hashable:
        """Equal tokens: nothing that changes the pages of ``tenant_id`` (None: of every
        tenant, an operator's pages) was committed in between."""
        if tenant_id is None:  # every tenant's, not the catalog's (``db.kept``)
            return (self.opened, sum(n for t, n in self.counts.items() if t != CATALOG))
        return (self.opened, self.counts.get(0, 0), self.counts.get(tenant_id, 0))


class _Look(Protocol):
    #: unread, the server holds what this look has not read (PostgreSQL's notices)
    must_read: bool

    def read(self) -> Mapping[int, int]: ...
    def close(self) -> None: ...


class _SQLiteLook:
    must_read = False

    def __init__(self, path: str) -> None:
        # autocommit (no transaction held between looks) and never a write
        self.con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.con.execute("PRAGMA query_only=ON")
        self.seen: int | None = None
        self.counts: Mapping[int, int] = {}

    def read(self) -> Mapping[int, int]:
        version = int(self.con.execute("PRAGMA data_version").fetchone()[0])
        if version != self.seen:  # a commit somewhere: read the counts (a row per tenant)
            self.counts = dict(self.con.execute("SELECT tenant_id, seq FROM page_changes").fetchall())
            self.seen = version
        return self.counts

    def close(self) -> None:
        self.con.close()


class _PostgresLook:
    must_read = True

    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.heard: dict[int, int] = {}
        self.copied: Mapping[int, int] | None = {}  # None: heard more since the last copy
        self.con = psycopg.connect(conninfo, autocommit=True)
        self.con.add_notify_handler(self._heard)
        self.con.execute(f"LISTEN {CHANNEL}")

    def _heard(self, notice: Any) -> None:
        try:
            tenant = int(notice.payload)
        except ValueError:
            tenant = 0  # not one of ours: count it against every tenant
        self.heard[tenant] = self.heard.get(tenant, 0) + 1
        self.copied = None

    def read(self) -> Mapping[int, int]:
        self.con.execute("SELECT 1")  # the notices sent before its answer are counted by then
        if self.copied is None:
            self.copied = dict(self.heard)
        return self.copied

    def close(self) -> None:
        self.con.close()


def _opener(db: Database) -> Callable[[], _Look] | None:
    if db.file is not None:
        path = str(db.file)
        return lambda: _SQLiteLook(path)
    url = make_url(db.url)
    if url.get_backend_name() == "postgresql":
        conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return lambda: _PostgresLook(conninfo)
    return None


class ChangeWatch:
    def __init__(self, db: Database, idle_look_s: float = 10.0) -> None:
        self._open = _opener(db)
        self._look: _Look | None = None
        self._opened = 0  # a token is only comparable with one from the same connection
        self._lock = threading.Lock()
        self.idle_look_s = idle_look_s
        self._looked = 0.0  # time.monotonic() of the last look
        self._last: tuple[float, Changes] | None = None  # when the last look that answered began, and what it saw
        self._keeper: threading.Thread | None = None
        self._closed = False

    @property
    def can_tell(self) -> bool:
        return self._open is not None

    def look(self, quiet: bool = False, since: float | None = None) -> Changes | None:
        """What was committed so far, per tenant; ``None``: this database cannot tell, or
        the look failed (read what you need; ``quiet``: not worth a warning). ``since``
        (``time.monotonic()``): a look begun since then will do, so threads asking at once
        share one (``db.kept``'s counts)."""
        if self._open is None:
            return None
        with self._lock:
            if since is not None and self._last is not None and self._last[0] >= since:
                return self._last[1]
            began = time.monotonic()
            try:
                if self._look is None:
                    self._look = self._open()
                    self._opened += 1
                    if self._look.must_read and self._keeper is None:
                        self._looked = time.monotonic()  # this look, under way
                        self._keeper = threading.Thread(target=_keep_looking, args=(weakref.ref(self),), daemon=True)
                        self._keeper.start()
                seen = Changes(self._opened, self._look.read())
                self._looked = time.monotonic()
                self._last = (began, seen)
                return seen
            except Exception as exc:  # noqa: BLE001 - any failure only means "cannot tell now"
                log.log(
                    logging.DEBUG if quiet else logging.WARNING, "change watch: cannot look (%s); pages read their stamps", exc
                )
                self._drop()
                return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()

    def _drop(self) -> None:
        if self._look is not None:
            try:
                self._look.close()
            except Exception:  # noqa: BLE001, S110 - closing what already failed
                pass
            self._look = None


def _keep_looking(ref: weakref.ref[ChangeWatch]) -> None:
    """A watch's look when no request asked for one in ``idle_look_s``; ends with the
    watch (closed, or collected: the thread holds no reference between looks)."""
    while True:
        watch = ref()
        if watch is None or watch._closed:
            return
        pause = watch.idle_look_s - (time.monotonic() - watch._looked)
        if pause <= 0:
            if watch._look is not None:  # a lost connection is opened again by a request, not here
                watch.look(quiet=True)
            pause = watch.idle_look_s
        del watch
        time.sleep(pause)
