"""Factories of the container suite (imported by its conftest and tests)."""

from __future__ import annotations

from pathlib import Path

from tests.control.control_helpers import Server, start_server
from tests.sqlite_helpers import migrated_sqlite_url


def make_server(data_dir: Path, db_url: str | None = None, **kw: object) -> Server:
    """An in-process server whose local backend runs containers and refuses strangers the
    process runtime (as a real server does)."""
    kw.setdefault("runtime", "container")
    kw.setdefault("allow_process_runtime", False)
    return start_server(data_dir, db_url or migrated_sqlite_url(data_dir / "suanli.db"), **kw)  # type: ignore[arg-type]
