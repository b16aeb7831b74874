"""Factories of the container suite (imported by its conftest and tests)."""

from __future__ import annotations

from pathlib import Path

from suanli.backends.local import LocalBackend
from tests.control.control_helpers import Server, release_host, start_server


def make_server(data_dir: Path, db_url: str | None = None, **kw: object) -> Server:
    """An in-process server whose local backend runs containers and refuses strangers the
    process runtime (as a real server does)."""
    kw.setdefault("runtime", "container")
    kw.setdefault("allow_process_runtime", False)
    return start_server(data_dir, db_url or f"sqlite:///{data_dir / 'suanli.db'}", **kw)  # type: ignore[arg-type]


def release_data_dir(data_dir: Path) -> None:
    """What a server process of ``data_dir`` left on the host: containers, networks, mounts."""
    release_host({"local": LocalBackend(data_dir / "workloads", "container")}, data_dir)
