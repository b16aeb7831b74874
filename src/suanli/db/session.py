"""Engine and session setup for SQLite and PostgreSQL.

On SQLite every transaction starts with ``BEGIN IMMEDIATE``: it takes the write
lock up front (waiting up to ``busy_timeout``) instead of failing when a read
transaction later tries to write, which is what makes concurrent API threads
and the control loop safe on the embedded database. WAL lets readers proceed
while the loop writes, but only readers that did not ask for the write lock:
``Database.reads`` sessions, for work that only reads (listings, the health
check), begin with a plain ``BEGIN`` and so never queue behind a writer.

On PostgreSQL a read session runs in autocommit: at READ COMMITTED, PostgreSQL's
level, each statement sees what was committed before it whether or not a transaction
wraps it, so the ``BEGIN`` and ``ROLLBACK`` around a listing's reads bought nothing and
cost two round trips each (issue 18, session 40). A read session cannot flush.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from suanli.db.kept import KEEPER, Kept, Watch, note_writes


def default_sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{(data_dir / 'suanli.db').resolve()}"


#: the execution option of ``Database.reads``' connections
READ_ONLY = "suanli_read_only"


def make_engine(url: str, pool_size: int = 10) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")

        return engine
    # No pre-ping (a round trip per checkout, measurable under load); connections
    # are recycled instead, and a dead one fails one request, not the server.
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size * 2, pool_recycle=300)


class Database:
    """One engine plus a session factory; ``transaction()`` is the unit of work."""

    def __init__(self, url: str, pool_size: int = 10) -> None:
        self.url = url
        path = sqlite_path(url.split("?", 1)[0])
        #: the SQLite database's file (None: PostgreSQL, or SQLite in memory)
        self.file = path if path is not None and str(path) not in ("", ":memory:") else None
        if self.file is not None:
            private_sqlite(self.file)
        self.engine = make_engine(url, pool_size)
        #: the catalog's values kept for this process's sessions (``db.kept``; off until ``keep_catalog``)
        self.kept = Kept()
        self.sessions = sessionmaker(self.engine, expire_on_commit=False, info={KEEPER: self.kept})
        options = {READ_ONLY: True} if self.is_sqlite else {READ_ONLY: True, "isolation_level": "AUTOCOMMIT"}
        self._reads = sessionmaker(
            self.engine.execution_options(**options), expire_on_commit=False, info={KEEPER: self.kept, READ_ONLY: True}
        )
        event.listen(self.sessions, "after_flush", note_writes)
        event.listen(self._reads, "before_flush", _refuse_flush)
        self._reading = threading.local()

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("sqlite")

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work commits on success and rolls back on any error."""
        with self.sessions() as session, session.begin():
            yield session

    @contextmanager
    def reads(self) -> Iterator[Session]:
        """A session for work that only reads. On SQLite it does not take the write lock (a
        plain ``BEGIN``), so a listing never waits for the control loop's writes; on
        PostgreSQL it runs in autocommit. Nested in another on the same thread, it is that
        one: a page's parts (its rows, allocations, costs, waiting reasons) read through
        one connection, one snapshot on SQLite, one look at the catalog's count."""
        session = getattr(self._reading, "session", None)
        if session is not None:
            yield session
            return
        with self._reads() as session:
            self._reading.session = session
            try:
                yield session
            finally:
                self._reading.session = None

    def keep_catalog(self, watch: Watch | None) -> None:
        """Answer catalog reads from what this process read before while the catalog is
        unchanged (``db.kept``); the schema must be migrated (0020's triggers count the changes)."""
        self.kept.enable(self.is_sqlite, watch)

    def migrate(self) -> None:
        from suanli.db.migrate import upgrade

        upgrade(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()


def read_only(s: Session) -> bool:
    """Whether ``s`` is a ``Database.reads`` session, which cannot write."""
    return bool(s.info.get(READ_ONLY))


def _refuse_flush(_session: Session, _context: object, _instances: object) -> None:
    raise RuntimeError("a read session (Database.reads) cannot write: use Database.transaction")


def private_sqlite(path: Path) -> None:
    """The SQLite file created 0600 (or made so): SQLite gives its WAL and shared-memory
    files the database file's mode, so those are private too."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if p.exists():
                os.chmod(p, 0o600)
    except OSError:
        pass  # not ours, or a directory that does not exist yet: SQLite's error says more


def sqlite_path(url: str) -> Path | None:
    return Path(url.split("///", 1)[1]) if url.startswith("sqlite:///") else None
