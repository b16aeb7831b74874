"""Fixtures shared by every suite: database tests run on SQLite and on the test
PostgreSQL server (``pg_helpers``); the PostgreSQL cases skip with the reason when it is
unreachable. ``server`` is the real app, control loop and local backend in this process;
``cli`` runs ``suanli`` commands in-process against it."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control.control_helpers import Server, start_server
from tests.pg_helpers import PG_SKIP, fresh_pg_database
from tests.sql_cache import share_compiled_sql
from tests.sqlite_helpers import migrated_sqlite_url

#: a test that fails on a timeout reports the threads, the machine's load and PostgreSQL's waits;
#: SUANLI_TEST_CPU=FILE records each test's wall and CPU time (python -m tests.cpu_report FILE)
pytest_plugins = ["tests.timeout_report", "tests.cpu_report"]

# The control-plane suites test scheduling, lifecycles and money on the process runtime
# (fast, no image needed); tests/containers runs the same platform on real Podman
# containers and asks for it explicitly (runtime="container").
os.environ.setdefault("SUANLI_RUNTIME", "process")
os.environ.setdefault("SUANLI_ALLOW_PROCESS_RUNTIME", "1")


def _share_ssl_contexts() -> None:
    """httpx builds an SSL context for every client (about 40 ms here: it loads the CA
    bundle of ``$SSL_CERT_FILE``), and the tests make hundreds of clients (``httpx.get``,
    ``SuanliClient``), none of them for TLS: clients with the same settings share one."""
    import functools

    import httpx._transports.default as transports

    transports.create_ssl_context = functools.lru_cache(maxsize=16)(transports.create_ssl_context)


_share_ssl_contexts()
share_compiled_sql()


GROUPS = ("slurm", "containers", "browser", "torch")

#: Tests marked ``torch`` run real torch.distributed workloads: without PyTorch (the
#: ``torch`` extra, scripts/torch) they skip, unless ``SUANLI_TORCH=require`` (CI).
TORCH_MODE = os.environ.get("SUANLI_TORCH", "auto")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("torch"):
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            reason = "PyTorch is not installed (scripts/torch installs the torch extra)"
            if TORCH_MODE == "require":
                pytest.fail(f"SUANLI_TORCH=require: {reason}")
            pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` (scripts/test): the Slurm tests share one real cluster and run
    one after another on one worker; so do the tests that run containers (two servers
    making and removing container networks at once once let one tenant's container reach
    the host: see the closing note of issue 10), the browser tests (one Chromium), and the
    torch tests (each runs several PyTorch processes: two at once would starve each other).

    The scheduler groups by test id: a worker's xdist appends ``@GROUP`` to the id of each
    test with an ``xdist_group`` mark, in its own hook, so this one runs first. Under pytest
    9 xdist's append (to ``item._nodeid``) no longer changes the id, so the id is written
    here (``_group_id``). Without both, nothing was grouped: the Slurm tests ran on both
    workers, and one worker waited up to two minutes for the cluster lock the other held;
    ``pytest_collection_finish`` now fails the run instead."""
    for item in items:
        for marker in GROUPS:
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(marker))
                _group_id(config, item, marker)
                break


def _group_id(config: pytest.Config, item: pytest.Item, group: str) -> None:
    """What xdist's ``--dist loadgroup`` does to a grouped test's id, for pytest 9, where
    the id is ``item._id`` (a ``NodeId``); under pytest 8 xdist's own rename works."""
    if getattr(config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{group}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what is alive once the tests are imported (the libraries' and Suanli's
    modules, hundreds of thousands of objects), so that the collector's full passes
    during the run walk what tests make, not those again: they had cost about a tenth of
    a test process's CPU (BENCHMARKS.md, issue 11, session 25). Then fail fast if the
    groups did not reach xdist's scheduler (see above)."""
    gc.collect()
    gc.freeze()
    if not getattr(session.config.option, "loadgroup", False):  # set in xdist's workers under --dist loadgroup
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(f"{len(lost)} grouped tests reached xdist without their group, e.g. {lost[0]}")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the current schema and no rows, of its own: on SQLite a copy of a
    migrated file (``sqlite_helpers``), on PostgreSQL a copy of a migrated template."""
    if request.param == "sqlite":
        yield migrated_sqlite_url(tmp_path / "suanli.db")
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
    from typer.testing import CliRunner

    from suanli.cli import app, remote

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
