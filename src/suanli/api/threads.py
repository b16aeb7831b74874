"""The threads an API process runs its handlers on.

FastAPI runs every plain ``def`` endpoint on anyio's worker threads, 40 per event loop by
default. Suanli's handlers are Python that holds the GIL but for short waits on the
database, so with 40 threads every request in flight advances at once, each slowed by
all the others (processor sharing), and a create waits out every listing that arrived
after it. Under 50 clients doing create + list that put the phase's p99 at 1.98-2.25 s;
with ``HANDLER_THREADS`` (8) the rest wait their turn in order and each runs nearly
alone: 1.09-1.30 s, at the same throughput (BENCHMARKS.md, issue 18, session 29).

A call that waits on a backend for as long as a renter asks (``exec`` runs a command for
up to an hour) must not hold one of those few threads: enough of them would stop every
other request of the process. Such calls run on a limiter of their own
(``backend_call``), as many at once as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar
from fastapi import FastAPI

#: worker threads for the handlers (anyio's default limiter, per event loop)
HANDLER_THREADS = 8
#: threads for calls that wait on a backend (``backend_call``), per event loop
BACKEND_THREADS = 40

_backend_limiter: RunVar[anyio.CapacityLimiter] = RunVar("suanli_backend_threads")

T = TypeVar("T")


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    """Sets the handlers' thread count on the loop that serves the app."""
    anyio.to_thread.current_default_thread_limiter().total_tokens = HANDLER_THREADS
    yield


async def backend_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a worker thread of the backend limiter, not the handlers'."""
    try:
        limiter = _backend_limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(BACKEND_THREADS)
        _backend_limiter.set(limiter)
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=limiter)
