"""Bring what Slurm decided back into the database: node health and GPU indices.

Suanli's scheduler picks a node and a GPU count; inside the node Slurm picks the GPU
indices (sbatch cannot ask for particular ones). So once a job runs, the allocation's
``gpu_indices`` are rewritten to the indices Slurm reports (``SlurmJob.gpu_indices``),
which are the job's ``CUDA_VISIBLE_DEVICES``: billing, listings and the next placement
then see the GPUs that are really in use.

Node health comes from ``sinfo``: a node Slurm reports DOWN (``down``, ``fail``,
``NOT_RESPONDING``) is marked ``down`` here, with an event naming the state and flags
that made it so (``slurm: reports node1 DOWN (NOT_RESPONDING)`` for a slurmd that stopped
answering), which is what triggers failover (``control.reclaim``); when Slurm reports it
up again, a node that *this module* marked down becomes ``ready`` (one an operator
marked down stays down).

Both follow the control plane's rule: read (transaction), ask Slurm (none), write
(transaction).
"""

from __future__ import annotations

import logging

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from suanli.backends.base import Handle
from suanli.backends.slurm.backend import SlurmBackend
from suanli.backends.slurm.model import NodeHealth
from suanli.control.nodes import last_event_message, mark
from suanli.db.models import Allocation, Event, Gpu, Instance, Job, Node
from suanli.db.session import Database

log = logging.getLogger(__name__)

#: Messages of node events written here start with this, so a later "up" only undoes our own "down".
SOURCE = "slurm:"


def sync_node_health(db: Database, backend: SlurmBackend) -> list[str]:
    """Mirror Slurm's node health onto Slurm-backed nodes; returns the nodes changed."""
    with db.transaction() as s:
        rows = {n.name: (n.id, n.state) for n in s.scalars(select(Node).where(Node.backend == backend.name))}
    if not rows:
        return []
    slurm_nodes = backend.nodes(fresh=True)
    health = {name: n.health for name, n in slurm_nodes.items()}
    reasons = {name: n.down_because for name, n in slurm_nodes.items()}
    changed = []
    with db.transaction() as s:
        for name, (node_id, state) in rows.items():
            h = health.get(name)
            if h is None:
                continue
            if h == NodeHealth.DOWN and state != "down":
                mark(s, node_id, state, "down", f"{SOURCE} reports {name} DOWN ({reasons.get(name) or 'no reason'})")
                changed.append(name)
            elif h == NodeHealth.UP and state == "down" and last_event_message(s, node_id).startswith(SOURCE):
                mark(s, node_id, state, "ready", f"{SOURCE} reports {name} up again")
                changed.append(name)
    return changed


def sync_placements(db: Database, backend: SlurmBackend) -> int:
    """Rewrite allocations to the GPU indices Slurm gave each running job; returns how
    many changed. All moves of a pass go in one transaction (every old slot released
    before any new one is taken), so two jobs that Slurm swapped never trip the
    capacity CHECKs halfway."""
    pending: list[tuple[str, int, int, Handle]] = []
    with db.transaction() as s:
        for model in (Job, Instance):
            states = ("running",) if model is Job else ("running", "stopping")
            for row in s.scalars(select(model).where(model.state.in_(states), model.handles.is_not(None))):
                for raw in row.handles or []:
                    h = Handle.from_json(raw)
                    if h.backend == backend.name and not h.data.get("placed"):
                        rank = int(h.key.rsplit("-", 1)[-1]) if model is Job else 0
                        pending.append(("job" if model is Job else "instance", row.id, rank, h))
    if not pending:
        return 0
    seen = {}
    for kind, wid, rank, h in pending:
        where = backend.placement(h)  # cached squeue: one call for the whole pass
        if where is not None:
            seen[(kind, wid, rank)] = (h.key, where)
    if not seen:
        return 0
    moved = 0
    try:
        with db.transaction() as s:
            fixes: list[tuple[Allocation, list[int]]] = []
            for (kind, wid, rank), (key, (_node, indices)) in seen.items():
                col = Allocation.job_id if kind == "job" else Allocation.instance_id
                alloc = s.scalar(
                    select(Allocation).where(col == wid, Allocation.node_rank == rank, Allocation.ended_at.is_(None))
                )
                if alloc is None:
                    continue
                if indices and sorted(int(i) for i in alloc.gpu_indices) != list(indices):
                    fixes.append((alloc, list(indices)))
            for alloc, _ in fixes:
                _move(s, alloc, alloc.gpu_indices, -1)
            for alloc, new in fixes:
                _move(s, alloc, new, +1)
                s.add(
                    Event(
                        kind="allocation",
                        object_id=alloc.id,
                        from_state="bound",
                        to_state="bound",
                        message=f"Slurm placed it on GPUs {new} (planned {list(alloc.gpu_indices)})",
                    )
                )
                alloc.gpu_indices = new
                moved += 1
            for (kind, wid, _rank), (key, _where) in seen.items():
                row = s.get(Job if kind == "job" else Instance, wid)
                if row is not None and row.handles:
                    row.handles = [{**h, "data": {**h["data"], "placed": True}} if h["key"] == key else h for h in row.handles]
    except IntegrityError as exc:  # the database disagrees with Slurm: leave it to the next pass
        log.error("could not record Slurm's GPU placement: %s", exc.orig)
        return 0
    return moved


def _move(s, alloc: Allocation, indices: list[int], sign: int) -> None:  # type: ignore[no-untyped-def]
    for g in sorted(int(i) for i in indices):
        s.execute(
            update(Gpu)
            .where(Gpu.node_id == alloc.node_id, Gpu.index == g)
            .values(used_milli=Gpu.used_milli + sign * alloc.milli_per_gpu)
            .execution_options(synchronize_session=False)
        )
