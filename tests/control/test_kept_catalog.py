"""The catalog kept per process (``db.kept``), on a real SQLite file and PostgreSQL: a
server's second read of the images, the nodes' sizes and the price versions reads
nothing, and a change committed by anyone else is seen by the next transaction. These
are migration 0020's triggers and the count read with each transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, text, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.util import find_tables

from suanli.billing import price_versions, rater, store, terms, utilisation
from suanli.control import autostop, images, nodes, sizing
from suanli.control.auth import Principal
from suanli.db.changes import ChangeWatch
from suanli.db.kept import CATALOG_TABLES
from suanli.db.models import Image, Node, Tenant, WaitingReason
from suanli.db.session import Database
from suanli.errors import Invalid

OPS = Principal(user_id=1, tenant_id=1, name="ops", role="admin")


def read_catalog(s: Session) -> dict:
    """Every catalog read a create makes, as plain values."""
    return {
        "images": [i.name for i in (images.resolve(s, None),)],
        "inventory": [(n.name, n.gpu_count) for n in sizing.inventory(s)],
        "models": nodes.canonical_models(s),
        "capacity": utilisation.capacity_milli(s),
        "book": price_versions.current_book(s)[0],
        "terms": terms.terms_of(s, [1])[1].terms,
        "autostop": autostop.tenant_default(s, 1),
        "watermark": rater.watermark(s),
    }


@contextmanager
def server_db(url: str) -> Iterator[tuple[Database, list[str]]]:
    """A server's database, keeping the catalog, and the statements it sends."""
    db = Database(url)
    watch = ChangeWatch(db)
    db.keep_catalog(watch)
    sent: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda *a: a[2].startswith("BEGIN") or sent.append(a[2]))
    try:
        yield db, sent
    finally:
        watch.close()
        db.dispose()


def add_node(db: Database, name: str, gpus: int) -> None:
    with db.transaction() as s:
        s.add(Node(name=name, gpu_model="H100", gpu_count=gpus, cpu_milli=64_000, memory_mib=512 * 1024))


@pytest.fixture
def other(db_url: str) -> Iterator[Database]:
    """Another process's connection to the same database."""
    db = Database(db_url)
    images.add(db, OPS, "python", "localhost/suanli/python:3.11", default=True)
    add_node(db, "n1", 8)
    with db.transaction() as s:
        price_versions.ensure_book(s)
        s.add(Tenant(id=1, name="renter"))
    yield db
    db.dispose()


def test_a_second_read_reads_nothing_until_someone_else_changes_the_catalog(db_url: str, other: Database) -> None:
    with server_db(db_url) as (db, sent):
        with db.transaction() as s:
            first = read_catalog(s)
        assert sent, "the first read reads the catalog"
        assert first["inventory"] == [("n1", 8)] and first["capacity"] == {"H100": 8000}
        sent.clear()
        with db.transaction() as s:
            assert read_catalog(s) == first
        assert sent == [], sent

        # what changes all the time is not the catalog: still nothing read
        with other.transaction() as s:
            s.execute(update(Node).values(state="cordoned", cpu_used=1000, mem_used=1024))
            s.add(WaitingReason(kind="job", workload_id=1, code="capacity", detail=""))
        with db.transaction() as s:
            assert read_catalog(s) == first
        assert sent == [], sent

        # each catalog change is seen by the next transaction
        add_node(other, "n2", 4)
        with db.reads() as s:
            assert read_catalog(s)["inventory"] == [("n1", 8), ("n2", 4)]
        with other.transaction() as s:
            s.execute(update(Node).where(Node.name == "n2").values(gpu_count=2))
        with db.reads() as s:
            now = read_catalog(s)
            assert now["inventory"] == [("n1", 8), ("n2", 2)] and now["capacity"] == {"H100": 10_000}
            assert now["models"] == {"h100": ("H100", 8)}
        images.add(other, OPS, "tiny", "localhost/suanli/tiny:1", default=True)
        version = store.set_price(other, "ops", "H100", "on_demand", "9.00")
        with db.reads() as s:
            now = read_catalog(s)
            assert now["images"] == ["tiny"] and now["book"] == version
            assert images.resolve(s, "python").ref == "localhost/suanli/python:3.11"
        with other.transaction() as s:
            s.get(Tenant, 1).autostop_s = 600  # type: ignore[union-attr]
        store.set_terms(other, 1, "ops", "postpaid")
        ran = rater.run(other, cutoff_ms=store.now_ms())
        with db.reads() as s:
            now = read_catalog(s)
            assert (now["autostop"], now["terms"], now["watermark"]) == (600, "postpaid", ran.settled_ms)
        images.remove(other, OPS, "python")
        with db.reads() as s, pytest.raises(Invalid, match="not offered"):
            images.resolve(s, "python")


def test_a_transaction_begun_before_a_change_keeps_nothing_older_than_its_count(db_url: str, other: Database) -> None:
    """On SQLite a transaction reads one snapshot: the count it keeps with is read in it."""
    with server_db(db_url) as (db, _):
        with db.reads() as s:
            s.get(Tenant, 1)  # the snapshot begins
            images.add(other, OPS, "later", "localhost/suanli/later:1")
            before = [i.name for i in (images.resolve(s, None),)]
            try:
                images.resolve(s, "later")
                kept_later = True
            except Invalid:
                kept_later = False
        assert before == ["python"]
        with db.reads() as s:
            assert images.resolve(s, "later").name == "later", f"kept the older list (saw it at first: {kept_later})"


def test_a_transaction_that_writes_the_catalog_reads_it_as_written(db_url: str, other: Database) -> None:
    with server_db(db_url) as (db, _):
        with db.reads() as s:
            images.resolve(s, None)  # kept
        with db.sessions() as s:
            s.add(Image(name="pending", ref="localhost/suanli/pending:1"))
            assert images.resolve(s, "pending").name == "pending"  # not yet flushed
            s.flush()
            assert images.resolve(s, "pending").name == "pending"
            s.rollback()
        with db.reads() as s, pytest.raises(Invalid, match="not offered"):
            images.resolve(s, "pending")


def test_a_database_whose_server_did_not_ask_reads_the_catalog_every_time(db_url: str, other: Database) -> None:
    sent: list[str] = []
    event.listen(other.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    for _ in range(2):
        sent.clear()
        with other.reads() as s:
            read_catalog(s)
        assert len(sent) >= 5


def _tables_read(db: Database, read: Callable[[Session], object]) -> set[str]:
    seen: set[str] = set()

    def note(_conn: object, clause: object, *_: object) -> None:
        seen.update(t.name for t in find_tables(clause, include_joins=True))  # type: ignore[arg-type]

    event.listen(db.engine, "before_execute", note)
    try:
        with db.reads() as s:
            read(s)
    finally:
        event.remove(db.engine, "before_execute", note)
    return seen


def test_what_is_kept_is_read_only_from_tables_whose_changes_are_counted(db_url: str, other: Database) -> None:
    """Migration 0020 puts triggers on ``CATALOG_TABLES``; a kept read of another table
    would be kept through its changes."""
    tables = _tables_read(other, read_catalog)
    assert tables and tables <= CATALOG_TABLES, tables
    counted = (
        "SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'suanli_catalog_%'"
        if other.is_sqlite
        else "SELECT event_object_table, event_manipulation FROM information_schema.triggers "
        "WHERE trigger_name = 'suanli_catalog_notice'"
    )
    with other.reads() as s:
        found = {(t, e.rsplit("_", 1)[-1].upper()) for t, e in s.execute(text(counted))}
    assert found == {(t, e) for t in CATALOG_TABLES for e in ("INSERT", "UPDATE", "DELETE")}
