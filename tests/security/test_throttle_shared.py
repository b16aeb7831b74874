"""The throttles hold across a server's API worker processes: each worker builds its own
context (``api.parts``), and the count of bad tokens is in the database they share, so a
limit of 20 a minute stays 20, not 20 per worker."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from suanli.api.app import create_app
from suanli.api.server import build
from tests.control.control_helpers import Server


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_two_api_workers_share_one_bad_token_count(server: Server, db_url: str) -> None:
    # a second API worker: its own context and app on the same database, as ``suanli server`` forks one
    other, _ = build(server.data_dir, db_url, start_loop=False, prepare=False, background_work=False)
    try:
        with TestClient(create_app(other)) as second:
            assert server.http.get("/v1/me", headers=server.headers).status_code == 200  # verified, and cached, here
            firsts = [server.http.get("/v1/me", headers=bearer(f"sl_guess{i}")).status_code for i in range(10)]
            seconds = [second.get("/v1/me", headers=bearer(f"sl_other{i}")).status_code for i in range(10)]
            assert firsts == seconds == [401] * 10
            over = [c.get("/v1/me", headers=bearer("sl_one-more")) for c in (server.http, second)]
            assert [r.status_code for r in over] == [429, 429], [r.text for r in over]
            # a good token this worker verified in the last seconds is not a guess: it still answers
            # here; in the other worker, which has not seen it, it waits like any token from this address
            assert server.http.get("/v1/me", headers=server.headers).status_code == 200
            assert second.get("/v1/me", headers=server.headers).status_code == 429
    finally:
        other.db.dispose()


def test_a_create_in_one_worker_wakes_the_loop_in_another(tmp_path: Path, db_url: str) -> None:
    """The API's wake reaches a loop that is not in its process (``control.wakeup``):
    with a 60 s interval, only the wake can start the pass."""
    from suanli.api.background import background, start_all, stop_all
    from suanli.control import wakeup
    from tests.control.control_helpers import start_server, wait_until

    loop_side = start_server(tmp_path / "data", db_url, start_loop=False, interval_s=60.0)
    threads = background(loop_side.ctx, wakes=True)
    api, _ = build(loop_side.data_dir, db_url, start_loop=False, prepare=False, background_work=False)
    api.waker = wakeup.Sender(wakeup.socket_path(api.data_dir))
    try:
        start_all(threads)
        ticks = wait_until(lambda: loop_side.ctx.loop and loop_side.ctx.loop.stats.ticks, 30)  # the first pass, at start
        with TestClient(create_app(api)) as http:
            r = http.post("/v1/jobs", json={"resources": {"accelerators": "H100:1"}, "run": "true"}, headers=loop_side.headers)
            assert r.status_code == 201, r.text
            wait_until(lambda: loop_side.ctx.loop.stats.ticks > ticks, 20)
            wait_until(lambda: http.get(f"/v1/jobs/{r.json()['id']}", headers=loop_side.headers).json()["state"] != "queued", 20)
    finally:
        stop_all(threads)
        api.db.dispose()
        loop_side.close()
