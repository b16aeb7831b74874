"""``GET /healthz``: the database answers and the control loop is alive.

Load balancers and monitors call it often, and under load it should cost what a bare
endpoint costs: so it runs on the event loop and reads the loop's counters (one indexed
read, which the worker process writes every second or so) at most once per
``FRESH_S`` per API process, in the thread pool; the callers in between get that
reading. "ok" therefore means the database answered within the last ``FRESH_S``; a
read that fails answers 500 at once and the next call reads again.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool

from suanli.control import loop_report
from suanli.control.loop_report import Counters
from suanli.db.session import Database

#: how old a reading of the loop's counters may be served (the loop writes them about once a second)
FRESH_S = 1.0


class _Reading:
    """The last reading of the counters and when it was taken. Callers that find it stale
    together each read (a few reads a second at most): no lock, which would bind to one
    event loop while the test suite drives an app from several."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.got: Counters | None = None
        self.at = float("-inf")

    async def counters(self) -> Counters | None:
        if time.monotonic() - self.at > FRESH_S:
            self.got = await run_in_threadpool(loop_report.counters, self.db)
            self.at = time.monotonic()
        return self.got


async def healthz(request: Request) -> dict:
    """The database answers (a read of the loop's counters, at most a second old:
    ``loop_updated_at`` says the loop is alive)."""
    got = await request.app.state.health_reading.counters()
    return {
        "ok": True,
        "loop_ticks": got.ticks if got else None,
        "loop_updated_at": got.updated_at.isoformat() if got and got.updated_at else None,
    }


def install(app: FastAPI, db: Database) -> None:
    """The endpoint is one function for every app, its server's state on ``app.state``:
    FastAPI keeps each endpoint function in a process-wide cache, so an endpoint made
    inside ``install`` would keep every app (and its database) a process ever made alive."""
    app.state.health_reading = _Reading(db)
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["system"])
