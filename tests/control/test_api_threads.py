"""The API's threads (``api.threads``): handlers run on a few, and a renter's long
``exec`` does not hold any of them."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio.to_thread

from suanli.api import threads
from tests.control.control_helpers import Server, wait_state, wait_until


def test_the_handlers_thread_count_is_set_on_the_serving_loop(server: Server) -> None:
    tokens = server.http.portal.call(lambda: anyio.to_thread.current_default_thread_limiter().total_tokens)  # type: ignore[union-attr]
    assert tokens == threads.HANDLER_THREADS


def test_more_long_execs_than_handler_threads_leave_the_api_answering(server: Server) -> None:
    """Each exec waits until the test lets it go; while more of them run than there are
    handler threads, a read of the instance still answers. Were the execs on the
    handlers' threads, the read would wait for the first of them to end."""
    inst = server.post("/v1/instances", {"gpu_milli": 100}, expect=201).json()
    wait_state(server, "instance", inst["id"], ("running",))
    path = f"/v1/instances/{inst['id']}/exec"
    workdir = Path(server.post(path, {"command": "pwd"}, expect=200).json()["output"].strip())
    n = threads.HANDLER_THREADS + 2
    results: list[int] = []
    ended: list[float] = []

    def run_exec(i: int) -> None:
        cmd = f"touch started.{i}; while [ ! -e release ]; do sleep 0.05; done"
        r = server.post(path, {"command": cmd, "timeout_s": 120}, expect=200)
        ended.append(time.monotonic())
        results.append(r.json()["exit_code"])

    def release() -> None:
        (workdir / "release").touch()

    execs = [threading.Thread(target=run_exec, args=(i,), daemon=True) for i in range(n)]
    for t in execs:
        t.start()
    # the release comes anyway after a while, so a regression fails instead of hanging
    backstop = threading.Timer(30, release)
    backstop.start()
    try:
        wait_until(lambda: all((workdir / f"started.{i}").exists() for i in range(n)), timeout_s=60)
        answered = server.get(f"/v1/instances/{inst['id']}")
        read_at = time.monotonic()
        assert answered["id"] == inst["id"]
        assert not ended, "the read waited for the execs to be let go: they held the handlers' threads"
        release()
        for t in execs:
            t.join(60)
        assert results == [0] * n and min(ended) > read_at
    finally:
        backstop.cancel()
        release()
