"""Jobs (submit a task, list, cancel, logs) and the event log."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from suanli.api.context import ServerContext
from suanli.api.convert import creation_costs, event_out, history_out, holdings_and_costs, job_out, metrics_for
from suanli.api.deps import context, principal
from suanli.api.errors import documented
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdPath, IdQuery, LogTail, MetricsSince, TextQuery
from suanli.api.schemas import AllocationOut, EventOut, JobOut, LogsOut, MetricsOut
from suanli.api.threads import backend_call
from suanli.control import images, jobs, pipelines
from suanli.control.auth import Principal
from suanli.control.isolation import require_isolation
from suanli.control.listing import Listing
from suanli.control.task import Pipeline, Task
from suanli.control.waiting import DEPENDENCY, Reason
from suanli.db import keyset
from suanli.db.models import Event, Job
from suanli.errors import Invalid

router = APIRouter(prefix="/v1", tags=["jobs"])


def _out(
    ctx: ServerContext,
    rows: list[Job],
    created: bool = False,
    waits: dict[int, tuple[Reason, datetime | None]] | None = None,
) -> list[JobOut]:
    """Jobs as the API shows them: allocations, costs, dependencies and, for a queued
    job, why it waits (a dependency first, then the last scheduling pass's reason).
    ``created``: as at their creation, holding nothing, not yet seen by a scheduling pass,
    their cost then (``workload_cost.at_creation``), as an instance's create answers.
    ``waits``: the scheduling pass's reasons where the caller read them with the rows
    (``control.listing``); else they are read here."""
    allocs: dict[int, list[AllocationOut]]
    if created:
        allocs, samples, waits = {}, {}, {}
        costs = creation_costs(ctx.db, rows)
    else:
        allocs, costs = holdings_and_costs(ctx.db, rows)
        samples = metrics_for(ctx.db, rows)
        if waits is None:
            waits = ctx.waiting("job", [r.id for r in rows if r.state == "queued"])  # shown only then (job_out)
    with ctx.db.sessions() as s:
        deps = pipelines.depends_on(s, [r.id for r in rows])
        held = pipelines.waiting_reasons(s, [r.id for r in rows if r.state == "queued" and r.id in deps])
    return [
        job_out(
            r,
            allocs.get(r.id, []),
            (Reason(DEPENDENCY, held[r.id]), None) if r.id in held else waits.get(r.id),
            costs.get(r.id),
            samples.get(r.id),
            deps.get(r.id),
        )
        for r in rows
    ]


def _submit(ctx: ServerContext, who: Principal, tasks: list[Task], group: str = "") -> list[Job]:
    require_isolation(ctx.db, ctx.backends, who, ctx.allow_process_runtime)
    with ctx.db.sessions() as s:
        for task in tasks:
            images.resolve(s, task.image)  # an image not offered is refused before anything is created
    rows = pipelines.submit(ctx.db, who, tasks, group, ctx.data_dir, ctx.keyring)
    ctx.wake()
    return rows


@router.post("/jobs", response_model=JobOut, status_code=201, responses=documented(402))  # control.funds
def submit(task: Task, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    if task.matrix:
        raise Invalid("matrix: a sweep makes several jobs; submit it with POST /v1/pipelines")
    return _out(ctx, _submit(ctx, who, [task]), created=True)[0]


@router.post("/pipelines", response_model=list[JobOut], status_code=201, responses=documented(402))
def submit_pipeline(
    pipeline: Pipeline, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> list[JobOut]:
    """Submit jobs that depend on each other (and sweeps) at once: all of them or, on any
    error (an unknown name, a cycle, another tenant's id, funds), none."""
    return _out(ctx, _submit(ctx, who, pipeline.jobs, pipeline.name), created=True)


@router.get("/jobs", response_model=list[JobOut], responses=PAGED)
async def list_(
    request: Request,
    response: Response,
    state: TextQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> Response:
    """Your jobs (an operator's: everyone's), by id, a page at a time (a page asked again
    within seconds, unchanged: ``api.page_cache``)."""
    page = paged.page("jobs", (int,))

    def compute(listed: Listing[Job]) -> list[JobOut]:
        return _out(ctx, respond(request, response, "jobs", listed.rows, page, lambda r: (r.id,)), waits=listed.waits)

    def read(s: Session) -> Listing[Job]:
        return jobs.listing(s, who, state, page)

    return await ctx.pages.answer(ctx.db, ctx.fresh, request, response, who, read, compute)


@router.get("/jobs/{job_id}", response_model=JobOut)
def get(job_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    """One of your jobs (an operator's: anyone's), read as a list page's rows are, with its
    waiting reason; computed at each request (see ``instances.get``)."""
    with ctx.db.reads() as s:  # the figures' reads too (``Database.reads`` nests)
        listed = jobs.detail(s, who, job_id)
        return _out(ctx, listed.rows, waits=listed.waits)[0]


@router.get("/jobs/{job_id}/metrics", response_model=list[MetricsOut])
def metrics_history(
    job_id: IdPath,
    since: MetricsSince = None,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[MetricsOut]:
    """Its usage over time (its nodes summed), oldest first: raw samples for the last hour, five-minute buckets before."""
    return history_out(ctx.db, "job", jobs.get(ctx.db, who, job_id).id, since)


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel(job_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> JobOut:
    row = jobs.cancel(ctx.db, who, job_id)
    ctx.wake()
    return _out(ctx, [row])[0]


@router.get("/jobs/{job_id}/logs", response_model=LogsOut)
async def logs(
    job_id: IdPath,
    tail_bytes: LogTail = None,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> LogsOut:
    return LogsOut(text=await backend_call(jobs.logs, ctx.db, ctx.backends, who, job_id, tail_bytes))


@router.get("/events", response_model=list[EventOut], responses=PAGED)
def events(
    request: Request,
    response: Response,
    kind: TextQuery = None,
    object_id: IdQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[EventOut]:
    """The latest events, oldest first within a page; the next page is the one before it
    (back in time), so new events never shift the pages being read."""
    who.require("admin", "operator")
    page = paged.page("events", (int,))
    with ctx.db.sessions() as s:
        q = select(Event)
        if kind:
            q = q.where(Event.kind == kind)
        if object_id is not None:
            q = q.where(Event.object_id == object_id)
        rows = list(s.scalars(keyset.select_page(q, [Event.id], page, descending=True)))
    return [event_out(e) for e in reversed(respond(request, response, "events", rows, page, lambda e: (e.id,)))]
