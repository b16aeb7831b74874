"""One scheduling pass: plan placements for queued work, then claim each one in
its own short transaction.

The API never places work. It writes rows in ``pending``/``queued``; this pass
(run by the control loop only) reads a snapshot, asks ``suanli.scheduler`` where
each request goes, and writes the allocation with ``capacity.take``. The claim
``UPDATE ... WHERE launch_owner IS NULL AND state = <waiting state>`` makes sure a
row is allocated once even if two servers run passes at the same time, and the
capacity counters' CHECK constraints make sure a slot is. A conflict means our
snapshot is stale: the pass stops and the next one starts from fresh rows.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from suanli.control import workloads
from suanli.control.capacity import Snapshot, snapshot, take
from suanli.control.lifecycle import record_event
from suanli.control.waiting import CAPACITY, GANG, PINNED, Reason
from suanli.db.models import Allocation as AllocationRow
from suanli.db.models import Instance, Job
from suanli.db.session import Database
from suanli.scheduler import Allocation, ClusterState, OverAllocation, PriorityClass, Request, Scheduler, gang
from suanli.scheduler.framework import failure_reason, feasible_mask
from suanli.scheduler.policy import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Waiting:
    kind: str
    id: int
    request: Request
    num_nodes: int
    created_at: datetime
    #: the waiting work (``job-7``) this was evicted for (``Job.evicted_for``)
    evicted_for: str | None = None
    #: (node, GPU index) a migration's plan put this share on (``Job.moved_to``)
    moved_to: tuple[str, int] | None = None
    #: the row as ``waiting_work`` read it: admission reads it there, not again
    row: Instance | Job | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.id}"


@dataclass
class PassMemo:
    """What the previous pass ended with, so a pass over an unchanged cluster does
    not retry what just failed. Feasibility is monotone in free capacity and a pass
    only takes capacity, so a request that failed at some point of the previous pass
    fails again if this pass starts from the state that one ended with."""

    fingerprint: bytes = b""
    #: requests the policy could not place (not those billing held: a hold can lift
    #: without the cluster changing, e.g. a top-up or a lower price)
    unplaced: dict[tuple[str, int], Reason] = field(default_factory=dict)
    #: the request each of those was tried with (a spot bid may narrow a request's
    #: models differently from one pass to the next)
    tried: dict[tuple[str, int], Request] = field(default_factory=dict)
    #: the policy's first failure is logged with its traceback, later ones briefly
    policy_error_logged: bool = False
    #: waiting work the policy has already seen arrive (online policies learn the mix
    #: from arrivals, once each, not from every retry)
    observed: set[tuple[str, int]] = field(default_factory=set)


def fingerprint(state: ClusterState) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for arr in (state.cpu_free, state.mem_free, state.gpu_free, state.schedulable, state.cordoned):
        h.update(arr.tobytes())
    h.update(str(state.gpu_free.shape).encode())
    return h.digest()


@dataclass
class PassResult:
    claimed: list[tuple[str, int]]
    conflicts: int = 0
    policy_errors: int = 0
    unplaced: dict[tuple[str, int], Reason] = field(default_factory=dict)
    #: what ``prepare`` gave for each claimed row, in its claim's transaction
    prepared: dict[tuple[str, int], object] = field(default_factory=dict)


#: what a launch needs of a row it claimed, read in the claim's transaction (``launcher.plan``)
Prepare = Callable[[Session, Instance | Job, list[AllocationRow]], object]


def to_request(row: Instance | Job) -> Request:
    pinned = frozenset(row.pin_nodes or ()) if isinstance(row, Job) else frozenset()
    return Request(
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        gpu_count=row.gpu_count,
        gpu_milli=row.gpu_milli,
        gpu_models=frozenset(row.gpu_models or ()),
        priority=PriorityClass(row.priority),
        name=f"{'instance' if isinstance(row, Instance) else 'job'}-{row.id}",
        pin_nodes=pinned,
        ignore_cordon=bool(pinned) and isinstance(row, Job) and bool(row.ignore_cordon),
    )


def waiting_work(session: Session) -> list[Waiting]:
    """The waiting work in scheduling order: highest class first, then oldest; work
    evicted for other waiting work right after it (``behind_beneficiaries``)."""
    work = [
        Waiting(
            kind,
            r.id,
            to_request(r),
            r.num_nodes if isinstance(r, Job) else 1,
            r.created_at,
            r.evicted_for if isinstance(r, Job) else None,
            (r.moved_to[0], int(r.moved_to[1])) if isinstance(r, Job) and r.moved_to else None,
            r,
        )
        for kind, r in workloads.waiting(session)
    ]
    work.sort(key=lambda w: (-w.request.priority.rank, w.created_at, w.kind, w.id))
    return behind_beneficiaries(work)


def behind_beneficiaries(work: list[Waiting]) -> list[Waiting]:
    """``work`` with each item evicted for another waiting item moved right behind it.
    A job moved off its GPU for a waiting request is older than that request, and
    placed first it could take back the very room it left (a migration's or a spot
    reclaim's). Items in a cycle of such evictions keep their place."""
    names = {w.name for w in work}
    behind: dict[str, list[Waiting]] = {}
    for w in work:
        if w.evicted_for in names and w.evicted_for != w.name:
            behind.setdefault(w.evicted_for, []).append(w)
    placed: dict[str, None] = {}
    out: list[Waiting] = []

    def emit(w: Waiting) -> None:
        if w.name not in placed:
            placed[w.name] = None
            out.append(w)
            for later in behind.get(w.name, ()):
                emit(later)

    moved = {later.name for group in behind.values() for later in group}
    for w in work:
        if w.name not in moved:
            emit(w)
    for w in work:  # a cycle: nobody ahead of it was placed
        emit(w)
    return out


def plan_gang(sched: Scheduler, req: Request, num_nodes: int) -> tuple[list[Allocation] | None, Reason | None]:
    """Place ``num_nodes`` copies of ``req`` on distinct nodes, all or nothing, with
    the scheduler's topology-aware gang planner (one IB leaf first, then the fewest
    leaves; multi-GPU members inside one NVLink island when they fit). Binds into
    ``sched.state`` on success; leaves it unchanged otherwise (``gang.bind_gang``)."""
    allocs = gang.bind_gang(sched.state, sched.policy, replace(req, nodes=num_nodes), sched.ranks)
    if allocs is None:
        if req.pin_nodes:
            return None, Reason(PINNED, pinned_detail(sched.state, req))
        if feasible_mask(sched.state, req).any():
            return None, Reason(GANG, f"gang: fewer than {num_nodes} nodes fit")
        return None, Reason(CAPACITY, failure_reason(sched.state, req))
    return allocs, None


def as_planned(state: ClusterState, w: Waiting) -> list[Allocation] | None:
    """A moved share goes where its migration's plan put it (``Waiting.moved_to``), as
    the simulator applies a plan, if that GPU still takes it: bound into ``state``. None
    when there is no plan or it no longer fits: the policy places it."""
    if w.moved_to is None:
        return None
    node, gpu = w.moved_to
    i = state.index.get(node)
    if i is None or not feasible_mask(state, w.request)[i]:
        return None
    req = w.request
    alloc = Allocation(node, (gpu,), req.milli_per_gpu, req.cpu_milli, req.memory_mib)
    try:
        state.bind(alloc)
    except OverAllocation:
        return None
    return [alloc]


def pinned_detail(state: ClusterState, req: Request) -> str:
    """Why none of the nodes ``req`` is pinned to takes it now, node by node:
    ``a100-0: busy (gpu)`` (the free-capacity filter it fails), ``cordoned``, ``down or
    not run by this server``, ``not registered``."""
    member = replace(req, nodes=1)
    parts = []
    for name in sorted(req.pin_nodes):
        i = state.index.get(name)
        if i is None:
            why = "not registered"
        elif state.schedulable[i] or (state.cordoned[i] and req.ignore_cordon):
            one = state.node_mask([name])
            fits = feasible_mask(state, member) & one
            why = "free (the gang needs more nodes)" if fits.any() else f"busy ({_busy_filter(state, member, i)})"
        elif state.cordoned[i]:
            why = "cordoned"
        else:
            why = "down or not run by this server"
        parts.append(f"{name}: {why}")
    return "; ".join(parts)


def _busy_filter(state: ClusterState, req: Request, i: int) -> str:
    """The first free-capacity filter node ``i`` fails for ``req``, as ``failure_reason`` names it."""
    if req.gpu_models and not state.model_mask(req.gpu_models)[i]:
        return "gpu_model"
    if state.cpu_free[i] < req.cpu_milli:
        return "cpu"
    if state.mem_free[i] < req.memory_mib:
        return "memory"
    return "gpu"


def claim(
    db: Database, w: Waiting, allocs: list[Allocation], snap: Snapshot, owner: str, prepare: Prepare | None = None
) -> tuple[bool, object]:
    """Allocate ``allocs`` to the waiting row in one transaction; False if the row
    was taken or changed meanwhile. Raises IntegrityError on a capacity conflict. With
    ``prepare``, also what it gives for the row and its allocations, in that transaction
    (a launch then need not read them again in one of its own)."""
    with db.transaction() as s:
        row = workloads.claim(s, w.kind, w.id, owner)
        if row is None:
            return False, None
        if isinstance(row, Job):
            row.evicted_for = row.moved_to = None
        rows = take(s, row, allocs, snap)
        for a in rows:
            record_event(
                s, "allocation", a.id, None, "bound", f"{w.kind} {w.id} rank {a.node_rank} on {a.gpu_model} gpus {a.gpu_indices}"
            )
        return True, None if prepare is None else prepare(s, row, rows)


def schedule_pass(
    db: Database,
    policy: Policy,
    backends: list[str],
    owner: str,
    work: list[Waiting],
    held: dict[tuple[str, int], Reason] | None = None,
    seed: int = 0,
    memo: PassMemo | None = None,
    fallback: Policy | None = None,
    prepare: Prepare | None = None,
) -> PassResult:
    """Place admitted waiting work (``work``, in ``waiting_work``'s order, with any
    spot-bid narrowing applied) and claim it; ``held`` is what admission held, kept
    as those rows' reasons. If the policy raises, the request is placed by
    ``fallback`` (a simple policy) and the error is logged and counted: a bug in a
    scoring plugin must not stop all placement."""
    held = held or {}
    result = PassResult([], unplaced=dict(held))
    if not work:
        return result
    with db.transaction() as s:
        snap = snapshot(s, backends)
    sched = Scheduler(policy, snap.state, seed=seed)
    backup = Scheduler(fallback, snap.state, seed=seed) if fallback is not None else None
    if memo is not None:
        keys = {(w.kind, w.id) for w in work}
        for w in work:
            if (w.kind, w.id) not in memo.observed:
                sched.observe(w.request)
        memo.observed = keys
    unchanged = memo is not None and memo.fingerprint == fingerprint(snap.state)
    for w in work:
        key = (w.kind, w.id)
        if memo is not None and unchanged and key in memo.unplaced and memo.tried.get(key) == w.request:
            result.unplaced[key] = memo.unplaced[key]
            continue
        allocs, reason = as_planned(snap.state, w), None
        try:
            if allocs is None:
                allocs, reason = plan_gang(sched, w.request, w.num_nodes)
        except Exception:
            if backup is None:
                raise
            msg = "policy %s failed on %s %s; placing it with %s"
            args = (type(policy).__name__, w.kind, w.id, type(fallback).__name__)
            if memo is not None and memo.policy_error_logged:
                log.warning(msg, *args)
            else:
                log.exception(msg, *args)
                if memo is not None:
                    memo.policy_error_logged = True
            result.policy_errors += 1
            allocs, reason = plan_gang(backup, w.request, w.num_nodes)
        if allocs is None:
            result.unplaced[(w.kind, w.id)] = reason or Reason(CAPACITY, "unschedulable")
            continue
        try:
            claimed, prepared = claim(db, w, allocs, snap, owner, prepare)
            if claimed:
                result.claimed.append((w.kind, w.id))
                if prepare is not None:
                    result.prepared[(w.kind, w.id)] = prepared
            else:
                for a in allocs:
                    snap.state.unbind(a)
        except (IntegrityError, OperationalError) as exc:
            # Someone else took these slots since our snapshot: start over next pass.
            log.info("allocation conflict for %s %s: %s", w.kind, w.id, type(exc).__name__)
            result.conflicts += 1
            break
    if memo is not None:
        memo.fingerprint = b"" if result.conflicts else fingerprint(snap.state)
        memo.unplaced = {k: v for k, v in (result.unplaced or {}).items() if k not in held}
        memo.tried = {(w.kind, w.id): w.request for w in work if (w.kind, w.id) in memo.unplaced}
    return result
