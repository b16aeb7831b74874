"""A Suanli control plane (database and control loop, reclaim included) over real backends, driven
tick by tick from the test thread so each step is deterministic."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from suanli.api.server import build
from suanli.backends.base import Backend
from suanli.control import jobs, nodes
from suanli.control.auth import Principal
from suanli.control.loop import ControlLoop
from suanli.control.plane import ReclaimSettings
from suanli.control.task import Task
from suanli.db.models import Allocation, Event, Job, Node
from suanli.inventory import Inventory
from tests.control.control_helpers import pauses
from tests.event_helpers import events_text
from tests.sqlite_helpers import migrated_sqlite_url

T = TypeVar("T")
ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")


@dataclass
class Platform:
    loop: ControlLoop
    data_dir: Path

    @property
    def db(self):  # type: ignore[no-untyped-def]
        return self.loop.db

    def tick(self) -> None:
        self.loop.tick()

    def until(self, probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
        """Tick until ``probe`` returns something truthy: at once, then after
        ``pauses(0.02, 0.2)``."""
        deadline = time.monotonic() + timeout_s
        for pause in pauses(0.02, 0.2):
            self.tick()
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s:.0f}s waiting for {what}; events:\n{events_text(self.events())}"
                )
            time.sleep(pause)
        raise AssertionError("unreachable")

    def submit(self, **task: Any) -> int:
        return jobs.submit(self.db, ADMIN, Task.model_validate(task)).id

    def job(self, job_id: int) -> Job:
        with self.db.transaction() as s:
            return s.get(Job, job_id)  # type: ignore[return-value]

    def state(self, job_id: int, *states: str) -> Job | None:
        j = self.job(job_id)
        return j if j.state in states else None

    def allocations(self, job_id: int, active: bool = True) -> list[Allocation]:
        with self.db.transaction() as s:
            q = select(Allocation).where(Allocation.job_id == job_id)
            if active:
                q = q.where(Allocation.ended_at.is_(None))
            return list(s.scalars(q.order_by(Allocation.id)))

    def node_name(self, node_id: int) -> str:
        with self.db.transaction() as s:
            return s.get(Node, node_id).name  # type: ignore[union-attr]

    def events(self, kind: str | None = None, object_id: int | None = None) -> list[Event]:
        with self.db.transaction() as s:
            q = select(Event).order_by(Event.id)
            if kind:
                q = q.where(Event.kind == kind)
            if object_id is not None:
                q = q.where(Event.object_id == object_id)
            return list(s.scalars(q))

    def only_nodes(self, keep: set[str]) -> None:
        """Cordon every other node, so a test controls where work may go."""
        for n, _gpus in nodes.list_nodes(self.db):
            if n.name not in keep:
                nodes.set_state(self.db, ADMIN, n.name, "cordoned")

    def close(self) -> None:
        for b in self.loop.backends.values():
            for h in b.list_running():
                b.stop(h, grace_s=0)
        self.db.dispose()


def make_platform(
    data_dir: Path,
    backends: dict[str, Backend],
    inventory: Inventory | None = None,
    notice_s: float = 3.0,
    db_url: str | None = None,
) -> Platform:
    ctx, _ = build(
        data_dir,
        db_url or migrated_sqlite_url(data_dir / "suanli.db"),
        start_loop=False,
        inventory=inventory,
        interval_s=0.05,
        stop_grace_s=2.0,
    )
    ctx.backends.update(backends)
    assert ctx.loop is not None
    ctx.loop.poll_interval_s = 0.0  # ask backends every tick: the tests measure reaction times
    tune(ctx.loop, notice_s)
    return Platform(ctx.loop, ctx.data_dir)


def tune(loop: ControlLoop, notice_s: float) -> None:
    """The tests' settings: a short notice, a short grace, health polled every tick."""
    loop.plane.reclaim = ReclaimSettings(notice_s=notice_s, grace_s=2.0)
    loop.health_interval_s = 0.0


def restarted(p: Platform, backends: dict[str, Backend]) -> Platform:
    """A new server process on the same database: fresh loop (new owner id) and backends."""
    ctx, _ = build(p.data_dir, str(p.db.url), start_loop=False, interval_s=0.05, stop_grace_s=2.0)
    ctx.backends.update(backends)
    assert ctx.loop is not None
    ctx.loop.poll_interval_s = 0.0
    ctx.loop.recover()
    tune(ctx.loop, p.loop.reclaim.notice_s)
    return Platform(ctx.loop, p.data_dir)
