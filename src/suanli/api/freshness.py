"""What the database's change watch saw in a look that began after the request arrived,
one look shared by every request waiting for it (Kubernetes' "consistent reads from cache" do the same
with etcd's revision).

Why: a kept page may be answered only if nothing it shows changed before the request
came. Asking the database per request costs a worker thread and a read each; under 50
clients the thread hand-offs, not the reads, were the wait. Here a request awaits the
next look that *starts after it arrived*: one look is in flight at a time, on a worker
thread, and every request that arrived meanwhile shares the following one. So a request
waits at most two looks (a look is tens of microseconds on SQLite) and never sees a
token older than itself.
"""

from __future__ import annotations

import asyncio

from starlette.concurrency import run_in_threadpool

from suanli.db.changes import Changes, ChangeWatch


class Freshness:
    def __init__(self, watch: ChangeWatch) -> None:
        self.watch = watch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next: asyncio.Future[Changes | None] | None = None  # the look not yet started
        self._looking = False

    async def changes(self) -> Changes | None:
        """``watch.look()`` begun after this call was (``None``: the database cannot tell)."""
        if not self.watch.can_tell:
            return None
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (tests build one per client): start afresh
            self._loop, self._next, self._looking = loop, None, False
        if self._next is None:
            self._next = loop.create_future()
        waiter = self._next
        if not self._looking:
            self._looking = True
            loop.create_task(self._look())
        return await asyncio.shield(waiter)

    async def _look(self) -> None:
        """Look while anyone waits; whoever arrives during a look waits for the next."""
        try:
            while self._next is not None:
                waiter, self._next = self._next, None
                try:
                    waiter.set_result(await run_in_threadpool(self.watch.look))
                except Exception as exc:  # the waiters fail their requests; the next look tries again
                    waiter.set_exception(exc)
        finally:
            self._looking = False
