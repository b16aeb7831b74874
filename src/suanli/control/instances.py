"""Instance service: what the API may do to instances, database only.

Requests change ``desired`` (and the state when no process is involved); the
control loop performs stops on the backend. Every change is a guarded update in
one transaction, so a refused request changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import Session

from suanli.backends.base import Backend, ExecResult, Handle, SupportsExec
from suanli.billing.money import to_micros
from suanli.control import funds, images, secret_names, workload_secrets
from suanli.control.auth import Principal
from suanli.control.autostop import AutostopSettings, tenant_default
from suanli.control.launcher import remove_disk
from suanli.control.lifecycle import record_event, transition
from suanli.control.listing import Listing, read_listing, read_one
from suanli.control.secrets import Keyring
from suanli.control.sizing import check_bid_floor, check_fits, size
from suanli.control.task import check_max_price
from suanli.db import keyset, stamps
from suanli.db.models import Instance
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound


@dataclass(frozen=True)
class InstanceRequest:
    name: str
    gpu_model: str | None
    gpu_count: int
    gpu_milli: int
    cpus: float | None
    memory_gib: float | None
    image: str | None  #: a catalog name; None: the default image
    disk_gib: int
    priority: str
    #: spot bid per GPU-hour, decimal text (spot only)
    max_price: str | None = None
    ports: tuple[int, ...] = ()  #: container ports to publish through the proxy
    #: name -> value, in the instance's environment (its shell, exec, SSH); sealed at rest
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    #: idle auto-stop window, seconds (``control.autostop``); None: the tenant's or platform's default; 0: off
    autostop_s: int | None = None


def _get(s: Session, who: Principal, instance_id: int) -> Instance:
    row = s.get(Instance, instance_id)
    if row is None or row.state == "deleted" or (not who.sees_all and row.tenant_id != who.tenant_id):
        raise NotFound(f"no instance {instance_id}")
    return row


def create(
    db: Database,
    who: Principal,
    req: InstanceRequest,
    keyring: Keyring | None = None,
    autostop: AutostopSettings | None = None,
) -> Instance:
    """``keyring`` seals the request's secrets into the row (a request with secrets and no
    keyring is refused); ``autostop``: the platform's idle auto-stop minimum and default."""
    autostop = autostop or AutostopSettings()
    autostop.check(req.autostop_s)
    if not req.gpu_model and not req.gpu_count and not req.gpu_milli:
        raise Invalid("gpu_count: ask for gpu_count whole GPUs or gpu_milli of one GPU")
    if req.gpu_count > 1 and req.gpu_milli:  # never choose between them silently (count 1: the one GPU shared)
        raise Invalid(
            f"gpu_count: {req.gpu_count} whole GPU(s) and gpu_milli {req.gpu_milli} ({req.gpu_milli / 1000:g} of one GPU) "
            "contradict: send one or the other"
        )
    try:
        bid = check_max_price(req.max_price, req.priority)
    except ValueError as exc:
        raise Invalid(f"max_price: {exc}") from None
    bad = [p for p in req.ports if not 1 <= p <= 65535]
    if bad or len(set(req.ports)) != len(req.ports):
        raise Invalid(f"ports: each a TCP port 1..65535, once ({', '.join(map(str, req.ports))})")
    secret_names.check_names(list(req.secrets))
    if req.secrets and keyring is None:
        raise Invalid("secrets: this server holds no keyring to seal them with")
    sealed = workload_secrets.seal(keyring, who.tenant_id, req.secrets) if keyring and req.secrets else {}
    with db.transaction() as s:
        image = images.resolve(s, req.image)
        count = req.gpu_count or (1 if req.gpu_model and not req.gpu_milli else 0)
        sized = size(s, req.gpu_model, count, req.gpu_milli, req.cpus, req.memory_gib, "gpu_model")
        check_fits(s, sized, 1, "resources")
        check_bid_floor(s, sized, 1, None if bid is None else to_micros(bid), "max_price")
        row = Instance(
            tenant_id=who.tenant_id,
            user_id=who.user_id,
            name=req.name,
            state="pending",
            desired="running",
            gpu_models=sized.gpu_models,
            gpu_count=sized.gpu_count,
            gpu_milli=sized.gpu_milli,
            cpu_milli=sized.cpu_milli,
            memory_mib=sized.memory_mib,
            image=image.name,
            disk_gib=req.disk_gib,
            priority=req.priority,
            max_price_micros=None if bid is None else to_micros(bid),
            ports=sorted(req.ports),
            secrets=sealed,
            autostop_s=autostop.window_for(req.autostop_s, tenant_default(s, who.tenant_id)),
        )
        funds.check_start(s, row)  # refused (nothing created) if its tenant cannot pay
        s.add(row)
        s.flush()
        record_event(s, "instance", row.id, None, "pending", "created")
        return row


#: what ``listing`` reads (``db.stamps``)
_STAMPED = stamps.every_column(Instance, "instance")


def listing(s: Session, who: Principal, include_deleted: bool = False, page: keyset.Page | None = None) -> Listing[Instance]:
    """``who``'s instances (an operator's: everyone's) by id, with their waiting reasons,
    in one statement; ``page``: one page of them (``db.keyset``: one row more than asked
    when more follow)."""
    return read_listing(s, Instance, _listed(who, include_deleted, page))


def detail(s: Session, who: Principal, instance_id: int) -> Listing[Instance]:
    """One of ``who``'s instances as ``listing`` reads a page of them, in one statement,
    with its waiting reason; ``NotFound`` as ``get``."""
    q = _STAMPED.where(Instance.id == instance_id, Instance.state != "deleted")
    q = q if who.sees_all else q.where(Instance.tenant_id == who.tenant_id)
    return read_one(s, Instance, q, f"no instance {instance_id}")


def _listed(who: Principal, include_deleted: bool, page: keyset.Page | None) -> Select[Any]:
    q = _STAMPED
    if not who.sees_all:
        q = q.where(Instance.tenant_id == who.tenant_id)
    if not include_deleted:
        q = q.where(Instance.state != "deleted")
    return keyset.select_page(q, [Instance.id], page)


def get(db: Database, who: Principal, instance_id: int) -> Instance:
    with db.sessions() as s:
        return _get(s, who, instance_id)


def stop(db: Database, who: Principal, instance_id: int) -> Instance:
    with db.transaction() as s:
        row = _get(s, who, instance_id)
        if row.state in ("stopped", "stopping") or (row.state == "pending" and row.desired == "stopped"):
            return row
        if row.state == "running":
            row.desired = "stopped"
            transition(s, row, "stopping", "stop requested")
        elif row.state == "pending" and row.launch_owner is None:
            row.desired = "stopped"
            transition(s, row, "stopped", "stopped before it was placed")
        elif row.state == "pending":
            row.desired = "stopped"  # launching now: the loop stops it once it runs
        else:
            raise Conflict(f"instance {instance_id} is {row.state}; it cannot be stopped", code="invalid_state")
        return row


def start(db: Database, who: Principal, instance_id: int) -> Instance:
    with db.transaction() as s:
        row = _get(s, who, instance_id)
        if row.state in ("pending", "running") and row.desired == "running":
            return row
        if row.state not in ("stopped", "failed", "preempted"):
            raise Conflict(f"instance {instance_id} is {row.state}; start it once it has stopped", code="invalid_state")
        funds.check_start(s, row)
        row.desired = "running"
        row.reason = ""
        transition(s, row, "pending", "start requested")
        return row


def delete(db: Database, who: Principal, instance_id: int, data_dir: Path) -> Instance:
    with db.transaction() as s:
        row = _get(s, who, instance_id)
        row.desired = "deleted"
        if row.state == "running":
            transition(s, row, "stopping", "delete requested")
            return row
        if row.state in ("stopping",) or (row.state == "pending" and row.launch_owner is not None):
            return row  # the loop finishes the stop, then deletes
        transition(s, row, "deleted", "deleted by request")
    remove_disk(data_dir, instance_id)
    return row


def handle(db: Database, who: Principal, instance_id: int) -> Handle | None:
    with db.sessions() as s:
        row = _get(s, who, instance_id)
        return Handle.from_json(row.handles[0]) if row.handles else None


def exec_(
    db: Database, backends: dict[str, Backend], who: Principal, instance_id: int, command: str, timeout_s: float
) -> ExecResult:
    """Run ``command`` in the running instance's environment (outside any transaction)."""
    with db.sessions() as s:
        row = _get(s, who, instance_id)
        if row.state != "running" or not row.handles:
            raise Conflict(f"instance {instance_id} is {row.state}; exec needs a running instance", code="invalid_state")
        h = Handle.from_json(row.handles[0])
    backend = backends.get(h.backend)
    if not isinstance(backend, SupportsExec):
        raise Conflict(f"the {h.backend} backend cannot exec into instances", code="unsupported")
    return backend.exec(h, command, timeout_s)


def logs(db: Database, backends: dict[str, Backend], who: Principal, instance_id: int, tail_bytes: int | None) -> str:
    with db.sessions() as s:
        row = _get(s, who, instance_id)
        key = f"instance-{row.id}"
        raw = row.handles[0] if row.handles else None
    for b in backends.values():  # a stopped instance keeps its log on the backend
        h = Handle.from_json(raw) if raw else Handle(b.name, key, {})
        if h.backend == b.name:
            return b.logs(h, tail_bytes)
    return ""
