"""Fixtures of the security suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control.control_helpers import Server, start_server


@pytest.fixture
def quiet_server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """A server without its loop (these probes need no work placed) whose renters may
    use host processes; a module makes it its ``server`` (which the ``cli`` fixture uses)."""
    s = start_server(tmp_path / "data", db_url, start_loop=False, allow_process_runtime=True)
    try:
        yield s
    finally:
        s.close()
