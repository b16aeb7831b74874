"""Capacity in the database: build the scheduler's view, take and give back slots.

``take`` is the only code that creates allocations. It runs inside the caller's
transaction and changes the usage counters with atomic ``x = x + n`` updates in a
fixed order (node ids, then GPU ids, so two writers never deadlock). The CHECK
constraints on those counters make an over-allocation fail at the database, and
the caller's transaction then rolls back whole: allocation rows, counters, state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.orm import Session

from suanli.control.lifecycle import record_event
from suanli.db.clock import utcnow
from suanli.db.models import Allocation, Gpu, Instance, Job, Node
from suanli.scheduler import Allocation as SchedAllocation
from suanli.scheduler import ClusterState
from suanli.scheduler import Node as SchedNode


@dataclass
class Snapshot:
    """The scheduler's view of the cluster plus the maps back to database ids."""

    state: ClusterState
    node_ids: dict[str, int]
    node_backend: dict[str, str]
    node_model: dict[str, str]


def to_sched_node(row: Node) -> SchedNode:
    islands = tuple(tuple(int(i) for i in group) for group in (row.nvlink_islands or []))
    return SchedNode(
        name=row.name,
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        nvlink_islands=islands,
        ib_leaf=row.ib_leaf,
        zone=row.zone,
    )


#: what the scheduler's view reads of an allocation (``to_sched_allocation``)
ALLOCATION_COLUMNS = (
    Allocation.node_id,
    Allocation.gpu_indices,
    Allocation.milli_per_gpu,
    Allocation.cpu_milli,
    Allocation.memory_mib,
)


def to_sched_allocation(row: Allocation | Row[Any], node_name: str) -> SchedAllocation:
    """An allocation row, or a row of ``ALLOCATION_COLUMNS``, in the scheduler's terms."""
    return SchedAllocation(node_name, tuple(row.gpu_indices), row.milli_per_gpu, row.cpu_milli, row.memory_mib)


def snapshot(session: Session, backends: Iterable[str]) -> Snapshot:
    """Nodes and active allocations as a ``ClusterState``. Nodes that are not
    ready, or whose backend this server does not run, keep their allocations
    but get no new work (cordoned ones: none but work pinned there that ignores
    the cordon)."""
    nodes = list(session.scalars(select(Node).order_by(Node.id)))
    state = ClusterState([to_sched_node(n) for n in nodes])
    names = {n.id: n.name for n in nodes}
    usable = set(backends)
    for n in nodes:
        if n.state != "ready" or n.backend not in usable:
            # a cordoned node this server runs still takes work pinned to it that ignores
            # the cordon (its re-verification: ``Request.ignore_cordon``)
            state.set_schedulable(n.name, False, cordoned=n.state == "cordoned" and n.backend in usable)
    # columns, not ORM rows: a large cluster holds thousands of allocations, and loading
    # them as entities was most of a snapshot's time (bench/migration_live_cost.py)
    rows = session.execute(select(*ALLOCATION_COLUMNS).where(Allocation.ended_at.is_(None)))
    state.bind_all([to_sched_allocation(a, names[a.node_id]) for a in rows])
    return Snapshot(
        state,
        {n.name: n.id for n in nodes},
        {n.name: n.backend for n in nodes},
        {n.name: n.gpu_model for n in nodes},
    )


def take(session: Session, owner: Instance | Job, allocs: Sequence[SchedAllocation], snap: Snapshot) -> list[Allocation]:
    """Write ``allocs`` (one per node rank) for ``owner``; the database refuses
    (IntegrityError) if any slot is no longer free."""
    now = utcnow()
    rows = []
    for rank, a in enumerate(allocs):
        row = Allocation(
            tenant_id=owner.tenant_id,
            job_id=owner.id if isinstance(owner, Job) else None,
            instance_id=owner.id if isinstance(owner, Instance) else None,
            node_id=snap.node_ids[a.node],
            node_rank=rank,
            gpu_model=snap.node_model[a.node],
            gpu_indices=list(a.gpu_indices),
            milli_per_gpu=a.milli_per_gpu,
            cpu_milli=a.cpu_milli,
            memory_mib=a.memory_mib,
            priority=owner.priority,
            max_price_micros=owner.max_price_micros,  # the bid the rater caps this interval at
            started_at=now,
        )
        rows.append(row)
    _apply(session, rows, +1)
    session.add_all(rows)
    session.flush()
    return rows


def give_back(session: Session, owner: Instance | Job, ended_at: datetime | None = None) -> list[Allocation]:
    """End every active allocation of ``owner`` and free its counters (idempotent).
    ``ended_at``: when the work really ended (a backend's report, after a restart),
    else now; an allocation never ends before its start or in the future."""
    col = Allocation.job_id if isinstance(owner, Job) else Allocation.instance_id
    rows = list(session.scalars(select(Allocation).where(col == owner.id, Allocation.ended_at.is_(None))))
    if rows:
        _apply(session, rows, -1)
        now = utcnow()
        for r in rows:
            r.ended_at = now if ended_at is None else max(r.started_at, min(ended_at, now))
            record_event(
                session,
                "allocation",
                r.id,
                "bound",
                "released",
                f"{'job' if r.job_id else 'instance'} {r.job_id or r.instance_id} rank {r.node_rank}",
            )
        session.flush()
    return rows


def _apply(session: Session, rows: Sequence[Allocation], sign: int) -> None:
    per_node: dict[int, tuple[int, int]] = {}
    per_gpu: dict[tuple[int, int], int] = {}
    for r in rows:
        cpu, mem = per_node.get(r.node_id, (0, 0))
        per_node[r.node_id] = (cpu + r.cpu_milli, mem + r.memory_mib)
        for g in r.gpu_indices:
            per_gpu[(r.node_id, int(g))] = per_gpu.get((r.node_id, int(g)), 0) + r.milli_per_gpu
    for node_id in sorted(per_node):
        cpu, mem = per_node[node_id]
        session.execute(
            update(Node)
            .where(Node.id == node_id)
            .values(cpu_used=Node.cpu_used + sign * cpu, mem_used=Node.mem_used + sign * mem)
            .execution_options(synchronize_session=False)
        )
    for node_id, index in sorted(per_gpu):
        result = session.execute(
            update(Gpu)
            .where(Gpu.node_id == node_id, Gpu.index == index)
            .values(used_milli=Gpu.used_milli + sign * per_gpu[(node_id, index)])
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise LookupError(f"no GPU {index} on node id {node_id}")


def active_allocations(session: Session, owner: Instance | Job) -> list[Allocation]:
    col = Allocation.job_id if isinstance(owner, Job) else Allocation.instance_id
    return list(
        session.scalars(select(Allocation).where(col == owner.id, Allocation.ended_at.is_(None)).order_by(Allocation.node_rank))
    )
