"""The test PostgreSQL server (``SUANLI_TEST_PG``, default the local one on loopback):
a fresh database per test, copied from one migrated template per test session
(``CREATE DATABASE ... TEMPLATE`` is much cheaper than running the migrations again),
dropped afterwards.

Copies are made one ahead and dropped behind the tests, on threads of their own: on a
busy server a ``CREATE DATABASE`` took about 0.4 s and a ``DROP DATABASE`` (which waits
for a checkpoint) up to a second or more, paid by every PostgreSQL test in its setup and
teardown; on the threads they overlap the tests instead. Each test still gets a database
nobody else has used, and every copy is dropped by the end of the session. A copy commits
without waiting for its WAL to reach the disk (``synchronous_commit = off``)."""

from __future__ import annotations

import atexit
import os
import queue
import threading
import uuid
from collections.abc import Callable

from sqlalchemy import Engine, create_engine, text

from suanli.db.session import Database

PG_ADMIN_URL = os.environ.get("SUANLI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_SESSION = uuid.uuid4().hex[:8]
_counter = iter(range(1_000_000))
_template: list[str] = []


def _pg_reason() -> str | None:
    try:
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with engine.connect() as c:
            c.execute(text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"PostgreSQL at {PG_ADMIN_URL} unreachable: {type(exc).__name__}"


#: Why PostgreSQL tests skip, or None when the server answers.
PG_SKIP = _pg_reason()


def _url(name: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def _admin() -> Engine:
    return create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=0)


def _drop(name: str, admin: Engine | None = None) -> None:
    engine = admin or _admin()
    with engine.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    if admin is None:
        engine.dispose()


def _migrated_template() -> str:
    if not _template:
        name = f"suanli_test_{_SESSION}_template"
        admin = _admin()
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        db = Database(_url(name))
        db.migrate()
        db.dispose()  # a template must have no open connections
        _template.append(name)
        atexit.register(_at_exit, name)
    return _template[0]


def _at_exit(template: str) -> None:
    _POOL.close()  # the copies first: a template with copies being made cannot be dropped
    _drop(template)


class _Pool:
    """Two threads: one copies the template ahead of the next test, the other drops what
    tests gave back (a drop waits for a checkpoint: seconds on a busy server, and a test
    waiting for its copy must not wait behind it)."""

    AHEAD = 1

    def __init__(self) -> None:
        self._to_make: queue.Queue[bool] = queue.Queue()  # False: stop
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._to_drop: queue.Queue[str] = queue.Queue()  # "": stop
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._made: set[str] = set()  # copies not yet dropped

    def _start(self) -> None:
        with self._lock:
            if not self._threads:
                for target, name in ((self._make, "pg-test-copies"), (self._drop, "pg-test-drops")):
                    t = threading.Thread(target=target, name=name, daemon=True)
                    t.start()
                    self._threads.append(t)
                for _ in range(self.AHEAD):
                    self._to_make.put(True)

    def _make(self) -> None:
        admin = _admin()
        try:
            while self._to_make.get():
                try:
                    made = f"suanli_test_{_SESSION}_{next(_counter)}"
                    with admin.connect() as c:
                        c.execute(text(f'CREATE DATABASE "{made}" TEMPLATE "{_template[0]}"'))
                        # no wait for the WAL to reach the disk at each commit: a test needs
                        # atomicity and isolation, not durability through a crash of the server
                        c.execute(text(f'ALTER DATABASE "{made}" SET synchronous_commit = off'))
                    self._made.add(made)
                    self._ready.put(made)
                except BaseException as exc:  # the test that waits for it says why
                    self._ready.put(exc)
        finally:
            admin.dispose()

    def _drop(self) -> None:
        admin = _admin()
        try:
            while name := self._to_drop.get():
                try:
                    _drop(name, admin)
                    self._made.discard(name)
                except Exception:  # dropped at exit, or by the next session's cleanup: never fail a test for it
                    pass
        finally:
            admin.dispose()

    def take(self) -> str:
        self._start()
        self._to_make.put(True)  # the one after this
        got = self._ready.get(timeout=120)
        if isinstance(got, BaseException):
            raise got
        return got

    def give_back(self, name: str) -> None:
        self._to_drop.put(name)

    def close(self) -> None:
        """At exit: drop what is left (the copies made ahead included)."""
        if not self._threads:
            return
        self._to_make.put(False)
        self._to_drop.put("")
        for t in self._threads:
            t.join(60)
        for name in list(self._made):
            try:
                _drop(name)
            except Exception:
                pass


_POOL = _Pool()


def fresh_pg_database() -> tuple[str, Callable[[], None]]:
    """A new migrated database: its URL, and the callable that drops it (behind the tests)."""
    _migrated_template()
    name = _POOL.take()
    return _url(name), lambda: _POOL.give_back(name)


def pg_waits() -> str:
    """Every session of the server that is not idle, with what it waits on, and every lock
    not granted: what a test's timeout report shows (``timeout_report``)."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as c:
            sessions = c.execute(
                text(
                    "SELECT pid, datname, state, wait_event_type, wait_event,"
                    " round(extract(epoch FROM now() - query_start)::numeric, 2) AS for_s, left(query, 200)"
                    " FROM pg_stat_activity WHERE state IS DISTINCT FROM 'idle' AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend' ORDER BY query_start"
                )
            ).all()
            locks = c.execute(text("SELECT pid, locktype, mode, relation::regclass::text FROM pg_locks WHERE NOT granted")).all()
    finally:
        admin.dispose()
    lines = [f"session {tuple(row)}" for row in sessions] + [f"waiting lock {tuple(row)}" for row in locks]
    return "\n".join(lines) or "no session busy, no lock waited for"
