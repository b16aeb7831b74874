"""State machines of instances and jobs, and the event log that records them.

Instance: ``pending -> running -> stopping -> stopped -> pending`` (start again),
``deleted`` from pending/stopped/stopping/failed, ``failed`` from pending/running/
stopping. Job: ``queued -> running -> succeeded | failed | cancelled``, and
``queued -> cancelled | failed``. Later issues add ``preempted`` (instances) and
``requeued`` (jobs); they are listed here already so rows can carry them.

Every change goes through ``transition``, which refuses illegal moves and appends
an ``Event`` row in the same transaction as the change itself.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from suanli.db.clock import utcnow
from suanli.db.models import Event, Instance, Job
from suanli.errors import Conflict

INSTANCE_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"running", "stopped", "deleted", "failed"}),
    "running": frozenset({"stopping", "failed", "preempted"}),
    "stopping": frozenset({"stopped", "deleted", "failed"}),
    "stopped": frozenset({"pending", "deleted"}),
    "failed": frozenset({"pending", "deleted"}),
    "preempted": frozenset({"pending", "deleted"}),
    "deleted": frozenset(),
}

JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"succeeded", "failed", "cancelled", "requeued"}),
    "requeued": frozenset({"queued", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

INSTANCE_ACTIVE = ("pending", "running", "stopping")
JOB_ACTIVE = ("queued", "running")
JOB_FINAL = ("succeeded", "failed", "cancelled")


def kind_of(row: Instance | Job) -> str:
    return "instance" if isinstance(row, Instance) else "job"


def record_event(session: Session, kind: str, object_id: int, from_state: str | None, to_state: str, message: str = "") -> None:
    session.add(Event(kind=kind, object_id=object_id, from_state=from_state, to_state=to_state, message=message[:2000]))


def transition(session: Session, row: Instance | Job, to: str, message: str = "") -> None:
    """Move ``row`` to state ``to`` and log it; raises ``Conflict`` if illegal."""
    table = INSTANCE_TRANSITIONS if isinstance(row, Instance) else JOB_TRANSITIONS
    if to not in table.get(row.state, frozenset()):
        raise Conflict(f"{kind_of(row)} {row.id} is {row.state}; it cannot become {to}", code="invalid_state")
    record_event(session, kind_of(row), row.id, row.state, to, message)
    row.state = to
    row.updated_at = utcnow()
    if message and to in ("failed", "cancelled", "stopped", "deleted"):
        row.reason = message
