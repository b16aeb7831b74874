"""A server's app, database and backends are freed once the server is closed: nothing
process-wide (FastAPI's caches of endpoint functions, Prometheus, SQLAlchemy) keeps them.
A process that builds many servers (the test suite, an operator's scripts) would otherwise
hold every one it ever made, and the collector would walk them all on each full pass.

"Once" allows a moment: a worker thread of the app's thread pool lets go of the last
request it ran (and through it the app) only after it has handed the answer back, and on
a loaded machine the test can get there first. A leak holds them for good."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from tests.control.control_helpers import start_server, wait_until
from tests.sqlite_helpers import migrated_sqlite_url


def test_a_closed_server_leaves_nothing_alive(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", migrated_sqlite_url(tmp_path / "suanli.db"))
    for path in ("/healthz", "/metrics", "/v1/instances"):
        assert srv.http.get(path, headers=srv.headers).status_code == 200, path
    ctx, app = weakref.ref(srv.ctx), weakref.ref(srv.http.app)
    srv.close()
    del srv

    def freed() -> bool:
        gc.collect()
        return ctx() is None and app() is None

    try:
        wait_until(freed, 10)
    except AssertionError:
        held = [type(r).__name__ for r in gc.get_referrers(ctx())] if ctx() is not None else "the app only"
        raise AssertionError(f"a closed server is still alive after 10 s, held by {held}") from None
