"""``Database.reads``, on a real SQLite file and PostgreSQL: a read session nested in
another on the same thread is that one (a listing's parts read through one connection),
other threads get their own, it cannot write, and on PostgreSQL it runs without a
``BEGIN`` (each statement its own snapshot, as at READ COMMITTED inside one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import event, func, select, text

from suanli.db.models import Tenant
from suanli.db.session import Database


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


def test_a_nested_read_session_is_the_outer_one_and_ends_with_it(db: Database) -> None:
    checkouts = []
    event.listen(db.engine, "checkout", lambda *_: checkouts.append(1))
    with db.reads() as outer:
        outer.execute(text("SELECT 1"))
        with db.reads() as inner:
            assert inner is outer
            inner.execute(text("SELECT 2"))
        assert outer.is_active  # the inner one's end did not close it
        outer.execute(text("SELECT 3"))
    assert len(checkouts) == 1
    with db.reads() as later:
        assert later is not outer


def test_each_thread_reads_in_a_session_of_its_own(db: Database) -> None:
    seen = {}

    def read(name: str) -> None:
        with db.reads() as s:
            s.execute(text("SELECT 1"))
            seen[name] = s
            time.sleep(0.05)  # both open at once

    with db.reads() as mine:
        others = [threading.Thread(target=read, args=(n,)) for n in ("a", "b")]
        for t in others:
            t.start()
        for t in others:
            t.join()
        assert len({id(mine), id(seen["a"]), id(seen["b"])}) == 3


def test_a_read_session_cannot_write_and_writes_nothing(db: Database) -> None:
    with pytest.raises(RuntimeError, match="cannot write"):
        with db.reads() as s:
            s.add(Tenant(name="sneaky"))
            s.flush()
    with db.reads() as s:
        assert s.scalar(select(func.count()).select_from(Tenant).where(Tenant.name == "sneaky")) == 0


def test_a_read_session_on_postgresql_sends_no_begin(pg_url: str) -> None:
    """At READ COMMITTED a transaction's statements each see what was committed before
    them anyway: without a ``BEGIN`` each statement is its own transaction, whose start
    (``now()``) is its own."""
    db = Database(pg_url)
    try:
        with db.reads() as s:
            s.execute(text("SELECT pg_sleep(0.02)"))
            assert s.scalar(text("SELECT now() = statement_timestamp()")) is True
        with db.transaction() as s:  # a write transaction still is one
            s.execute(text("SELECT pg_sleep(0.02)"))
            assert s.scalar(text("SELECT now() = statement_timestamp()")) is False
    finally:
        db.dispose()
