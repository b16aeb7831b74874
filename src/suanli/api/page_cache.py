"""Whole answers of list pages (a renter's instances or jobs), kept for a few seconds.

Why: the console and ``watch``-style scripts ask for the same page every few seconds,
and computing one takes several statements (the page's allocations, usage samples and,
most of all, the cost figures: rated sums, posted records, the allocations rated) and
10-25 ms of CPU. A page asked again is answered from memory, after its stamps are read,
when nothing it shows was seen to change: the page's rows, every column, and their
waiting reasons (``control.listing``: a transition, a stop asked, a reclaim notice, a new
or deleted row, the scheduler's reason for a wait; one statement, from which a changed
page is then computed), and the
billing stamp (a price version, a subscription bought or cancelled;
``workload_cost.billing_stamp``: kept with the catalog, else a statement).
So a renter sees their own change on the next request. What may be older than the
request, by at most ``stale_ms`` (8 s, inside billing's 10-s visibility rule): what
accrued meanwhile and how a rating run split it into rated and accruing, a spot rate
following the market, the latest usage sample and the states of a job's dependencies.
Each API worker process keeps its own; a page is kept per user and URL.

When the database tells that nothing changing the tenant's pages was committed since a
page was kept (``db.changes``: per-tenant counts, one look shared by the requests waiting
for it, ``api.freshness``), the page is answered on the event loop with no read and no
worker thread (``answer``): under 50 clients those hand-offs, not the stamps' reads,
were most of a listing's wait. Such a commit sends the next request for each of that
tenant's pages (an operator's: every page) back to the stamps, which decide as before.

A page past its life whose tenant's token has not moved differs from computing it now
only by what moves with the clock (what accrued, the spot market, the latest sample). It
is answered at once, up to ``stale_ms`` old (8 s, inside billing's 10-s visibility rule),
while it is computed again in the background (HTTP's stale-while-revalidate, RFC 5861):
under 50 clients the pages expiring every few seconds, each computed on the request's
path, were most of a listing's tail. At most ``refreshers`` pages are computed so at once
per process (a page waiting for one is answered as it is meanwhile); past ``stale_ms`` the
request computes its page as before. However they are asked for, at most ``computing``
pages are computed at once per process.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from suanli.api.freshness import Freshness
from suanli.billing.workload_cost import billing_stamp
from suanli.clock import SYSTEM, Clock
from suanli.control.auth import Principal
from suanli.control.listing import Listing
from suanli.db.session import Database

#: what a cached answer repeats of the computed one besides its body
KEPT_HEADERS = ("x-next-cursor", "link")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    at_ms: int
    #: how long it may be answered: drawn per page between ``min_age_ms`` and ``max_age_ms``
    life_ms: int
    stamp: Hashable
    #: the tenant's change token (``db.changes``) read before the stamp; None: unknown
    token: Hashable | None
    body: bytes
    headers: dict[str, str]


@dataclass
class PageCache:
    max_age_ms: int = 5_000
    #: each page lives a random span from this to ``max_age_ms``: pages computed together
    #: (50 clients arriving at once) would otherwise all be computed again together, every
    #: 5 s, and stall every request of the process meanwhile (a second, measured)
    min_age_ms: int = 3_000
    #: a page past its life, its token unmoved, is answered up to this old while computed again
    stale_ms: int = 8_000
    #: pages computed in the background at once (per process)
    refreshers: int = 2
    #: pages computed at once (per process): 50 computed together each took the whole
    #: burst's time, and starved the event loop answering kept pages meanwhile
    computing: int = 2
    size: int = 1_024  # pages; when full it starts again empty
    clock: Clock = SYSTEM
    _pages: dict[Hashable, Answer] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _computing: threading.Semaphore = field(init=False, repr=False)
    #: the keys being computed in the background, and their tasks (kept from the collector)
    _refreshing: dict[Hashable, asyncio.Task] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._computing = threading.Semaphore(self.computing)

    async def answer(
        self,
        db: Database,
        fresh: Freshness,
        request: Request,
        response: Response,
        who: Principal,
        read_page: Callable[[Session], Listing[Any]],
        compute: Callable[[Listing[Any]], Sequence[BaseModel]],
    ) -> Response:
        """``respond``, but a kept page whose tenant's change token is what a look begun
        after this request arrived saw is answered here, on the event loop: young, or up
        to ``stale_ms`` old while it is computed again in the background."""
        changes = await fresh.changes()
        token = None if changes is None else changes.token(None if who.sees_all else who.tenant_id)
        key = _key(who, request)
        with self._lock:
            hit = self._pages.get(key)

        def again() -> Response:
            return self.respond(db, request, response, who, read_page, compute, token)

        if token is not None and hit is not None and hit.token == token:
            if self._young(hit):
                return _response(hit)
            if 0 <= self._age(hit) <= self.stale_ms:
                self._refresh(key, again)
                return _response(hit)
        return await run_in_threadpool(again)

    def respond(
        self,
        db: Database,
        request: Request,
        response: Response,
        who: Principal,
        read_page: Callable[[Session], Listing[Any]],
        compute: Callable[[Listing[Any]], Sequence[BaseModel]],
        token: Hashable | None = None,
    ) -> Response:
        """The page at ``request``'s URL as ``who`` sees it: kept, or ``compute``\\ d from
        the rows ``read_page`` read (``compute`` may set the paging headers on
        ``response``) and kept. The stamps are read before the page's other figures, so
        a change racing with them makes the next request compute again rather than keep
        an older page; ``token`` (the tenant's change token, read before the stamps) is
        kept with it."""
        key = _key(who, request)
        with db.reads() as s:  # ``compute``'s reads too (``Database.reads`` nests)
            page = read_page(s)
            stamp = (page.stamp, billing_stamp(s))
            with self._lock:
                hit = self._pages.get(key)
            if hit is not None and hit.stamp == stamp and self._young(hit):
                if hit.token != token:
                    hit = replace(hit, token=token)
                    self._keep(key, hit)
                return _response(hit)
            with self._computing:
                at = self.clock.now_ms()
                outs = compute(page)
        body = JSONResponse([o.model_dump(mode="json") for o in outs]).body  # as FastAPI renders a response_model
        life = random.randint(self.min_age_ms, self.max_age_ms)  # noqa: S311 - spreading load, not a secret
        hit = Answer(at, life, stamp, token, bytes(body), {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers})
        self._keep(key, hit)
        return _response(hit)

    def _age(self, hit: Answer) -> int:
        """Milliseconds since it was computed (negative: the clock was set back)."""
        return self.clock.now_ms() - hit.at_ms

    def _young(self, hit: Answer) -> bool:
        return 0 <= self._age(hit) <= hit.life_ms

    def _refresh(self, key: Hashable, again: Callable[[], Response]) -> None:
        """Have ``key``'s page computed again in the background, unless it already is or
        ``refreshers`` pages already are (a request after those starts it)."""
        loop = asyncio.get_running_loop()
        for k, task in list(self._refreshing.items()):
            if task.get_loop() is not loop:  # left by an event loop that ended (tests build one per client)
                del self._refreshing[k]
        if key in self._refreshing or len(self._refreshing) >= self.refreshers:
            return  # under way, or a later request starts it (the page is still within stale_ms)

        async def refresh() -> None:
            try:
                await run_in_threadpool(again)
            except Exception:  # the page stays as it was; past ``stale_ms`` a request computes it and sees why
                log.debug("page refresh failed", exc_info=True)
            finally:
                self._refreshing.pop(key, None)

        self._refreshing[key] = loop.create_task(refresh())

    async def settled(self) -> None:
        """Wait for the background computations under way (tests)."""
        while self._refreshing:
            await asyncio.gather(*self._refreshing.values(), return_exceptions=True)

    def _keep(self, key: Hashable, hit: Answer) -> None:
        with self._lock:
            if len(self._pages) >= self.size:
                self._pages.clear()
            self._pages[key] = hit

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()


def _key(who: Principal, request: Request) -> Hashable:
    return (who.user_id, who.tenant_id, who.role, who.pinned, str(request.url))


def _response(hit: Answer) -> Response:
    return Response(hit.body, media_type="application/json", headers=hit.headers)


__all__ = ["PageCache"]
