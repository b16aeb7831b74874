"""Take running work off its nodes and requeue it: the one eviction shared by
failover (a node is down) and reclaim (a spot notice ran out).

The backend stop happens with no transaction open; only a stop known to have
succeeded releases the allocation, so a failed stop never hands GPUs out twice.
"""

from __future__ import annotations

import logging
import os

from suanli.backends.base import BackendError, Handle
from suanli.control import workloads
from suanli.control.capacity import give_back
from suanli.control.launcher import checkpoint_dir
from suanli.control.lifecycle import transition
from suanli.control.notice import clear_notice
from suanli.control.plane import Plane
from suanli.db.models import Instance, Job

log = logging.getLogger(__name__)


def evict(plane: Plane, kind: str, wid: int, cause: str, why: str, beneficiary: str | None = None) -> bool:
    """Stop every task of the row, then release and requeue it. ``cause`` is
    ``failover`` (stopped at once; a job without ``checkpoint_dir`` and any instance
    fail), ``reclaim`` (SIGTERM with the grace period; requeued) or ``funds`` (as
    reclaim, but an instance stops, disk kept, until its owner starts it) or ``idle``
    (idle auto-stop: as ``funds``). ``beneficiary``: the waiting work (``job-7``) a
    requeued job makes room for; the next pass places it after that work
    (``Job.evicted_for``). False if the row is no longer running or a stop failed (the
    next tick tries again)."""
    with plane.db.transaction() as s:
        row = workloads.get(s, kind, wid)
        if row is None or row.state != "running":
            return False
        handles = [Handle.from_json(h) for h in row.handles or []]
    for h in handles:
        b = plane.backends.get(h.backend)
        if b is not None:
            try:
                b.stop(h, grace_s=0.0 if cause == "failover" else plane.reclaim.grace_s)
            except BackendError as exc:
                # Not known to be stopped: releasing now could hand its GPUs out twice
                # and a resubmission would be refused as already running. Keep it as
                # it is; the next tick tries again.
                log.warning("stopping %s for %s failed, will retry: %s", h.key, cause, exc)
                return False
    with plane.db.transaction() as s:
        row = workloads.get(s, kind, wid)
        if row is None or row.state != "running":
            return False
        ckpt = row.spec.get("checkpoint_dir") if isinstance(row, Job) else None
        if cause == "failover" and not ckpt and isinstance(row, Job):
            workloads.end(s, row, "failed", f"{why}; no checkpoint_dir to resume from")
            return True
        give_back(s, row)
        row.handles = None
        clear_notice(row)
        if isinstance(row, Instance) and cause in ("funds", "idle"):
            row.desired = "stopped"
            transition(s, row, "stopping", why)
            then = "top up, then start it" if cause == "funds" else "start it again when you need it"
            transition(s, row, "stopped", f"{why}; its disk is kept: {then}")
            return True
        if isinstance(row, Instance):
            transition(s, row, "failed" if cause == "failover" else "preempted", why)
            if cause != "failover":
                transition(s, row, "pending", "waits for capacity to start again")
            return True
        transition(s, row, "requeued", why)
        row.evicted_for = beneficiary
        envs = dict(row.spec.get("envs") or {})
        envs["SUANLI_REQUEUES"] = str(int(envs.get("SUANLI_REQUEUES", "0")) + 1)
        resume = ""
        if ckpt:
            try:
                envs["SUANLI_RESUME_FROM"] = resume = str(checkpoint_dir(plane.data_dir, row.id, ckpt))
            except ValueError:  # a path outside its volume (an old row): its launch says so
                pass
        row.spec = {**row.spec, "envs": envs}
        row.exit_code = None
        transition(s, row, "queued", f"requeued; resumes from {resume}" if resume else "requeued; starts over")
    return True


def last_checkpoint(plane: Plane, row: Job | Instance) -> float | None:
    """mtime of the newest file under the job's checkpoint directory (None: none):
    what a victim would lose if evicted now is the work since then."""
    if not isinstance(row, Job) or not row.spec.get("checkpoint_dir"):
        return None
    try:
        root = checkpoint_dir(plane.data_dir, row.id, row.spec["checkpoint_dir"])
    except ValueError:  # outside its volume: never created, nothing to lose
        return None
    newest = None
    try:
        for entry in os.scandir(root):
            m = entry.stat().st_mtime
            newest = m if newest is None or m > newest else newest
    except OSError:
        return None
    return newest
