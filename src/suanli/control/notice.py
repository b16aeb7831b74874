"""The spot reclaim notice as it is stored and delivered.

A notice lives in the workload's own columns (``db.models.SpotNotice``: deadline,
beneficiary or why, notice length), so a restarted server keeps the deadlines it promised. The
outbid and preemption phases write it (``notify``); reconcile cuts it short when the workload ends
during it (``control.reconcile``).
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from suanli.backends.base import Backend, BackendError, Handle, SupportsNotice
from suanli.control import workloads
from suanli.control.lifecycle import record_event
from suanli.control.plane import Plane
from suanli.control.waiting import Reason
from suanli.db.models import Instance, Job

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    deadline: float  #: SIGTERM then; seconds since the epoch
    at: float  #: when it was given
    notice_s: float
    beneficiary: str  #: ``job-7``, or ``price`` for an outbid bid
    why: str | None = None
    ended_early: bool = False

    @property
    def reason(self) -> str:
        return self.why or f"spot reclaim for {self.beneficiary}"


def notice_of(row: Instance | Job) -> Notice | None:
    if row.notice_deadline is None:
        return None
    return Notice(
        row.notice_deadline,
        row.notice_at or 0.0,
        row.notice_s or 0.0,
        row.notice_for or "",
        row.notice_why,
        row.notice_ended_early,
    )


def give_notice(row: Instance | Job, notice: Notice) -> None:
    row.notice_deadline, row.notice_at, row.notice_s = notice.deadline, notice.at, notice.notice_s
    row.notice_for, row.notice_why, row.notice_ended_early = notice.beneficiary, notice.why, notice.ended_early


def cut_short(row: Instance | Job, now: float) -> None:
    """The work ended during its notice: due at ``now`` at the latest."""
    if row.notice_deadline is not None:
        row.notice_deadline = min(row.notice_deadline, now)
        row.notice_ended_early = True


def clear_notice(row: Instance | Job) -> None:
    """The work left its nodes (evicted, or launched afresh): no notice is pending."""
    row.notice_deadline = row.notice_at = row.notice_s = None
    row.notice_for = row.notice_why = None
    row.notice_ended_early = False


def deliver_notice(backend: Backend, handle: Handle, deadline: float, send_signal: bool = True) -> None:
    """The deadline written where the task reads it (``$SUANLI_PREEMPT_DEADLINE_FILE``),
    then, with ``send_signal``, SIGUSR1: by the backend, which knows where its tasks'
    files are and how a signal reaches them (``SupportsNotice``; Slurm: through the
    batch wrapper). A backend that does not declare it gets a bare SIGUSR1."""
    if isinstance(backend, SupportsNotice):
        backend.notice(handle, deadline, send_signal=send_signal)
    elif send_signal:
        backend.signal(handle, signal.SIGUSR1)


def notify(
    plane: Plane,
    kind: str,
    wid: int,
    handles: list[Handle] | None,
    beneficiary: str,
    node: str,
    why: str | None = None,
    notice_s: float | None = None,
) -> bool:
    """Record the notice (transaction), then deliver SIGUSR1 (no transaction). False if
    the row stopped running or is under notice already (a notice is final, as on AWS).
    ``why`` replaces "spot reclaim for <beneficiary> on <node>" in the events;
    ``notice_s`` the platform's reclaim notice (a tenant's grace when funds run out);
    ``handles`` None: the row's own, as read here."""
    notice_s = plane.reclaim.notice_s if notice_s is None else notice_s
    now = plane.clock.now()
    deadline = now + notice_s
    notice = Notice(deadline, now, notice_s, beneficiary, why)
    with plane.db.transaction() as s:
        row = workloads.get(s, kind, wid)
        if row is None or row.state != "running" or not row.handles or notice_of(row) is not None:
            return False
        give_notice(row, notice)
        if handles is None:
            handles = [Handle.from_json(h) for h in row.handles]
        when = datetime.fromtimestamp(deadline, tz=UTC).isoformat(timespec="seconds")
        record_event(
            s,
            kind,
            wid,
            "running",
            "noticed",
            f"{why or f'spot reclaim for {beneficiary} on {node}'}: SIGUSR1 now, SIGTERM at {when} ({notice_s:.0f}s notice)",
        )
    for h in handles:
        try:
            # an instance's keeper process would die of USR1: it gets the deadline file only
            deliver_notice(plane.backends[h.backend], h, deadline, send_signal=kind == "job")
        except (BackendError, KeyError, OSError) as exc:
            log.warning("notice to %s failed: %s", h.key, exc)
    plane.stats.notices += 1
    return True


def making_room(s: Session, unplaced: dict[workloads.Key, Reason]) -> dict[workloads.Key, Reason]:
    """``unplaced`` with the reasons of work that running work is noticed for (a spot
    reclaim, a migration) saying so and by when: "waiting for capacity (gpu; 2 running
    workloads noticed to make room, due 09:31:05 UTC)", not a wait that looks open-ended."""
    due: dict[str, tuple[int, float]] = {}
    for _, row in workloads.running(s, lambda m: m.notice_deadline.is_not(None)):
        n, last = due.get(row.notice_for or "", (0, 0.0))
        due[row.notice_for or ""] = (n + 1, max(last, row.notice_deadline or 0.0))
    out = dict(unplaced)
    for (kind, wid), reason in unplaced.items():
        if (hit := due.get(f"{kind}-{wid}")) is not None:
            n, deadline = hit
            when = datetime.fromtimestamp(deadline, tz=UTC).strftime("%H:%M:%S UTC")
            work = f"{n} running workload{'s' if n > 1 else ''}"
            out[(kind, wid)] = Reason(reason.code, f"{reason.detail}; {work} noticed to make room, due {when}")
    return out
