"""Jobs (submit a task, list, cancel, logs) and the event log."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select

from suanli.api.context import ServerContext
from suanli.api.convert import allocations_for, costs_for, event_out, job_out, metric_out, metrics_for
from suanli.api.deps import context, principal
from suanli.api.errors import documented
from suanli.api.params import IdPath, IdQuery, LogTail, TextQuery
from suanli.api.schemas import EventOut, JobOut, LogsOut, MetricsOut
from suanli.control import images, jobs
from suanli.control import metrics as usage_metrics
from suanli.control.auth import Principal
from suanli.control.isolation import require_isolation
from suanli.control.task import Task
from suanli.db.models import Event

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.post("/jobs", response_model=JobOut, status_code=201, responses=documented(402))  # control.funds
def submit(task: Task, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    require_isolation(ctx.db, ctx.backends, who, ctx.allow_process_runtime)
    with ctx.db.sessions() as s:
        images.resolve(s, task.image)  # an image not offered is refused before anything is created
    row = jobs.submit(ctx.db, who, task, ctx.data_dir, ctx.keyring)
    ctx.wake()
    return job_out(row, [], cost=costs_for(ctx.db, [row]).get(row.id))


@router.get("/jobs", response_model=list[JobOut])
def list_(state: TextQuery = None, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> list[JobOut]:
    rows = jobs.list_(ctx.db, who, state)
    allocs = allocations_for(ctx.db, rows)
    costs = costs_for(ctx.db, rows)
    samples = metrics_for(ctx.db, rows)
    return [job_out(r, allocs.get(r.id, []), ctx.waiting_reason("job", r.id), costs.get(r.id), samples.get(r.id)) for r in rows]


@router.get("/jobs/{job_id}", response_model=JobOut)
def get(job_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    row = jobs.get(ctx.db, who, job_id)
    allocs = allocations_for(ctx.db, [row]).get(row.id, [])
    cost = costs_for(ctx.db, [row]).get(row.id)
    return job_out(row, allocs, ctx.waiting_reason("job", row.id), cost, metrics_for(ctx.db, [row]).get(row.id))


@router.get("/jobs/{job_id}/metrics", response_model=list[MetricsOut])
def metrics_history(
    job_id: IdPath,
    since: float | None = Query(
        None, ge=0, le=1e11, description="epoch seconds; default: the last hour. Older than an hour: five-minute averages"
    ),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[MetricsOut]:
    """Its usage over time (its nodes summed), oldest first: raw samples for the last hour, five-minute buckets before."""
    row = jobs.get(ctx.db, who, job_id)
    start = time.time() - 3600 if since is None else since
    return [metric_out(m) for m in usage_metrics.history(ctx.db, "job", row.id, start)]


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    row = jobs.cancel(ctx.db, who, job_id)
    ctx.wake()
    return job_out(row, allocations_for(ctx.db, [row]).get(row.id, []), cost=costs_for(ctx.db, [row]).get(row.id))


@router.get("/jobs/{job_id}/logs", response_model=LogsOut)
def logs(
    job_id: IdPath,
    tail_bytes: LogTail = None,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> LogsOut:
    return LogsOut(text=jobs.logs(ctx.db, ctx.backends, who, job_id, tail_bytes))


@router.get("/events", response_model=list[EventOut])
def events(
    kind: TextQuery = None,
    object_id: IdQuery = None,
    limit: int = Query(200, ge=1, le=5000),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[EventOut]:
    who.require("admin", "operator")
    with ctx.db.sessions() as s:
        q = select(Event).order_by(Event.id.desc()).limit(limit)
        if kind:
            q = q.where(Event.kind == kind)
        if object_id is not None:
            q = q.where(Event.object_id == object_id)
        return [event_out(e) for e in reversed(list(s.scalars(q)))]
