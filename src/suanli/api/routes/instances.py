"""Instances: create, list, stop, start, delete, exec, logs."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from suanli.api.context import ServerContext
from suanli.api.convert import allocations_for, instance_out
from suanli.api.deps import context, principal
from suanli.api.schemas import ExecOut, ExecRequest, InstanceCreate, InstanceOut, LogsOut
from suanli.control import instances
from suanli.control.auth import Principal
from suanli.db.models import Instance

router = APIRouter(prefix="/v1/instances", tags=["instances"])


def _out(ctx: ServerContext, row: Instance) -> InstanceOut:
    return instance_out(row, allocations_for(ctx.db, [row]).get(row.id, []), ctx.waiting_reason("instance", row.id))


def to_request(body: InstanceCreate) -> instances.InstanceRequest:
    return instances.InstanceRequest(
        name=body.name, gpu_model=body.gpu_model, gpu_count=body.gpu_count, gpu_milli=body.gpu_milli,
        cpus=body.cpus, memory_gib=body.memory_gib, image=body.image, disk_gib=body.disk_gib, priority=body.priority,
        max_price=body.max_price,
    )


@router.post("", response_model=InstanceOut, status_code=201)
def create(body: InstanceCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> InstanceOut:
    row = instances.create(ctx.db, who, to_request(body))
    ctx.wake()
    return instance_out(row, [])


@router.get("", response_model=list[InstanceOut])
def list_(
    include_deleted: bool = Query(False, alias="all", description="include deleted instances"),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[InstanceOut]:
    rows = instances.list_(ctx.db, who, include_deleted=include_deleted)
    allocs = allocations_for(ctx.db, rows)
    return [instance_out(r, allocs.get(r.id, []), ctx.waiting_reason("instance", r.id)) for r in rows]


@router.get("/{instance_id}", response_model=InstanceOut)
def get(instance_id: int, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> InstanceOut:
    return _out(ctx, instances.get(ctx.db, who, instance_id))


@router.post("/{instance_id}/stop", response_model=InstanceOut)
def stop(instance_id: int, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> InstanceOut:
    row = instances.stop(ctx.db, who, instance_id)
    ctx.wake()
    return _out(ctx, row)


@router.post("/{instance_id}/start", response_model=InstanceOut)
def start(instance_id: int, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> InstanceOut:
    row = instances.start(ctx.db, who, instance_id)
    ctx.wake()
    return _out(ctx, row)


@router.delete("/{instance_id}", response_model=InstanceOut)
def delete(instance_id: int, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> InstanceOut:
    row = instances.delete(ctx.db, who, instance_id, ctx.data_dir)
    ctx.wake()
    return _out(ctx, row)


@router.post("/{instance_id}/exec", response_model=ExecOut)
def exec_(instance_id: int, body: ExecRequest, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> ExecOut:
    result = instances.exec_(ctx.db, ctx.backends, who, instance_id, body.command, body.timeout_s)
    return ExecOut(exit_code=result.exit_code, output=result.output)


@router.get("/{instance_id}/logs", response_model=LogsOut)
def logs(instance_id: int, tail_bytes: int | None = Query(None, ge=1), ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> LogsOut:
    return LogsOut(text=instances.logs(ctx.db, ctx.backends, who, instance_id, tail_bytes))
