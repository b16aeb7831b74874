"""Idle auto-stop: an instance nobody uses is stopped, its disk kept, its billing ended.

An instance with a window (``--autostop 30m``; else its tenant's default, else the
platform's ``--autostop-default``; 0 or none: never) is judged at every metrics
collection (``control.metrics``). A sample counts as **activity** when any of:

- **GPU**: a real GPU's utilisation (NVML) is above ``gpu_percent`` (default 5 %);
- **CPU**: the container's CPU over the last interval is above ``cpu_percent`` (default
  5 % of one core): the image's own idle processes (sshd, the keeper's ``sleep``) stay far
  below it, a shell running anything does not. A task's first reading is its average
  since it started, start-up included: shown, not taken as activity;
- **sessions**: an established inbound TCP connection to the instance's SSH port or to
  one of its published ports (the port proxy's connections: JupyterLab, its terminals,
  a web app), read from the container's own network namespace.

Virtual GPUs have no NVML: their instances are judged on CPU and sessions only. Host
processes (no isolation) share the host's connection table: CPU (and real GPUs) only.
An instance without a sample (its backend does not report usage) is never stopped.

Idle since = the later of its last activity and when its current run started. When
``window - notice`` has passed, it gets a **notice** (an event, the notice columns the
instance JSON shows, the deadline file in the container), due exactly at idle since +
window; activity during the notice withdraws it. At the deadline the notices phase stops
it through the eviction path (``control.evict``, cause ``idle``): SIGTERM with the grace
period, allocation released (billing stops), state ``stopped``, disk kept. So an idle
instance stops within window + one collection interval (+ the stop's grace).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from suanli.backends.base import Handle
from suanli.bounds import duration_text
from suanli.control.lifecycle import record_event
from suanli.control.metrics import WorkloadUsage
from suanli.control.notice import clear_notice, notice_of, notify
from suanli.control.plane import Plane
from suanli.db.kept import kept_whole
from suanli.db.models import Allocation, Instance, Tenant
from suanli.errors import Invalid

log = logging.getLogger(__name__)

#: ``notice_for`` of an idle auto-stop notice (``control.expiry`` stops, not requeues)
BENEFICIARY = "idle"

#: The shortest window a renter may ask for: shorter ones stop work between two commands.
MIN_WINDOW_S = 300


@dataclass
class AutostopSettings:
    #: the platform's window for instances that ask none and whose tenant has none (None: off)
    default_s: int | None = None
    #: the shortest window accepted (``--autostop-min``; the operator may lower it, tests do)
    min_s: int = MIN_WINDOW_S
    cpu_percent: float = 5.0  #: CPU above this (percent of one core) is activity
    gpu_percent: float = 5.0  #: a real GPU's utilisation above this is activity
    notice_s: float = 120.0  #: the notice before the stop; at most a quarter of the window

    def __post_init__(self) -> None:
        if self.min_s < 1 or self.cpu_percent < 0 or self.gpu_percent < 0 or self.notice_s < 0:
            raise ValueError("autostop: min_s >= 1, thresholds and notice >= 0")
        if self.default_s is not None and 0 < self.default_s < self.min_s:
            raise ValueError(f"autostop default {self.default_s} s is below the minimum {self.min_s} s")

    def check(self, window_s: int | None, field: str = "autostop_s") -> int | None:
        """A requested window: None (not asked), 0 (off) or at least ``min_s``."""
        if window_s is None or window_s == 0:
            return window_s
        if window_s < 0 or window_s < self.min_s:
            raise Invalid(
                f"{field}: {window_s} s is shorter than the minimum idle window {duration_text(self.min_s)} "
                f"({self.min_s} s); 0 turns auto-stop off"
            )
        return window_s

    def window_for(self, asked: int | None, tenant_default: int | None) -> int | None:
        """The window a new instance gets: its own, its tenant's, the platform's; 0 -> None."""
        for w in (asked, tenant_default, self.default_s):
            if w is not None:
                return w or None
        return None


def is_active(u: WorkloadUsage, settings: AutostopSettings) -> bool:
    return (
        (u.gpu_util_percent is not None and u.gpu_util_percent > settings.gpu_percent)
        or (u.cpu_over_interval and u.cpu_percent > settings.cpu_percent)
        or bool(u.sessions)
    )


def why_active(u: WorkloadUsage, settings: AutostopSettings) -> str:
    if u.gpu_util_percent is not None and u.gpu_util_percent > settings.gpu_percent:
        return f"GPU {u.gpu_util_percent:.0f}%"
    if u.cpu_over_interval and u.cpu_percent > settings.cpu_percent:
        return f"CPU {u.cpu_percent:.0f}% of a core"
    return f"{u.sessions} open session(s)"


def tenant_default(s: Session, tenant_id: int) -> int | None:
    """The tenant's own idle window, if it set one; the tenants that did are kept while
    the catalog is unchanged (``db.kept``)."""
    windows = kept_whole(s, "autostop", _windows)
    if windows is not None:
        return windows.get(tenant_id)
    t = s.get(Tenant, tenant_id)
    return t.autostop_s if t is not None else None


def _windows(s: Session) -> MappingProxyType[int, int]:
    rows = s.execute(select(Tenant.id, Tenant.autostop_s).where(Tenant.autostop_s.is_not(None)))
    return MappingProxyType({tenant: int(window) for tenant, window in rows if window is not None})


def check(plane: Plane, settings: AutostopSettings, samples: list[WorkloadUsage], now: float) -> list[int]:
    """After a collection: record activity, withdraw idle notices of instances that are
    active again, notice the ones idle for ``window - notice``. Returns the ids noticed."""
    by_id = {u.workload_id: u for u in samples if u.kind == "instance"}
    todo: list[tuple[int, list[Handle], float, str]] = []
    with plane.db.transaction() as s:
        rows = list(
            s.scalars(
                select(Instance).where(
                    Instance.state == "running", Instance.handles.is_not(None), Instance.autostop_s.is_not(None)
                )
            )
        )
        starts = dict(
            s.execute(
                select(Allocation.instance_id, func.max(Allocation.started_at))
                .where(Allocation.instance_id.in_([r.id for r in rows]), Allocation.ended_at.is_(None))
                .group_by(Allocation.instance_id)
            ).all()
        )
        for row in rows:
            u = by_id.get(row.id)
            window = row.autostop_s or 0
            if u is None or window <= 0:
                continue  # not measured: never stopped on a guess
            notice = notice_of(row)
            if is_active(u, settings):
                row.active_at = now
                if notice is not None and notice.beneficiary == BENEFICIARY:
                    clear_notice(row)
                    record_event(
                        s,
                        "instance",
                        row.id,
                        "running",
                        "running",
                        f"idle notice withdrawn: active again ({why_active(u, settings)})",
                    )
                continue
            if not u.cpu_over_interval:
                # the collector's first reading of it (its average since start, or after the
                # worker restarted): no judgment until a reading over an interval, or a busy
                # instance running longer than its window is noticed on the first look
                continue
            started = starts.get(row.id)
            start_s = started.replace(tzinfo=started.tzinfo or UTC).timestamp() if started is not None else now
            idle_since = max(row.active_at or 0.0, start_s)
            lead = min(settings.notice_s, window / 4)
            if notice is None and now - idle_since >= window - lead:
                deadline = idle_since + window
                since = datetime.fromtimestamp(idle_since, tz=UTC).isoformat(timespec="seconds")
                why = (
                    f"idle since {since} (no GPU or CPU activity above {settings.cpu_percent:g}%, no open session): "
                    f"auto-stop after {duration_text(window)}; its disk is kept"
                )
                todo.append((row.id, [Handle.from_json(h) for h in row.handles or []], deadline, why))
    told = []
    for wid, handles, deadline, why in todo:
        node = ",".join(h.data.get("node", "") for h in handles if h.data.get("node")) or "its node"
        # the notice's length from the clock now, not from the look's start: a collection
        # takes seconds on a busy host, and the deadline stays idle since + window
        left = max(0.0, deadline - plane.clock.now())
        if notify(plane, "instance", wid, handles, BENEFICIARY, node, why=why, notice_s=left):
            told.append(wid)
    return told
