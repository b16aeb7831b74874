"""Node liveness from heartbeats: a node whose agent stops reporting is marked down.

Slurm watches its own nodes (``health``); nodes of other backends prove they are
alive by calling ``POST /v1/nodes/{name}/heartbeat`` (``suanli nodes heartbeat NAME``
runs that loop on the node). A node that has never sent a heartbeat is not watched, so
the embedded single-host default keeps working without an agent; once a node has
reported, silence longer than the timeout marks it ``down``, which is what triggers
failover (``control.reclaim``). The next heartbeat makes it ``ready`` again, but only
if it was this module that marked it down: an operator's ``down`` stays down.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from suanli.control.auth import Principal
from suanli.control.nodes import last_event_message, mark
from suanli.db.clock import utcnow
from suanli.db.models import Node
from suanli.db.session import Database
from suanli.errors import NotFound

#: Messages of node events written here start with this.
SOURCE = "heartbeat:"

DEFAULT_TIMEOUT_S = 15.0


def beat(db: Database, who: Principal, name: str, now: datetime | None = None) -> Node:
    """Record that ``name`` is alive; revive it if a lost heartbeat had marked it down."""
    who.require("admin", "operator")
    now = now or utcnow()
    with db.transaction() as s:
        node = s.scalar(select(Node).where(Node.name == name))
        if node is None:
            raise NotFound(f"no node {name!r}")
        if node.state == "down" and last_event_message(s, node.id).startswith(SOURCE):
            mark(s, node.id, "down", "ready", f"{SOURCE} {name} reports again")
            s.refresh(node)
        node.heartbeat_at = now
        return node


def expire(db: Database, timeout_s: float, now: datetime | None = None) -> list[str]:
    """Mark down every watched node silent for longer than ``timeout_s``; returns them."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=timeout_s)
    lost = []
    with db.transaction() as s:
        for node in list(
            s.scalars(select(Node).where(Node.heartbeat_at.is_not(None), Node.heartbeat_at < cutoff, Node.state != "down"))
        ):
            assert node.heartbeat_at is not None  # the query's condition
            silent = (now - node.heartbeat_at).total_seconds()
            last = node.heartbeat_at.isoformat(timespec="seconds")
            if mark(s, node.id, node.state, "down", f"{SOURCE} none from {node.name} for {silent:.1f}s (last at {last})"):
                lost.append(node.name)
    return lost
