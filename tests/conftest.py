"""Fixtures shared by every suite: database tests run on SQLite and on the test
PostgreSQL server (``pg_helpers``); the PostgreSQL cases skip with the reason when it is
unreachable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_helpers import PG_SKIP, fresh_pg_database


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'suanli.db'}"
        return
    yield from _pg()


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from _pg()


def _pg() -> Iterator[str]:
    if PG_SKIP:
        pytest.skip(PG_SKIP)
    url, drop = fresh_pg_database()
    try:
        yield url
    finally:
        drop()
