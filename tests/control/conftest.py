"""Fixtures of the control-plane suite (``db_url`` and ``pg_url`` come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from control_helpers import Server, start_server


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """A real app, control loop and local backend in this process, demo inventory."""
    srv = start_server(tmp_path / "data", db_url)
    try:
        yield srv
    finally:
        srv.close()
