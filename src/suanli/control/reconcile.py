"""Make the database and the backends agree, like a Kubernetes controller.

Each pass reads what the database believes (transaction), asks the backends
(no transaction), then applies the difference with guarded updates
(transaction):

- running work that exited: jobs become succeeded/failed with the exit code (a spot
  job that exits during its reclaim notice is requeued instead, by ``control.expiry``);
  instances whose process died become failed; their allocations are released, ending
  when the backend says the tasks ended (``TaskStatus.ended_at``: after a restart, the
  work that died while the server was down is billed to its end, not to the restart),
  or now when it cannot say;
- requested changes: cancelled jobs and stopping/deleted instances are stopped on
  the backend (whole process group), then released;
- launches left in flight by a dead server (``launch_owner`` set, no handles):
  adopted if the backend runs every task, otherwise stopped and failed — never
  started a second time;
- tasks a backend runs that no active row owns are stopped (``sweep_orphans``);
- usage counters are recomputed from active allocations (``repair_counters``).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select, update

from suanli.backends.base import Backend, BackendError, Handle, TaskState
from suanli.clock import SYSTEM, Clock
from suanli.control import workloads
from suanli.control.capacity import give_back
from suanli.control.launcher import remove_disk, task_key
from suanli.control.lifecycle import transition
from suanli.control.notice import cut_short
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Gpu, Instance, Job, Node
from suanli.db.session import Database

log = logging.getLogger(__name__)

#: Requested stops run at most this many at a time.
STOP_WORKERS = 8


@dataclass(frozen=True)
class Observed:
    kind: str
    id: int
    state: str
    handles: list[Handle]
    stop_wanted: bool  #: cancel (job) or stop/delete (instance) requested
    noticed: bool = False  #: under a spot reclaim notice


def _observe(db: Database, only_stops: bool) -> list[Observed]:
    with db.transaction() as s:
        return [
            Observed(
                kind,
                r.id,
                r.state,
                [Handle.from_json(h) for h in r.handles or []],
                r.cancel_requested if isinstance(r, Job) else r.state == "stopping" or r.desired != "running",
                r.notice_deadline is not None,
            )
            for kind, r in workloads.with_tasks(s, only_stops)
        ]


def reconcile_running(
    db: Database,
    backends: dict[str, Backend],
    data_dir: Path,
    grace_s: float = 10.0,
    only_stops: bool = False,
    clock: Clock = SYSTEM,
) -> int:
    """Settle finished, failed and to-be-stopped work; returns how many rows
    changed. ``only_stops``: just act on stop/cancel requests (cheap; the status
    of every task is polled on a slower cadence)."""
    changed = 0
    stops = []
    for ob in _observe(db, only_stops):
        if any(h.backend not in backends for h in ob.handles):
            continue  # run by a backend this server does not drive: not ours to judge
        if ob.stop_wanted:
            stops.append(ob)
            continue
        changed += _settle(db, backends, ob, data_dir, grace_s, clock)
    if stops:  # each waits out its grace period: many at once, not one after another
        with ThreadPoolExecutor(max_workers=min(STOP_WORKERS, len(stops)), thread_name_prefix="suanli-stop") as pool:
            changed += sum(pool.map(lambda ob: _stop(db, backends, ob, data_dir, grace_s), stops))
    return changed


def _stop(db: Database, backends: dict[str, Backend], ob: Observed, data_dir: Path, grace_s: float) -> int:
    for h in ob.handles:
        try:
            backends[h.backend].stop(h, grace_s=grace_s)
        except BackendError as exc:
            # Not known to be stopped: keep the allocation (releasing it could hand the
            # GPUs out twice); the next tick asks again.
            log.warning("stopping %s failed, will retry: %s", h.key, exc)
            return 0
    return _finish(db, ob, stopped=True, exit_code=None, message="", data_dir=data_dir)


def _settle(db: Database, backends: dict[str, Backend], ob: Observed, data_dir: Path, grace_s: float, clock: Clock) -> int:
    """Compare one running row with its tasks. A job succeeds when every node
    exited 0 and fails on the first non-zero exit or lost task (the other nodes
    are stopped: a gang lives and dies together); an instance fails when its
    task is gone. A node that exited 0 while others run is waited for."""
    statuses = [backends[h.backend].status(h) for h in ob.handles]
    states = [st.state for st in statuses]
    if all(st == TaskState.RUNNING for st in states):
        return 0
    if ob.kind == "job" and ob.noticed:  # a node ended during the notice: the gang was reclaimed
        return _cut_notice_short(db, ob, clock.now())
    if ob.kind == "job" and all(st == TaskState.EXITED for st in states):
        bad = [st.exit_code for st in statuses if st.exit_code != 0]
        code = bad[0] if bad else 0
        msg = "" if code == 0 else f"exited with code {code}"
        return _finish(
            db, ob, stopped=False, exit_code=code, message=msg, data_dir=data_dir, ended_at=workloads.ended_at_of(statuses)
        )
    failed_code = next((st.exit_code for st in statuses if st.state == TaskState.EXITED and st.exit_code != 0), None)
    if ob.kind == "job" and TaskState.LOST not in states and failed_code is None:
        return 0  # some nodes finished cleanly, the others still run
    ended_at = workloads.ended_at_of(statuses)  # None while a node still runs: we stop it now
    for h, st in zip(ob.handles, statuses):
        if st.state == TaskState.RUNNING:
            backends[h.backend].stop(h, grace_s=grace_s)
    dead = [h.key for h, st in zip(ob.handles, statuses) if st.state != TaskState.RUNNING]
    what = "exited" if ob.kind == "instance" else "failed"
    return _finish(
        db,
        ob,
        stopped=False,
        exit_code=failed_code,
        message=f"task {', '.join(dead)} {what} or was lost",
        data_dir=data_dir,
        failed=True,
        ended_at=ended_at,
    )


def _cut_notice_short(db: Database, ob: Observed, now: float) -> int:
    """A spot job one of whose nodes ends during its reclaim notice (it checkpointed and
    left, or USR1 killed it) was reclaimed, not finished: bring its deadline forward to
    now, and the notice expiry phase stops the nodes still running, requeues it to resume
    from its checkpoint and places the work that was waiting for it, whichever exit code
    it left with. A gang's nodes leave one after another, and not all cleanly: torchrun's
    agents fail when node 0's, which holds their rendezvous store, has gone first."""
    with db.transaction() as s:
        job = s.get(Job, ob.id)
        if job is None or job.state != "running" or not job.handles:
            return 0
        cut_short(job, now)
    return 1


def _finish(
    db: Database,
    ob: Observed,
    *,
    stopped: bool,
    exit_code: int | None,
    message: str,
    data_dir: Path,
    failed: bool = False,
    ended_at: datetime | None = None,
) -> int:
    delete_disk = False
    with db.transaction() as s:
        if ob.kind == "job":
            job = s.get(Job, ob.id)
            if job is None or job.state != "running":
                return 0
            if stopped:
                workloads.end(s, job, "cancelled", "cancelled by request")
            else:
                workloads.end(s, job, "failed" if failed or exit_code != 0 else "succeeded", message, exit_code, ended_at)
            return 1
        inst = s.get(Instance, ob.id)
        if inst is None or inst.state not in ("running", "stopping"):
            return 0
        give_back(s, inst, ended_at)
        inst.handles = None
        if stopped:
            if inst.state == "running":
                transition(s, inst, "stopping", "stop requested")
            if inst.desired == "deleted":
                transition(s, inst, "deleted", "deleted by request")
                delete_disk = True
            else:
                transition(s, inst, "stopped", "stopped by request")
        else:
            if inst.state == "stopping":
                transition(s, inst, "stopped", message)
            else:
                transition(s, inst, "failed", message)
    if delete_disk:
        remove_disk(data_dir, ob.id)
    return 1


def adopt_or_fail_launches(db: Database, backends: dict[str, Backend], owner: str) -> int:
    """Rows whose launch was started by another (dead) server process."""
    with db.transaction() as s:
        stale = [
            (kind, r.id, r.num_nodes if isinstance(r, Job) else 1)
            for kind, r in workloads.launching(s)
            if r.launch_owner != owner
        ]
    if not stale:
        return 0
    running = {h.key: h for b in backends.values() for h in b.list_running()}
    for kind, wid, n in stale:
        keys = [task_key(kind, wid, r) for r in range(n)]
        found = [running[k] for k in keys if k in running]
        adopt = len(found) == len(keys)
        if not adopt:
            for h in found:
                backends[h.backend].stop(h, grace_s=2)
        with db.transaction() as s:
            row = workloads.get(s, kind, wid)
            if row is None or row.launch_owner is None or row.launch_owner == owner:
                continue
            row.launch_owner = None
            if adopt:
                row.handles = [h.to_json() for h in found]
                transition(s, row, "running", "adopted after a server restart")
                if isinstance(row, Job):
                    row.started_at = row.started_at or utcnow()
            else:
                workloads.end(s, row, "failed", "the server stopped while launching; not started again")
    return len(stale)


def sweep_orphans(db: Database, backends: dict[str, Backend]) -> list[str]:
    """Stop backend tasks that no running row (or launch in flight) owns."""
    with db.transaction() as s:
        owned = {h["key"] for _, r in workloads.with_tasks(s) for h in r.handles or []}
        for kind, r in workloads.launching(s):
            owned |= {task_key(kind, r.id, rank) for rank in range(r.num_nodes if isinstance(r, Job) else 1)}
    stopped = []
    for b in backends.values():
        for h in b.list_running():
            if h.key not in owned:
                log.warning("stopping orphan task %s on %s", h.key, b.name)
                b.stop(h, grace_s=2)
                stopped.append(h.key)
    return stopped


def repair_counters(db: Database) -> int:
    """Recompute node and GPU usage from active allocations; returns fixes made."""
    fixes = 0
    with db.transaction() as s:
        cpu = dict(
            s.execute(
                select(Allocation.node_id, func.sum(Allocation.cpu_milli))
                .where(Allocation.ended_at.is_(None))
                .group_by(Allocation.node_id)
            ).all()
        )
        mem = dict(
            s.execute(
                select(Allocation.node_id, func.sum(Allocation.memory_mib))
                .where(Allocation.ended_at.is_(None))
                .group_by(Allocation.node_id)
            ).all()
        )
        gpu: dict[tuple[int, int], int] = {}
        for a in s.scalars(select(Allocation).where(Allocation.ended_at.is_(None))):
            for g in a.gpu_indices:
                gpu[(a.node_id, int(g))] = gpu.get((a.node_id, int(g)), 0) + a.milli_per_gpu
        for n in s.scalars(select(Node)):
            want_cpu, want_mem = int(cpu.get(n.id) or 0), int(mem.get(n.id) or 0)
            if (n.cpu_used, n.mem_used) != (want_cpu, want_mem):
                s.execute(update(Node).where(Node.id == n.id).values(cpu_used=want_cpu, mem_used=want_mem))
                fixes += 1
        for g in s.scalars(select(Gpu)):
            want = gpu.get((g.node_id, g.index), 0)
            if g.used_milli != want:
                s.execute(update(Gpu).where(Gpu.id == g.id).values(used_milli=want))
                fixes += 1
    if fixes:
        log.warning("repaired %d usage counters", fixes)
    return fixes
