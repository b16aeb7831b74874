"""Inventory: nodes (operator registers) and the GPU catalog with free capacity."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request, Response

from suanli.api.context import ServerContext
from suanli.api.convert import gpu_model_out, node_out
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdPath, NamePath
from suanli.api.schemas import GpuModelOut, NodeOut, NodeUpdate, VerificationIn, VerificationOut, VerifyRunIn, VerifyRunOut
from suanli.backends.local import discover_gpus
from suanli.billing.offers import offers
from suanli.control import heartbeat as heartbeat_mod
from suanli.control import nodes, verification, verify_jobs
from suanli.control.auth import Principal
from suanli.db.models import NodeVerification
from suanli.inventory import Inventory

router = APIRouter(prefix="/v1", tags=["inventory"])


@router.get("/gpus", response_model=list[GpuModelOut])
def gpus(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> list[GpuModelOut]:
    """Per GPU model: capacity (total, free whole GPUs, free milli on ready nodes),
    catalog facts and the prices now (on demand, spot now, monthly, reserved)."""
    summary = nodes.gpu_summary(ctx.db)
    with ctx.db.transaction() as s:  # the first read of prices may write the seed price version
        prices = offers(s)
    verified = verification.marks_by_model(ctx.db)
    return [gpu_model_out(g, prices.get(g.model), verified.get(g.model)) for g in summary]


@router.get("/nodes", response_model=list[NodeOut], responses=PAGED)
def list_nodes(
    request: Request,
    response: Response,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[NodeOut]:
    """Nodes by name, a page at a time."""
    page = paged.page("nodes", (str, int))
    rows = respond(request, response, "nodes", nodes.list_nodes(ctx.db, page), page, lambda ng: (ng[0].name, ng[0].id))
    marks = verification.marks(ctx.db)
    return [node_out(n, g, marks.get(n.id)) for n, g in rows]


@router.post("/nodes", response_model=list[NodeOut], status_code=201)
def add_nodes(body: Inventory, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> list[NodeOut]:
    added = {n.name for n in nodes.register(ctx.db, who, body, discover_gpus)}
    ctx.wake()
    return [node_out(n, g) for n, g in nodes.list_nodes(ctx.db) if n.name in added]


@router.post("/nodes/{name}/heartbeat", response_model=NodeOut)
def heartbeat(name: NamePath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> NodeOut:
    """The node's agent says it is alive (operator token). Once a node has sent one,
    silence longer than the server's heartbeat timeout marks it down and fails its work over."""
    heartbeat_mod.beat(ctx.db, who, name)
    return next(node_out(n, g) for n, g in nodes.list_nodes(ctx.db) if n.name == name)


@router.patch("/nodes/{name}", response_model=NodeOut)
def update_node(
    name: NamePath, body: NodeUpdate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> NodeOut:
    """Cordon a node (it keeps its work, gets no new work), mark it down, or make it ready."""
    nodes.set_state(ctx.db, who, name, body.state)
    ctx.wake()
    marks = verification.marks(ctx.db)
    return next(node_out(n, g, marks.get(n.id)) for n, g in nodes.list_nodes(ctx.db) if n.name == name)


def _verification_out(v: NodeVerification, name: str, state: str | None = None, report: bool = False) -> VerificationOut:
    mark = verification.mark(v) or {}
    return VerificationOut(
        **mark,
        id=v.id,
        node=name,
        actor=v.actor,
        device=v.device,
        gpu_count=v.gpu_count,
        node_state=state,
        report=v.report if report else None,
    )


@router.post("/nodes/{name}/verifications", response_model=VerificationOut, status_code=201)
def add_verification(
    name: NamePath, body: VerificationIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> VerificationOut:
    """Keep a node's `suanli verify --json` report (operators), judged here with the
    platform's thresholds against the model the node is registered as. A node that fails
    is cordoned with the reasons; with `uncordon`, a cordoned node that passes is made ready."""
    row, state = verification.record(ctx.db, who, name, body.report, uncordon=body.uncordon)
    ctx.wake()
    return _verification_out(row, name, state, report=True)


@router.get("/nodes/{name}/verifications", response_model=list[VerificationOut])
def list_verifications(
    name: NamePath,
    limit: int = Query(50, ge=1, le=500),
    full: bool = False,
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[VerificationOut]:
    """A node's `suanli verify` results, newest first (`full`: with each whole report)."""
    return [_verification_out(v, name, report=full) for v in verification.history(ctx.db, name, limit)]


def _run_out(ctx: ServerContext, run: verify_jobs.RunView) -> VerifyRunOut:
    recorded = None
    if run.verification_id is not None:
        row, state = verification.by_id(ctx.db, run.verification_id)
        recorded = _verification_out(row, run.node, state, report=True)
    return VerifyRunOut(
        id=run.id,
        node=run.node,
        job_id=run.job_id,
        job_state=run.job_state,
        state=run.state,
        error=run.error,
        uncordon=run.uncordon,
        actor=run.actor,
        verification=recorded,
    )


@router.post("/nodes/{name}/verify-runs", response_model=VerifyRunOut, status_code=202)
def start_verify_run(
    name: NamePath, body: VerifyRunIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> VerifyRunOut:
    """Verify a node where renters run (operators): a job pinned to the node takes all of
    it (every GPU, CPU and memory; it may run on a node cordoned for failing) and runs
    `suanli verify --json` in its own container; when it ends, its report is recorded as
    a `POST .../verifications` would (cordon on failure, `uncordon` on a pass). Poll
    `GET .../verify-runs/{id}` for the outcome."""
    run = verify_jobs.submit(ctx.db, who, name, body.uncordon, body.quick, body.image, ctx.verify_command)
    ctx.wake()
    return _run_out(ctx, verify_jobs.view(ctx.db, run))


@router.get("/nodes/{name}/verify-runs/{run_id}", response_model=VerifyRunOut)
def get_verify_run(
    name: NamePath, run_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> VerifyRunOut:
    """A verification run: waiting, recorded (with the result) or failed (with why)."""
    return _run_out(ctx, verify_jobs.get(ctx.db, who, name, run_id))
