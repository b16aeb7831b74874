"""How the idle auto-stop tests bound a stop: by what the collector and the control loop
did, not by fixed seconds. On a loaded machine a look of the collector (``podman stats``)
took up to 3.6 s and a control-loop tick 2.7 s, and a bound of "window + an interval +
slack" failed twice in five suite runs while the logic was right."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from suanli.db.models import Allocation
from tests.control.control_helpers import Server, wait_until
from tests.event_helpers import events_text


@dataclass
class Timeline:
    """A server's collector looks (the look's time, when its hooks, auto-stop's first, were
    done, and the instances it sampled) and control-loop ticks (began, ended), from
    ``record`` on."""

    looks: list[tuple[float, float, set[int]]] = field(default_factory=list)
    ticks: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def record(cls, srv: Server) -> Timeline:
        assert srv.ctx.metrics is not None and srv.ctx.loop is not None
        t = cls()
        srv.ctx.metrics.after.append(
            lambda got, now: t.looks.append((now, time.time(), {u.workload_id for u in got if u.kind == "instance"}))
        )
        tick = srv.ctx.loop.tick

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            try:
                return tick(*args, **kwargs)
            finally:
                t.ticks.append((began, time.time()))

        srv.ctx.loop.tick = timed  # type: ignore[method-assign]
        return t

    def assert_stopped_in_time(self, srv: Server, instance_id: int, window_s: float, notice_s: float) -> list[dict]:
        """An idle instance's stop began no earlier than its window after it was created, and
        no later than the end of the first tick that began after both its deadline (idle
        since its allocation began, plus the window) and the first look that could judge
        it idle: at least the window less the notice after that, its first reading aside
        (an average since start makes no judgment). With looks every interval, that is the
        promise "within window + one collection interval". Returns its events."""
        events = srv.get(f"/v1/events?kind=instance&object_id={instance_id}")
        created_at, ran_at, stop_at = (
            datetime.fromisoformat(next(e for e in events if e["to_state"] == state)["ts"]).timestamp()
            for state in ("pending", "running", "stopping")
        )
        with srv.ctx.db.reads() as s:
            placed = s.scalar(select(func.min(Allocation.started_at)).where(Allocation.instance_id == instance_id))
        since = placed.replace(tzinfo=UTC).timestamp()
        seen = [(now, done) for now, done, ids in self.looks if instance_id in ids]
        lead = min(notice_s, window_s / 4)  # control.autostop: the notice is at most a quarter of the window
        judged = next((done for now, done in seen[1:] if now - since >= window_s - lead), None)
        due = max(judged or stop_at, since + window_s)
        by = wait_until(lambda: next((end for began, end in self.ticks if began >= due), None), 30)
        assert judged is not None and by is not None, (since - ran_at, seen, self.ticks, events_text(events))
        assert created_at + window_s <= stop_at <= by, (stop_at - since, by - since, seen, events_text(events))
        return events
