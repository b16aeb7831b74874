"""Fixtures of the container suite: the platform on real Podman containers.

Every test here runs real containers from Suanli's own images (``tiny``: BusyBox;
``python``: Debian with Python and sshd), built locally by ``scripts/images`` (CI) or,
when missing, by the session fixture. Without Podman the suite skips with the reason,
unless ``SUANLI_CONTAINERS=require`` (CI), where that is a failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.backends.local import imagebuild
from suanli.backends.local.engine import detect
from tests.containers.container_helpers import make_server, release_data_dir
from tests.control.control_helpers import Server, ServerProcess, free_port

MODE = os.environ.get("SUANLI_CONTAINERS", "auto")
ENGINE = detect("podman")
SKIP = None if ENGINE is not None else "no Podman answers on this machine (scripts/images installs it)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.containers)


@pytest.fixture(scope="session")
def images() -> list[str]:
    """The images the suite runs, built here when missing (``python`` takes minutes)."""
    if SKIP:
        if MODE == "require":
            pytest.fail(f"SUANLI_CONTAINERS=require: {SKIP}")
        pytest.skip(SKIP)
    for name in ("tiny", "python"):
        imagebuild.pull_or_build(name, "podman", progress=lambda line: None)
    return ["tiny", "python"]


@pytest.fixture
def csrv(images: list[str], tmp_path: Path) -> Iterator[Server]:
    """A server whose local backend runs containers (SQLite; the control plane's own
    suites cover PostgreSQL)."""
    (tmp_path / "data").mkdir()
    srv = make_server(tmp_path / "data")
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def proc(images: list[str], tmp_path: Path) -> Iterator[ServerProcess]:
    """A real ``suanli server`` process on the container runtime (the real CLI drives it)."""
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "container")).start()
    try:
        yield srv
    finally:
        srv.stop()
        release_data_dir(srv.data_dir)


@pytest.fixture
def keypair(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh ed25519 key made by the real ssh-keygen: (private path, public text)."""

    def make(name: str) -> tuple[Path, str]:
        path = tmp_path / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
        return path, (tmp_path / f"{name}.pub").read_text()

    return make
