"""Fixtures of the images suite (``db_url`` and ``cli`` come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.control_helpers import Server, start_server


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """The real app on SQLite or PostgreSQL without its control loop: instances the tests
    create stay pending, so an image in use stays in use."""
    srv = start_server(tmp_path / "data", db_url, start_loop=False)
    try:
        yield srv
    finally:
        srv.close()
