"""The pipeline gate at the database, on SQLite and PostgreSQL: the waiting-work read is
one statement however large the DAG, and one tick cancels a whole chain behind a failed
job. The control loop is driven tick by tick from the test thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, select

from suanli.api.context import ServerContext
from suanli.api.server import build
from suanli.control import pipelines, workloads
from suanli.control.auth import Principal
from suanli.control.task import Task
from suanli.db.models import Event, Job
from tests.event_helpers import events_text

ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")


@pytest.fixture
def ctx(db_url: str, tmp_path: Path) -> Iterator[ServerContext]:
    ctx, _ = build(tmp_path / "data", db_url, start_loop=False, runtime="process", allow_process_runtime=True, audit=False)
    try:
        yield ctx
    finally:
        ctx.db.dispose()


def chain(n: int, first_deps: list[int | str] | None = None) -> list[Task]:
    return [
        Task.model_validate({"name": f"c{i}", "run": "true", "depends_on": [f"c{i - 1}"] if i else (first_deps or [])})
        for i in range(n)
    ]


def statements(ctx: ServerContext, fn) -> tuple[object, int]:  # type: ignore[no-untyped-def]
    seen: list[str] = []

    def count(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
        if not statement.lstrip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA")):
            seen.append(statement)

    event.listen(ctx.db.engine, "before_cursor_execute", count)
    try:
        with ctx.db.transaction() as s:
            out = fn(s)
    finally:
        event.remove(ctx.db.engine, "before_cursor_execute", count)
    return out, len(seen)


def test_the_waiting_read_is_one_statement_per_kind_whatever_the_dag(ctx: ServerContext) -> None:
    pipelines.submit(ctx.db, ADMIN, chain(5))
    small, n_small = statements(ctx, workloads.waiting)
    pipelines.submit(ctx.db, ADMIN, chain(400))
    large, n_large = statements(ctx, workloads.waiting)
    assert [w.name for _, w in small] == ["c0"], small  # the rest wait on it
    assert sorted(w.name for _, w in large) == ["c0", "c0"], large
    assert n_small == n_large == 2, (n_small, n_large)  # instances, jobs: no query per job
    _, n_cancel = statements(ctx, pipelines.cancel_doomed)
    assert n_cancel == 1, n_cancel  # nothing failed: one small read


def test_one_tick_cancels_a_whole_chain_behind_a_failed_job(ctx: ServerContext) -> None:
    assert ctx.loop is not None
    rows = pipelines.submit(ctx.db, ADMIN, chain(300))
    with ctx.db.transaction() as s:
        root = s.get(Job, rows[0].id)
        assert root is not None
        workloads.end(s, root, "failed", "it broke")
    ctx.loop.tick()
    with ctx.db.sessions() as s:
        states = [s.get(Job, r.id).state for r in rows]  # type: ignore[union-attr]
        last = s.get(Job, rows[-1].id)
        assert last is not None
        evs = workloads_events(s, last.id)
    assert states == ["failed"] + ["cancelled"] * 299, states
    assert last.reason == f"dependency job {rows[-2].id} (c298) was cancelled: dependency job {rows[0].id} (c0) failed"
    assert [e.to_state for e in evs] == ["queued", "cancelled"], events_text(evs)


def test_after_finished_runs_after_a_failure(ctx: ServerContext) -> None:
    assert ctx.loop is not None
    a, b = pipelines.submit(
        ctx.db, ADMIN, [Task(name="a", run="exit 1"), Task(name="b", run="true", depends_on=["a"], after="finished")]
    )
    with ctx.db.transaction() as s:
        assert [w.id for _, w in workloads.waiting(s)] == [a.id]
        row = s.get(Job, a.id)
        assert row is not None
        workloads.end(s, row, "failed", "it broke")
    with ctx.db.transaction() as s:
        assert pipelines.cancel_doomed(s) == []
        assert [w.id for _, w in workloads.waiting(s)] == [b.id]


def workloads_events(s, job_id: int):  # type: ignore[no-untyped-def]
    return list(s.scalars(select(Event).where(Event.kind == "job", Event.object_id == job_id).order_by(Event.id)))
