"""Job service: submit, list, cancel, logs — database only (logs read files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import Session

from suanli.backends.base import Backend, Handle
from suanli.billing.money import to_micros
from suanli.control import funds, uploads, workload_secrets, workloads
from suanli.control.auth import Principal
from suanli.control.lifecycle import JOB_FINAL, record_event
from suanli.control.listing import Listing, read_listing, read_one
from suanli.control.secrets import Keyring
from suanli.control.sizing import check_bid_floor, check_fits, size
from suanli.control.task import Task
from suanli.db import keyset, stamps
from suanli.db.models import Job
from suanli.db.session import Database
from suanli.errors import Invalid, NotFound
from suanli.scheduler import ClusterState


def _get(s: Session, who: Principal, job_id: int) -> Job:
    row = s.get(Job, job_id)
    if row is None or (not who.sees_all and row.tenant_id != who.tenant_id):
        raise NotFound(f"no job {job_id}")
    return row


def check_code(who: Principal, task: Task, data_dir: Path | None) -> None:
    """A job's code is an upload of its own tenant, never a path on the server: a
    ``workdir`` here would name a server directory (and a missing one used to run the
    job in an empty directory), so it is refused before anything is created."""
    if task.workdir:
        raise Invalid(
            "workdir: the server does not run jobs from its own paths; upload the directory "
            "(POST /v1/uploads with a gzip tar; `suanli launch TASK.yaml` does it) and send its id as `code`"
        )
    if task.code is None:
        return
    if data_dir is None or not uploads.exists(data_dir, who.tenant_id, task.code):
        raise Invalid(f"code: no upload {task.code} for this tenant; upload the directory first (`suanli launch` does it)")


def new_row(s: Session, who: Principal, task: Task, sealed: dict, state: ClusterState | None = None) -> Job:
    """A queued job of ``task`` (sized; not added): ``submit`` and ``pipelines.submit``.
    ``state``: the inventory, built once for many jobs (``sizing.empty_state``)."""
    r = task.resources
    accel = r.accel
    sized = size(
        s,
        accel.model if accel else None,
        accel.count if accel and not r.gpu_milli else 0,
        r.gpu_milli or 0,
        r.cpus,
        r.memory,
        "resources.accelerators",
    )
    check_fits(s, sized, task.num_nodes, "resources", state)
    bid = None if r.max_price is None else to_micros(r.max_price)
    check_bid_floor(s, sized, task.num_nodes, bid, "resources.max_price")
    return Job(
        tenant_id=who.tenant_id,
        user_id=who.user_id,
        name=task.name,
        state="queued",
        spec=task.model_dump(mode="json", exclude={"secrets"}),
        secrets=sealed,
        gpu_models=sized.gpu_models,
        gpu_count=sized.gpu_count,
        gpu_milli=sized.gpu_milli,
        cpu_milli=sized.cpu_milli,
        memory_mib=sized.memory_mib,
        num_nodes=task.num_nodes,
        priority=r.priority,
        max_price_micros=bid,
    )


def submit(db: Database, who: Principal, task: Task, data_dir: Path | None = None, keyring: Keyring | None = None) -> Job:
    """Queue a job. ``data_dir`` is where uploads live; without it a task with ``code`` is
    refused. ``keyring`` seals the task's secrets (into ``secrets``, never ``spec``). A task
    with ``depends_on`` or ``matrix`` goes through ``pipelines.submit``."""
    if task.depends_on or task.matrix:
        raise Invalid("depends_on/matrix: submit it as a pipeline (control.pipelines.submit)")
    check_code(who, task, data_dir)
    if task.secrets and keyring is None:
        raise Invalid("secrets: this server holds no keyring to seal them with")
    sealed = workload_secrets.seal(keyring, who.tenant_id, task.secret_values()) if keyring and task.secrets else {}
    with db.transaction() as s:
        row = new_row(s, who, task, sealed)
        funds.check_start(s, row)  # refused (nothing queued) if its tenant cannot pay
        s.add(row)
        s.flush()
        record_event(s, "job", row.id, None, "queued", "submitted")
        return row


#: what ``listing`` reads (``db.stamps``)
_STAMPED = stamps.every_column(Job, "job")


def listing(s: Session, who: Principal, state: str | None = None, page: keyset.Page | None = None) -> Listing[Job]:
    """``who``'s jobs (an operator's: everyone's) by id, with their waiting reasons, in
    one statement; ``page``: one page of them (``db.keyset``: one row more than asked
    when more follow)."""
    return read_listing(s, Job, _listed(who, state, page))


def detail(s: Session, who: Principal, job_id: int) -> Listing[Job]:
    """One of ``who``'s jobs as ``listing`` reads a page of them, in one statement, with
    its waiting reason; ``NotFound`` as ``get``."""
    q = _STAMPED.where(Job.id == job_id)
    q = q if who.sees_all else q.where(Job.tenant_id == who.tenant_id)
    return read_one(s, Job, q, f"no job {job_id}")


def _listed(who: Principal, state: str | None, page: keyset.Page | None) -> Select[Any]:
    q = _STAMPED
    if not who.sees_all:
        q = q.where(Job.tenant_id == who.tenant_id)
    if state:
        q = q.where(Job.state == state)
    return keyset.select_page(q, [Job.id], page)


def get(db: Database, who: Principal, job_id: int) -> Job:
    with db.sessions() as s:
        return _get(s, who, job_id)


def cancel(db: Database, who: Principal, job_id: int) -> Job:
    """Queued and not being launched: cancelled now. Otherwise the loop stops the
    processes and records ``cancelled``. Finished jobs are left as they are."""
    with db.transaction() as s:
        row = _get(s, who, job_id)
        if row.state in JOB_FINAL:
            return row
        if row.state == "queued" and row.launch_owner is None:
            workloads.end(s, row, "cancelled", "cancelled before it started")
        else:
            row.cancel_requested = True
        return row


def logs(db: Database, backends: dict[str, Backend], who: Principal, job_id: int, tail_bytes: int | None) -> str:
    with db.sessions() as s:
        row = _get(s, who, job_id)
        handles = [Handle.from_json(h) for h in row.handles or []]
    parts = []
    for h in handles:
        b = backends.get(h.backend)
        text = b.logs(h, tail_bytes) if b is not None else ""
        parts.append(text if len(handles) == 1 else f"==> node rank {h.key.rsplit('-', 1)[-1]} <==\n{text}")
    return "".join(parts)
