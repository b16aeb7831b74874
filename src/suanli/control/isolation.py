"""Who may run on a host without isolation.

Where no container engine answers, the local backend runs workloads as host processes:
they can read the server's files and each other's. The operator may accept that for their
own tenant (a lab's single team); strangers are refused unless the server was started with
``--allow-process-runtime``, so the platform is never offered to them unsafely by accident.
"""

from __future__ import annotations

from sqlalchemy import select

from suanli.backends.base import Backend
from suanli.control.auth import Principal
from suanli.db.models import User
from suanli.db.session import Database
from suanli.errors import Forbidden


def operator_tenant(db: Database) -> int | None:
    """The tenant of the first admin (the one ``bootstrap_admin`` created)."""
    with db.sessions() as s:
        return s.scalar(select(User.tenant_id).where(User.role == "admin").order_by(User.id).limit(1))


def require_isolation(db: Database, backends: dict[str, Backend], who: Principal, allow_process: bool) -> None:
    bare = [name for name, b in backends.items() if getattr(b, "runtime", "container") != "container"]
    if allow_process or not bare or who.sees_all:
        return
    if who.tenant_id == operator_tenant(db):
        return
    raise Forbidden(
        f"this server runs workloads as host processes with no isolation ({', '.join(bare)}: no container engine); only the "
        "operator's own tenant may use it. The operator can install Podman, or start the server with "
        "--allow-process-runtime to accept the risk",
        code="no_isolation",
    )
