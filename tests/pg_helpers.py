"""The test PostgreSQL server (``SUANLI_TEST_PG``, default the local one on loopback):
a fresh database per test, copied from one migrated template per test session
(``CREATE DATABASE ... TEMPLATE`` is much cheaper than running the migrations again),
dropped afterwards."""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Callable

from sqlalchemy import create_engine, text

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


def _drop(name: str) -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _migrated_template() -> str:
    if not _template:
        name = f"suanli_test_{_SESSION}_template"
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        db = Database(_url(name))
        db.migrate()
        db.dispose()  # a template must have no open connections
        _template.append(name)
        atexit.register(_drop, name)
    return _template[0]


def fresh_pg_database() -> tuple[str, Callable[[], None]]:
    """A new migrated database: its URL, and the callable that drops it."""
    name = f"suanli_test_{_SESSION}_{next(_counter)}"
    template = _migrated_template()
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    admin.dispose()
    return _url(name), lambda: _drop(name)
