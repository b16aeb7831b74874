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
from tests.containers.container_helpers import make_server
from tests.control.control_helpers import LiveServer, Server, ServerProcess, free_port

MODE = os.environ.get("SUANLI_CONTAINERS", "auto")
ENGINE = detect("podman")
SKIP = None if ENGINE is not None else "no Podman answers on this machine (scripts/images installs it)"


def pytest_itemcollected(item: pytest.Item) -> None:
    """The tests here that run containers (they all take ``images``) are marked
    ``containers`` as they are collected, before tests/conftest.py groups the marked tests;
    one that only starts a process-runtime server is not, so it need not wait for the
    container tests' worker."""
    if Path(__file__).parent in Path(str(item.fspath)).parents and "images" in getattr(item, "fixturenames", ()):
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
    """A real ``suanli server`` process on the container runtime (the real CLI drives it),
    for the tests about the process (``kill -9``, a restart)."""
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "container")).start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def live(images: list[str], tmp_path: Path) -> Iterator[LiveServer]:
    """The same server on real loopback ports (API and port proxy), in this process: for
    tests that need its HTTP, the real CLI or a WebSocket, not the process itself."""
    srv = LiveServer(tmp_path / "data", options={"runtime": "container", "allow_process_runtime": False}).start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def keypair(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A fresh ed25519 key made by the real ssh-keygen: (private path, public text)."""

    def make(name: str) -> tuple[Path, str]:
        path = tmp_path / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
        return path, (tmp_path / f"{name}.pub").read_text()

    return make
