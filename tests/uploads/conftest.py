"""Fixtures of the uploads suite (``db_url`` and ``cli`` come from tests/conftest.py):
the control plane's real in-process server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control"))
from control_helpers import Server, start_server  # noqa: E402


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """App, control loop and local backend in this process, demo inventory."""
    srv = start_server(tmp_path / "data", db_url)
    try:
        yield srv
    finally:
        srv.close()
