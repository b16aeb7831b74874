"""Instances: create, list, stop, start, delete, exec, logs."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy.orm import Session

from suanli.api.context import ServerContext
from suanli.api.convert import access_for, creation_costs, history_out, holdings_and_costs, instance_out, metrics_for
from suanli.api.deps import context, principal
from suanli.api.errors import documented
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdPath, LogTail, MetricsSince
from suanli.api.schemas import ExecOut, ExecRequest, InstanceCreate, InstanceOut, LogsOut, MetricsOut
from suanli.api.threads import backend_call
from suanli.control import instances
from suanli.control.auth import Principal
from suanli.control.isolation import require_isolation
from suanli.control.listing import Listing
from suanli.control.waiting import Reason
from suanli.db.models import Instance

router = APIRouter(prefix="/v1/instances", tags=["instances"])
#: create and start check that the tenant can pay (``control.funds``)
PAYS = documented(402)


def _outs(
    ctx: ServerContext, request: Request, rows: list[Instance], waits: dict[int, tuple[Reason, datetime | None]] | None = None
) -> list[InstanceOut]:
    """``waits``: the rows' waiting reasons where the caller read them with the rows
    (``control.listing``); else they are read here."""
    allocs, costs = holdings_and_costs(ctx.db, rows)
    access = access_for(ctx, rows, str(request.base_url))
    samples = metrics_for(ctx.db, rows)
    if waits is None:
        waits = ctx.waiting("instance", [r.id for r in rows if r.state == "pending"])  # shown only then (instance_out)
    return [
        instance_out(r, allocs.get(r.id, []), waits.get(r.id), access[r.id], costs.get(r.id), samples.get(r.id)) for r in rows
    ]


def _out(ctx: ServerContext, request: Request, row: Instance) -> InstanceOut:
    return _outs(ctx, request, [row])[0]


def _created(ctx: ServerContext, request: Request, row: Instance) -> InstanceOut:
    """A new instance as at its creation: pending, holding nothing, not yet seen by a
    scheduling pass, with its cost then (``workload_cost.at_creation``); what ``_out``
    would read for it cannot be anything else yet, unless the loop got to it first, and
    the next read shows that."""
    [access] = access_for(ctx, [row], str(request.base_url)).values()
    return instance_out(row, [], None, access, creation_costs(ctx.db, [row])[row.id])


def to_request(body: InstanceCreate) -> instances.InstanceRequest:
    return instances.InstanceRequest(
        name=body.name,
        gpu_model=body.gpu_model,
        gpu_count=body.gpu_count,
        gpu_milli=body.gpu_milli,
        cpus=body.cpus,
        memory_gib=body.memory_gib,
        image=body.image,
        disk_gib=body.disk_gib,
        priority=body.priority,
        max_price=body.max_price,
        ports=tuple(body.ports),
        secrets={k: v.get_secret_value() for k, v in body.secrets.items()},
        autostop_s=body.autostop_s,
    )


@router.post("", response_model=InstanceOut, status_code=201, responses=PAYS)
def create(
    body: InstanceCreate, request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> InstanceOut:
    require_isolation(ctx.db, ctx.backends, who, ctx.allow_process_runtime)
    row = instances.create(ctx.db, who, to_request(body), ctx.keyring, ctx.autostop)
    ctx.wake()
    return _created(ctx, request, row)


@router.get("", response_model=list[InstanceOut], responses=PAGED)
async def list_(
    request: Request,
    response: Response,
    include_deleted: bool = Query(False, alias="all", description="include deleted instances"),
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> Response:
    """Your instances (an operator's: everyone's), by id, a page at a time (a page asked
    again within seconds, unchanged: ``api.page_cache``)."""
    page = paged.page("instances", (int,))

    def compute(listed: Listing[Instance]) -> list[InstanceOut]:
        rows = respond(request, response, "instances", listed.rows, page, lambda r: (r.id,))
        return _outs(ctx, request, rows, listed.waits)

    def read(s: Session) -> Listing[Instance]:
        return instances.listing(s, who, include_deleted=include_deleted, page=page)

    return await ctx.pages.answer(ctx.db, ctx.fresh, request, response, who, read, compute)


@router.get("/{instance_id}", response_model=InstanceOut)
def get(
    instance_id: IdPath, request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> InstanceOut:
    """One of your instances (an operator's: anyone's), read as a list page's rows are,
    with its waiting reason. Computed at each request, not kept as a page is: a renter
    asking for one instance (``suanli instances show``) sees its latest usage sample and
    costs as of now."""
    with ctx.db.reads() as s:  # the figures' reads too (``Database.reads`` nests)
        listed = instances.detail(s, who, instance_id)
        return _outs(ctx, request, listed.rows, listed.waits)[0]


@router.get("/{instance_id}/metrics", response_model=list[MetricsOut])
def metrics_history(
    instance_id: IdPath,
    since: MetricsSince = None,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[MetricsOut]:
    """Its usage over time, oldest first: raw samples for the last hour, five-minute buckets before."""
    return history_out(ctx.db, "instance", instances.get(ctx.db, who, instance_id).id, since)


@router.post("/{instance_id}/stop", response_model=InstanceOut)
def stop(
    instance_id: IdPath, request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> InstanceOut:
    row = instances.stop(ctx.db, who, instance_id)
    ctx.wake()
    return _out(ctx, request, row)


@router.post("/{instance_id}/start", response_model=InstanceOut, responses=PAYS)
def start(
    instance_id: IdPath, request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> InstanceOut:
    row = instances.start(ctx.db, who, instance_id)
    ctx.wake()
    return _out(ctx, request, row)


@router.delete("/{instance_id}", response_model=InstanceOut)
def delete(
    instance_id: IdPath, request: Request, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> InstanceOut:
    row = instances.delete(ctx.db, who, instance_id, ctx.data_dir)
    ctx.wake()
    return _out(ctx, request, row)


@router.post("/{instance_id}/exec", response_model=ExecOut)
async def exec_(
    instance_id: IdPath, body: ExecRequest, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> ExecOut:
    # on the backend's threads, not the handlers' (api.threads): a command may run an hour
    result = await backend_call(instances.exec_, ctx.db, ctx.backends, who, instance_id, body.command, body.timeout_s)
    return ExecOut(exit_code=result.exit_code, output=result.output)


@router.get("/{instance_id}/logs", response_model=LogsOut)
async def logs(
    instance_id: IdPath,
    tail_bytes: LogTail = None,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> LogsOut:
    return LogsOut(text=await backend_call(instances.logs, ctx.db, ctx.backends, who, instance_id, tail_bytes))
