"""Explicit converters from database rows and domain values to response schemas."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select

from suanli.api import schemas
from suanli.api.context import ServerContext
from suanli.billing import workload_cost
from suanli.billing.money import as_text, price_text
from suanli.billing.offers import Offer
from suanli.billing.workload_cost import WorkloadCost
from suanli.control import metrics as usage_metrics
from suanli.control import workload_secrets
from suanli.control.nodes import GpuModelSummary
from suanli.control.waiting import SCHEDULING, Reason
from suanli.db.models import Event, Gpu, Image, Instance, Job, Node, WorkloadMetric
from suanli.db.session import Database


def _bid(micros: int | None) -> str | None:
    return None if micros is None else price_text(micros)


def _units(micros: int) -> float:
    """Micro-units as a number of currency units (exact to the micro-unit as text)."""
    return float(as_text(micros))


def cost_out(c: WorkloadCost | None) -> schemas.CostOut | None:
    if c is None:
        return None
    return schemas.CostOut(
        currency=c.currency,
        so_far=_units(c.so_far),
        so_far_micros=c.so_far,
        rated=_units(c.rated),
        accruing=_units(c.accruing),
        per_hour=_units(c.per_hour),
        per_hour_micros=c.per_hour,
        gpu_per_hour=_units(c.gpu_per_hour),
        storage_per_hour=_units(c.storage_per_hour),
    )


def holdings_and_costs(
    db: Database, rows: list[Instance] | list[Job]
) -> tuple[dict[int, list[schemas.AllocationOut]], dict[int, schemas.CostOut | None]]:
    """What many rows (one kind) hold now and their cost so far and rate now, keyed by
    row id, in a few queries (``workload_cost.figures_of_rows``: one read of their
    allocations serves both)."""
    if not rows:
        return {}, {}
    kind: workload_cost.Kind = "job" if isinstance(rows[0], Job) else "instance"
    found = workload_cost.figures_of_rows(db, kind, rows)
    held = {
        wid: [
            schemas.AllocationOut(
                node=a.node_name or "?",
                node_rank=a.node_rank,
                gpu_model=a.gpu_model,
                gpu_indices=[int(i) for i in a.gpu_indices],
                milli_per_gpu=a.milli_per_gpu,
            )
            for a in allocs
        ]
        for wid, allocs in found.held.items()
    }
    return held, {r.id: cost_out(found.costs.get(r.id)) for r in rows}


def creation_costs(db: Database, rows: list[Instance] | list[Job]) -> dict[int, schemas.CostOut | None]:
    """What new rows (one kind) cost as at their creation, from the price book alone
    (``workload_cost.at_creation``), keyed by row id."""
    if not rows:
        return {}
    kind: workload_cost.Kind = "job" if isinstance(rows[0], Job) else "instance"
    found = workload_cost.at_creation(db, kind, rows)
    return {r.id: cost_out(found.get(r.id)) for r in rows}


def notice_text(row: Instance | Job) -> str | None:
    if row.notice_deadline is None or row.state != "running":
        return None
    when = datetime.fromtimestamp(row.notice_deadline, tz=UTC).isoformat(timespec="seconds")
    return f"{row.notice_why or f'spot reclaim for {row.notice_for}'}; takes effect at {when}"


def history_out(db: Database, kind: str, wid: int, since: float | None) -> list[schemas.MetricsOut]:
    """A workload's samples from ``since`` (default: the last hour), oldest first."""
    start = time.time() - 3600 if since is None else since
    return [metric_out(m) for m in usage_metrics.history(db, kind, wid, start)]


def metric_out(m: WorkloadMetric | None) -> schemas.MetricsOut:
    if m is None:
        return schemas.MetricsOut()
    return schemas.MetricsOut(
        ts=m.ts,
        resolution_s=m.resolution_s,
        cpu_percent=m.cpu_percent,
        memory_mib=m.memory_mib,
        gpu_util_percent=m.gpu_util_percent,
        gpu_memory_mib=m.gpu_memory_mib,
        power_w=m.power_w,
        sessions=m.sessions,
        gpu_note=m.gpu_note,
    )


def metrics_for(db: Database, rows: list[Instance] | list[Job]) -> dict[int, schemas.MetricsOut]:
    """The latest sample of many rows (one kind), keyed by row id; running rows only
    (a stopped one's last sample is history, not its state now)."""
    if not rows:
        return {}
    kind = "job" if isinstance(rows[0], Job) else "instance"
    found = usage_metrics.latest(db, [(kind, r.id) for r in rows if r.state == "running"])
    return {r.id: metric_out(found.get((kind, r.id))) for r in rows}


@dataclass(frozen=True)
class Access:
    """How a renter reaches an instance: what runs it, SSH, published ports."""

    runtime: str
    ssh: str | None = None
    ports: dict[str, str] = field(default_factory=dict)
    gpu_access: str | None = None


def access_for(ctx: ServerContext, rows: list[Instance], base_url: str) -> dict[int, Access]:
    """``ssh`` is offered only while the instance runs in a container whose image has sshd;
    ports are URLs of the server's proxy, one host name per port (its own origin), never
    the host ports behind them."""
    local = ctx.backends.get("local")
    current = getattr(local, "runtime", "process")
    data = {r.id: (r.handles[0].get("data") or {}) if r.handles and r.state == "running" else {} for r in rows}
    published = {i: d.get("ports") or {} for i, d in data.items()}
    could_ssh = {r.id for r in rows if data[r.id].get("runtime") == "container" and "22" in published[r.id]}
    contents: dict[str, dict] = {}
    if could_ssh:  # which images have sshd matters only to these
        wanted = sorted({r.image for r in rows if r.id in could_ssh})
        with ctx.db.reads() as s:
            contents = {i.name: i.contents or {} for i in s.scalars(select(Image).where(Image.name.in_(wanted)))}
    out: dict[int, Access] = {}
    for r in rows:
        ssh = None
        if r.id in could_ssh and contents.get(r.image, {}).get("sshd"):
            ssh = f"ssh -p {published[r.id]['22']} root@{ctx.ssh_host}"
        ports = {str(p): ctx.port_url(base_url, r.id, int(p)) for p in r.ports or []}
        out[r.id] = Access(r.runtime or current, ssh, ports, data[r.id].get("gpu_access"))
    return out


def _waiting(waiting: tuple[Reason, datetime | None] | None) -> schemas.WaitingOut:
    """A waiting row's reason; one no pass has judged yet waits for ``scheduling``."""
    reason, since = waiting or (Reason(SCHEDULING, "not yet seen by a scheduling pass"), None)
    return schemas.WaitingOut(code=reason.code, detail=reason.detail, since=since)


def instance_out(
    row: Instance,
    allocs: list[schemas.AllocationOut],
    waiting: tuple[Reason, datetime | None] | None = None,
    access: Access | None = None,
    cost: schemas.CostOut | None = None,
    metrics: schemas.MetricsOut | None = None,
) -> schemas.InstanceOut:
    access = access or Access(row.runtime or "")
    return schemas.InstanceOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        state=row.state,
        desired=row.desired,
        gpu_model=(row.gpu_models or [None])[0],
        gpu_count=row.gpu_count,
        gpu_milli=row.gpu_milli,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        image=row.image,
        disk_gib=row.disk_gib,
        priority=row.priority,
        max_price=_bid(row.max_price_micros),
        reason=(waiting[0].text() if row.state == "pending" and waiting else row.reason),
        waiting=_waiting(waiting) if row.state == "pending" and row.launch_owner is None else None,
        allocations=allocs,
        created_at=row.created_at,
        updated_at=row.updated_at,
        runtime=access.runtime,
        ssh=access.ssh,
        ports=access.ports,
        gpu_access=access.gpu_access,
        cost=cost,
        cost_so_far=cost.so_far if cost is not None else None,
        metrics=metrics or schemas.MetricsOut(),
        autostop_s=row.autostop_s,
        notice=notice_text(row),
        secrets=workload_secrets.masked(row.secrets),
    )


def job_out(
    row: Job,
    allocs: list[schemas.AllocationOut],
    waiting: tuple[Reason, datetime | None] | None = None,
    cost: schemas.CostOut | None = None,
    metrics: schemas.MetricsOut | None = None,
    depends_on: list[int] | None = None,
) -> schemas.JobOut:
    return schemas.JobOut(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        state=row.state,
        exit_code=row.exit_code,
        gpu_model=(row.gpu_models or [None])[0],
        gpu_count=row.gpu_count,
        gpu_milli=row.gpu_milli,
        num_nodes=row.num_nodes,
        priority=row.priority,
        max_price=_bid(row.max_price_micros),
        cancel_requested=row.cancel_requested,
        reason=(waiting[0].text() if row.state == "queued" and waiting else row.reason),
        waiting=_waiting(waiting) if row.state == "queued" and row.launch_owner is None else None,
        allocations=allocs,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        spec=row.spec,
        runtime=row.runtime or "",
        cost=cost,
        cost_so_far=cost.so_far if cost is not None else None,
        metrics=metrics or schemas.MetricsOut(),
        secrets=workload_secrets.masked(row.secrets),
        depends_on=depends_on or [],
        group=row.group_name or "",
    )


def node_out(node: Node, gpus: list[Gpu], verified: dict | None = None) -> schemas.NodeOut:
    return schemas.NodeOut(
        id=node.id,
        name=node.name,
        zone=node.zone,
        backend=node.backend,
        state=node.state,
        gpu_model=node.gpu_model,
        gpu_count=node.gpu_count,
        gpus_free=sum(g.used_milli == 0 for g in gpus),
        virtual=any(g.virtual for g in gpus),
        cpu_milli=node.cpu_milli,
        cpu_used=node.cpu_used,
        memory_mib=node.memory_mib,
        mem_used=node.mem_used,
        heartbeat_at=node.heartbeat_at,
        gpus=[
            schemas.GpuOut(
                index=g.index, model=g.model, uuid=g.uuid, memory_mib=g.memory_mib, virtual=g.virtual, used_milli=g.used_milli
            )
            for g in gpus
        ],
        verified=schemas.VerifiedMark(**verified) if verified else None,
    )


def gpu_model_out(s: GpuModelSummary, offer: Offer | None = None, verified: dict | None = None) -> schemas.GpuModelOut:
    """Capacity and catalog facts of a model, with its prices now (``offer``; None: the
    price book does not price it, and every price is null)."""
    c = s.catalog
    o = offer
    return schemas.GpuModelOut(
        model=s.model,
        total=s.total,
        free=s.free,
        free_milli=s.free_milli,
        virtual=s.virtual,
        memory_gib=s.memory_gib,
        nodes=s.nodes,
        vendor=c.vendor if c else None,
        catalog_name=c.name if c else None,
        bf16_tflops=c.bf16_tflops if c else None,
        mem_bandwidth_gbps=c.mem_bandwidth_gbps if c else None,
        verified=verified,
        currency=o.currency if o else None,
        price_per_gpu_hour=_units(o.on_demand_per_hour) if o else None,
        spot_price_per_gpu_hour=_units(o.spot_per_hour) if o else None,
        spot_utilisation_permille=o.utilisation_permille if o else None,
        monthly_price_per_gpu=_units(o.monthly_per_month) if o else None,
        monthly_price_per_gpu_hour=_units(o.monthly_per_hour) if o else None,
        reserved_price_per_gpu=_units(o.reserved_per_term) if o else None,
        reserved_price_per_gpu_hour=_units(o.reserved_per_hour) if o else None,
        reserved_term_hours=o.reserved_term_hours if o else None,
        priced_as=o.priced_as if o else None,
    )


def event_out(e: Event) -> schemas.EventOut:
    return schemas.EventOut(
        id=e.id, ts=e.ts, kind=e.kind, object_id=e.object_id, from_state=e.from_state, to_state=e.to_state, message=e.message
    )
