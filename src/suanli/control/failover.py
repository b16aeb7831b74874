"""Failover: running work holding an allocation on a ``down`` node is stopped
there and requeued (``evict``): a job with ``checkpoint_dir`` goes back to
``queued`` with ``SUANLI_RESUME_FROM`` set, so the scheduling phase places it on a
healthy node and it resumes from its latest checkpoint; a job without one fails
(nothing to resume from, as in the simulator); an instance fails.
"""

from __future__ import annotations

from sqlalchemy import select

from suanli.control import workloads
from suanli.control.evict import evict
from suanli.control.plane import Plane
from suanli.db.models import Allocation, Node


def failover(plane: Plane) -> list[tuple[str, int]]:
    """Requeue (or fail) running work that holds an allocation on a down node."""
    with plane.db.transaction() as s:
        down = {n.id: n.name for n in s.scalars(select(Node).where(Node.state == "down"))}
        if not down:
            return []
        hit: dict[tuple[str, int], str] = {}
        for a in s.scalars(select(Allocation).where(Allocation.ended_at.is_(None), Allocation.node_id.in_(down))):
            hit.setdefault(workloads.owner_of(a), down[a.node_id])
    done = []
    for (kind, wid), node in sorted(hit.items()):
        if evict(plane, kind, wid, "failover", f"node {node} is down"):
            plane.stats.failed_over += 1
            done.append((kind, wid))
    return done
