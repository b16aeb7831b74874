"""The spot reclaim notice as it is stored and delivered.

A notice lives in the workload's stored handles (``data.notice``: deadline, beneficiary
or why, notice length), so a restarted server keeps the deadlines it promised. The
reclaimer writes it (``control.reclaim``); reconcile cuts it short when the workload ends
during it (``control.reconcile``).
"""

from __future__ import annotations

import signal
from pathlib import Path

from suanli.backends.base import Backend, Handle


def notice_of(handles: list | None) -> dict | None:
    """The notice stored in a row's handles (JSON), or None."""
    for h in handles or []:
        notice = (h.get("data") or {}).get("notice")
        if notice:
            return notice
    return None


def with_notice(handles: list, notice: dict) -> list:
    """The handles with ``notice`` stored in each."""
    return [{**h, "data": {**h["data"], "notice": notice}} for h in handles]


def cut_short(handles: list, now: float) -> list:
    """The handles with their notice due at ``now`` at the latest, marked as ended early."""
    return [
        with_notice([h], {**n, "deadline": min(n["deadline"], now), "ended_early": True})[0]
        if (n := (h.get("data") or {}).get("notice"))
        else h
        for h in handles
    ]


def deliver_notice(backend: Backend, handle: Handle, deadline: float, send_signal: bool = True) -> None:
    """SIGUSR1 with the deadline written where the task reads it
    (``$SUANLI_PREEMPT_DEADLINE_FILE``, in the task's directory). Backends with their own
    notice delivery (Slurm: through the batch wrapper) implement ``notice``."""
    notice = getattr(backend, "notice", None)
    if send_signal and callable(notice):
        notice(handle, deadline)
        return
    task_dir = handle.data.get("dir")
    if task_dir:
        Path(task_dir, "preempt_deadline").write_text(f"{int(deadline)}\n")
    if send_signal:
        backend.signal(handle, signal.SIGUSR1)
