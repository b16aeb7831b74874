"""Fixtures shared by every suite: database tests run on SQLite and on the test
PostgreSQL server (``pg_helpers``); the PostgreSQL cases skip with the reason when it is
unreachable. ``server`` is the real app, control loop and local backend in this process;
``cli`` runs ``suanli`` commands in-process against it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control.control_helpers import Server, start_server
from tests.pg_helpers import PG_SKIP, fresh_pg_database

# The control-plane suites test scheduling, lifecycles and money on the process runtime
# (fast, no image needed); tests/containers runs the same platform on real Podman
# containers and asks for it explicitly (runtime="container").
os.environ.setdefault("SUANLI_RUNTIME", "process")
os.environ.setdefault("SUANLI_ALLOW_PROCESS_RUNTIME", "1")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` (scripts/test): the Slurm tests share one real cluster and run
    one after another on one worker; so do the tests that run containers (two servers
    making and removing container networks at once once let one tenant's container reach
    the host: see the closing note of issue 10), and the browser tests (one Chromium)."""
    for item in items:
        for marker in ("slurm", "containers", "browser"):
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(marker))
                break


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


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[Server]:
    """App, control loop and local backend in this process, demo inventory (a suite may
    override it, e.g. without the loop)."""
    srv = start_server(tmp_path / "data", db_url)
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def cli(server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``cli("jobs", "list", code=0, token=None)``: the control-plane and billing commands
    against the suite's in-process ``server``, as its admin or as ``token``; returns the output."""
    import typer
    from typer.testing import CliRunner

    from suanli.cli import billing, controlplane, remote

    app = typer.Typer()
    controlplane.register(app)
    billing.register(app)
    state = {"token": server.token}
    monkeypatch.setattr(remote, "client_factory", lambda: server.client(state["token"]))
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "config.json"))
    runner = CliRunner()

    def run(*args: str, code: int = 0, token: str | None = None) -> str:
        state["token"] = token or server.token
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, (args, result.output, result.exception)
        return result.output

    yield run
