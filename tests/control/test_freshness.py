"""The database's change token (``db.changes``) and the look shared by waiting requests
(``api.freshness``), on a real SQLite file and PostgreSQL: equal tokens mean nothing was
committed in between, and no request is given a token read before it arrived."""

from __future__ import annotations

import asyncio
import threading
import time

from sqlalchemy import delete, text
from sqlalchemy.sql.util import find_tables

from suanli.api.freshness import Freshness
from suanli.control import instances, jobs
from suanli.control.auth import Principal
from suanli.db.changes import Changes, ChangeWatch
from suanli.db.models import Tenant, WaitingReason
from suanli.db.session import Database
from tests.async_helpers import run_async


def commit(db: Database, workload_id: int) -> None:
    """A commit a page could show (a waiting reason)."""
    with db.transaction() as s:
        s.add(WaitingReason(kind="job", workload_id=workload_id, code="capacity", detail=""))


def tokens(watch: ChangeWatch) -> tuple:
    """The tokens of an operator's pages and of tenant 5's."""
    seen = watch.look()
    assert seen is not None
    return seen.token(None), seen.token(5)


def test_the_token_moves_with_every_commit_a_page_could_show_and_only_then(db_url: str) -> None:
    db = Database(db_url)
    watch = ChangeWatch(db)
    try:
        assert watch.can_tell
        first = tokens(watch)
        with db.reads() as s:  # a read commits nothing
            s.get(Tenant, 1)
        commit_tenant = Tenant(name="not-shown")  # nor does a commit no page shows
        with db.transaction() as s:
            s.add(commit_tenant)
        assert tokens(watch) == first
        with db.transaction() as s:  # nor a transaction rolled back
            s.add(WaitingReason(kind="instance", workload_id=1, code="capacity", detail=""))
            s.flush()
            s.rollback()
        assert tokens(watch) == first
        commit(db, 1)  # the waiting reason of a row that is not there: every tenant's pages
        second = tokens(watch)
        assert second[0] != first[0] and second[1] != first[1]
        assert tokens(watch) == second
        with db.transaction() as s:
            s.execute(delete(WaitingReason))
        assert tokens(watch)[1] not in (first[1], second[1])
        # a lost connection: "cannot tell" once, then tokens of a new connection
        watch._look.close()  # type: ignore[union-attr]
        assert watch.look() is None
        assert tokens(watch)[1] not in (first[1], second[1])
    finally:
        watch.close()
        db.dispose()


def test_every_table_a_page_stamp_reads_has_the_triggers(db_url: str) -> None:
    """Migration 0016 names the tables; the stamps may come to read another."""
    who = Principal(user_id=1, tenant_id=1, name="ops", role="admin")
    stamped = {
        t.name
        for stmt in (instances._listed(who, True, None), jobs._listed(who, None, None))
        for t in find_tables(stmt, include_joins=True)
    } | {"billing_price_versions", "billing_subscriptions"}  # workload_cost.billing_stamp
    db = Database(db_url)
    try:
        with db.reads() as s:
            if db.is_sqlite:
                q = "SELECT tbl_name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'suanli_change_%'"
            else:
                q = "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'suanli_change_notice'"
            noticed = set(s.scalars(text(q)))
        assert stamped <= noticed, stamped - noticed
    finally:
        db.dispose()


class HeldWatch(ChangeWatch):
    """A real watch whose look, once it has read the token, waits to be let go: the test
    decides what arrives while a look is in flight."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.looks = 0
        self.gate = threading.Event()
        self.reading = threading.Event()

    def look(self) -> Changes | None:
        seen = super().look()
        self.looks += 1
        self.reading.set()
        assert self.gate.wait(10)
        return seen


def test_a_request_never_gets_a_token_read_before_it_arrived(db_url: str) -> None:
    db = Database(db_url)
    watch = HeldWatch(db)
    fresh = Freshness(watch)

    async def scenario() -> tuple[Changes | None, ...]:
        early = asyncio.create_task(fresh.changes())
        await asyncio.to_thread(watch.reading.wait, 10)  # the first look has read its token
        commit(db, 7)  # committed after that read, before the next two arrive
        late = [asyncio.create_task(fresh.changes()) for _ in range(2)]
        await asyncio.sleep(0)
        watch.gate.set()
        return await early, *(await asyncio.gather(*late))

    try:
        before, *after = run_async(scenario())
        assert before is not None and after[0] is not None
        assert after[0] == after[1]  # the two late ones share one look, after the commit
        assert after[0].token(None) != before.token(None)
        assert watch.looks == 2
    finally:
        watch.close()
        db.dispose()


def test_threads_asking_at_once_share_a_look_begun_after_they_asked(db_url: str) -> None:
    """``look(since=...)`` (the catalog's counts, ``db.kept``): a look begun since then is
    answered again; one begun before, never."""
    db = Database(db_url)
    watch = ChangeWatch(db)
    try:
        first = watch.look()
        asked = time.monotonic()
        second = watch.look(since=asked)
        assert second is not first  # the last look began before: a new one
        assert watch.look(since=asked) is second
        commit(db, 3)
        third = watch.look(since=time.monotonic())
        assert third is not None and second is not None and third.token(None) != second.token(None)
    finally:
        watch.close()
        db.dispose()


def test_a_watch_nobody_asks_still_reads_its_notices(db_url: str) -> None:
    """PostgreSQL holds every notice a listener has not read and cannot trim its queue
    past them: an API worker nobody lists through still reads them."""
    db = Database(db_url)
    watch = ChangeWatch(db, idle_look_s=0.2)
    try:
        watch.look()
        if db.is_sqlite:  # nothing held for it: no thread
            assert watch._keeper is None
            return
        commit(db, 3)
        deadline = time.monotonic() + 10
        while not watch._look.heard and time.monotonic() < deadline:  # type: ignore[union-attr]
            time.sleep(0.05)
        assert watch._look.heard  # type: ignore[union-attr]
        watch.close()
        assert watch._keeper is not None
        watch._keeper.join(5)
        assert not watch._keeper.is_alive()
    finally:
        watch.close()
        db.dispose()
