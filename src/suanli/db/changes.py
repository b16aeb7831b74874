"""Has anything a listing shows been committed since I last looked? One round trip per
look, on one connection of the watch's own, so a process can tell that nothing changed
without reading what it keeps (``api.page_cache``).

``ChangeWatch.version()`` returns a token: two equal tokens mean that nothing was
committed in between, by any connection of any process. On SQLite that is any commit:
the token is ``PRAGMA data_version``, which SQLite moves whenever another connection
commits (it reads the WAL index as any read does; no table is scanned). On PostgreSQL
it is a commit to a table a page's stamps read: those tables notify a channel at commit
(migration 0016), the watch listens, and a look is a ``SELECT 1`` after which every
notice of a transaction committed before the look began has been received (the server
sends a session's pending notices before it reports ready for the next query). A watch
that cannot look (no file, a lost connection) says ``None``: the caller reads what it
needs, as it would without a watch.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Hashable
from typing import Protocol

from sqlalchemy.engine import make_url

from suanli.db.session import Database, sqlite_path

log = logging.getLogger(__name__)

#: the channel migration 0016's triggers notify
CHANNEL = "suanli_changes"


class _Look(Protocol):
    def read(self) -> int: ...
    def close(self) -> None: ...


class _SQLiteLook:
    def __init__(self, path: str) -> None:
        # autocommit (no transaction held between looks) and never a write
        self.con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.con.execute("PRAGMA query_only=ON")

    def read(self) -> int:
        return int(self.con.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self.con.close()


class _PostgresLook:
    def __init__(self, conninfo: str) -> None:
        import psycopg

        self.notices = 0
        self.con = psycopg.connect(conninfo, autocommit=True)
        self.con.add_notify_handler(self._heard)
        self.con.execute(f"LISTEN {CHANNEL}")

    def _heard(self, _notice: object) -> None:
        self.notices += 1

    def read(self) -> int:
        self.con.execute("SELECT 1")  # the notices sent before its answer are counted by then
        return self.notices

    def close(self) -> None:
        self.con.close()


def _opener(db: Database) -> Callable[[], _Look] | None:
    path = sqlite_path(db.url.split("?", 1)[0])
    if path is not None:
        return None if str(path) in ("", ":memory:") else lambda: _SQLiteLook(str(path))
    url = make_url(db.url)
    if url.get_backend_name() == "postgresql":
        conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        return lambda: _PostgresLook(conninfo)
    return None


class ChangeWatch:
    def __init__(self, db: Database) -> None:
        self._open = _opener(db)
        self._look: _Look | None = None
        self._opened = 0  # a token is only comparable with one from the same connection
        self._lock = threading.Lock()

    @property
    def can_tell(self) -> bool:
        return self._open is not None

    def version(self) -> Hashable | None:
        """A token that differs from the last one if anything was committed in between;
        ``None``: this database cannot tell, or the look failed (read what you need)."""
        if self._open is None:
            return None
        with self._lock:
            try:
                if self._look is None:
                    self._look = self._open()
                    self._opened += 1
                return (self._opened, self._look.read())
            except Exception as exc:  # noqa: BLE001 - any failure only means "cannot tell now"
                log.warning("change watch: cannot look (%s); pages read their stamps", exc)
                self._drop()
                return None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._look is not None:
            try:
                self._look.close()
            except Exception:  # noqa: BLE001, S110 - closing what already failed
                pass
            self._look = None
