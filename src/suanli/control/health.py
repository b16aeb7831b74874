"""Bring what backends report back into the database: node health and GPU placements.

Backends that watch their own nodes (``ReportsNodeHealth``, e.g. Slurm's ``sinfo``) say
which are down: such a node is marked ``down`` here with an event naming the backend and
its reason (``slurm: reports node1 DOWN (NOT_RESPONDING)``), which is what triggers
failover (``control.reclaim``); when the backend reports it up again, a node that *this
module* marked down becomes ``ready`` (one an operator marked down stays down). Nodes of
the other backends are watched by heartbeats (``control.heartbeat``).

Backends that choose GPU indices themselves (``ReportsPlacements``: inside a node Slurm
picks them, sbatch cannot ask for particular ones) say where each running task really is;
the allocation's ``gpu_indices`` are rewritten to that (the task's
``CUDA_VISIBLE_DEVICES``), so billing, listings and the next placement see the GPUs that
are really in use.

Which backend is which is never asked: capabilities are declared (``backends.base``). Both
passes follow the control plane's rule: read (transaction), ask the backends (none), write
(transaction). A backend that cannot answer (``BackendError``) is skipped this pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from suanli.backends.base import (
    Backend,
    BackendError,
    Handle,
    NodeHealth,
    NodeReport,
    Placement,
    ReportsNodeHealth,
    ReportsPlacements,
)
from suanli.control import workloads
from suanli.control.lifecycle import record_event
from suanli.control.nodes import last_event_message, mark
from suanli.db.models import Allocation, Gpu, Node
from suanli.db.session import Database

log = logging.getLogger(__name__)

Backends = Mapping[str, Backend] | Iterable[Backend]


def _listed(backends: Backends) -> list[Backend]:
    return list(backends.values() if isinstance(backends, Mapping) else backends)


def source(backend: str) -> str:
    """How this module's node events start (``slurm:``), so a later "up" only undoes its own "down"."""
    return f"{backend}:"


def sync_node_health(db: Database, backends: Backends) -> list[str]:
    """Mirror each reporting backend's node health onto its nodes; returns the nodes changed."""
    changed: list[str] = []
    for b in _listed(backends):
        if isinstance(b, ReportsNodeHealth):
            changed += _sync_nodes(db, b.name, b.node_health)
    return changed


def _sync_nodes(db: Database, backend: str, ask: Callable[[], list[NodeReport]]) -> list[str]:
    with db.transaction() as s:
        rows = {n.name: (n.id, n.state) for n in s.scalars(select(Node).where(Node.backend == backend))}
    if not rows:
        return []  # no node of this backend registered: nothing to ask
    try:
        reports = {r.name: r for r in ask()}
    except BackendError as exc:
        log.warning("%s cannot report node health this pass: %s", backend, exc)
        return []
    src = source(backend)
    changed = []
    with db.transaction() as s:
        for name, (node_id, state) in rows.items():
            r = reports.get(name)
            if r is None:
                continue
            if r.health == NodeHealth.DOWN and state != "down":
                mark(s, node_id, state, "down", f"{src} reports {name} DOWN ({r.reason or 'no reason'})")
                changed.append(name)
            elif r.health == NodeHealth.UP and state == "down" and last_event_message(s, node_id).startswith(src):
                mark(s, node_id, state, "ready", f"{src} reports {name} up again")
                changed.append(name)
    return changed


def sync_placements(db: Database, backends: Backends) -> int:
    """Rewrite allocations to the GPU indices each reporting backend gave its running
    tasks; returns how many changed. A task is asked about until it has been seen running
    once (``placed`` in its handle). All moves of a pass go in one transaction (every old
    slot released before any new one is taken), so two tasks the backend swapped never
    trip the capacity CHECKs halfway."""
    reporting: dict[str, Callable[[Sequence[Handle]], list[Placement]]] = {
        b.name: b.placements for b in _listed(backends) if isinstance(b, ReportsPlacements)
    }
    if not reporting:
        return 0
    pending: dict[str, list[tuple[str, int, int, Handle]]] = {}
    with db.transaction() as s:
        for kind, row in workloads.with_tasks(s):
            for raw in row.handles or []:
                h = Handle.from_json(raw)
                if h.backend in reporting and not h.data.get("placed"):
                    rank = int(h.key.rsplit("-", 1)[-1]) if kind == "job" else 0
                    pending.setdefault(h.backend, []).append((kind, row.id, rank, h))
    seen: dict[tuple[str, int, int], tuple[str, str, tuple[int, ...]]] = {}
    for name, tasks in pending.items():
        try:
            where = {p.key: p for p in reporting[name]([h for *_, h in tasks])}
        except BackendError as exc:
            log.warning("%s cannot report placements this pass: %s", name, exc)
            continue
        for kind, wid, rank, h in tasks:
            if h.key in where:
                seen[(kind, wid, rank)] = (h.key, name, where[h.key].gpu_indices)
    if not seen:
        return 0
    try:
        return _apply(db, seen)
    except IntegrityError as exc:  # the database disagrees with the backend: leave it to the next pass
        log.error("could not record the backends' GPU placement: %s", exc.orig)
        return 0


def _apply(db: Database, seen: dict[tuple[str, int, int], tuple[str, str, tuple[int, ...]]]) -> int:
    moved = 0
    with db.transaction() as s:
        fixes: list[tuple[Allocation, list[int], str]] = []
        for (kind, wid, rank), (_key, backend, indices) in seen.items():
            col = Allocation.job_id if kind == "job" else Allocation.instance_id
            alloc = s.scalar(select(Allocation).where(col == wid, Allocation.node_rank == rank, Allocation.ended_at.is_(None)))
            if alloc is None:
                continue
            if indices and sorted(int(i) for i in alloc.gpu_indices) != sorted(indices):
                fixes.append((alloc, sorted(indices), backend))
        for alloc, _, _ in fixes:
            _move(s, alloc, alloc.gpu_indices, -1)
        for alloc, new, backend in fixes:
            _move(s, alloc, new, +1)
            record_event(
                s,
                "allocation",
                alloc.id,
                "bound",
                "bound",
                f"{backend[:1].upper() + backend[1:]} placed it on GPUs {new} (planned {list(alloc.gpu_indices)})",
            )
            alloc.gpu_indices = new
            moved += 1
        for (kind, wid, _rank), (key, _backend, _indices) in seen.items():
            row = workloads.get(s, kind, wid)
            if row is not None and row.handles:
                row.handles = [{**h, "data": {**h["data"], "placed": True}} if h["key"] == key else h for h in row.handles]
    return moved


def _move(s, alloc: Allocation, indices: list[int], sign: int) -> None:
    for g in sorted(int(i) for i in indices):
        s.execute(
            update(Gpu)
            .where(Gpu.node_id == alloc.node_id, Gpu.index == g)
            .values(used_milli=Gpu.used_milli + sign * alloc.milli_per_gpu)
            .execution_options(synchronize_session=False)
        )
