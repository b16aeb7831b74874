"""Fixtures of the control-plane suite: every database test runs on SQLite and on
the local PostgreSQL server (a fresh database per test, dropped afterwards; the
PostgreSQL cases skip with a reason when the server is unreachable)."""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from control_helpers import Server, start_server
from suanli.db.session import Database

PG_ADMIN_URL = os.environ.get("SUANLI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_SESSION = uuid.uuid4().hex[:8]
_counter = iter(range(1_000_000))


def _pg_reason() -> str | None:
    try:
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with engine.connect() as c:
            c.execute(text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # pragma: no cover - depends on the machine
        return f"PostgreSQL at {PG_ADMIN_URL} unreachable: {type(exc).__name__}"


PG_SKIP = _pg_reason()


_template: list[str] = []


def _migrated_template(admin) -> str:  # type: ignore[no-untyped-def]
    """One migrated database per test session; each test copies it (CREATE DATABASE
    ... TEMPLATE), which is much cheaper than running the migrations again."""
    if not _template:
        name = f"suanli_test_{_SESSION}_template"
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        db = Database(PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name)
        db.migrate()
        db.dispose()  # a template must have no open connections
        _template.append(name)
        atexit.register(_drop, name)
    return _template[0]


def _drop(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def fresh_pg_database() -> tuple[str, callable]:
    name = f"suanli_test_{_SESSION}_{next(_counter)}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    template = _migrated_template(admin)
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name

    def drop() -> None:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url, drop


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'suanli.db'}"
        return
    if PG_SKIP:
        pytest.skip(PG_SKIP)
    url, drop = fresh_pg_database()
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def pg_url() -> Iterator[str]:
    if PG_SKIP:
        pytest.skip(PG_SKIP)
    url, drop = fresh_pg_database()
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """A real app, control loop and local backend in this process, demo inventory."""
    srv = start_server(tmp_path / "data", db_url)
    try:
        yield srv
    finally:
        srv.close()
