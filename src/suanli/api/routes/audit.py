"""The audit log, for admins: read, verified, exported as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdQuery, TextQuery
from suanli.api.schemas import AuditOut, AuditVerdict
from suanli.control import audit
from suanli.control.auth import Principal

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=list[AuditOut], responses=PAGED)
def records(
    request: Request,
    response: Response,
    tenant_id: IdQuery = None,
    actor: TextQuery = None,
    action: TextQuery = None,
    since: datetime | None = None,
    after: int = Query(0, ge=0, le=2**62, description="start after this record id (the cursor, when given, wins)"),
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[AuditOut]:
    """Records oldest first, a page at a time."""
    who.require("admin")
    page = paged.page("audit", (int,))
    start = int(page.after[0]) if page.after is not None else after
    q = audit.Query(tenant_id=tenant_id, actor=actor, action=action, since=since, after_id=start, limit=page.limit + 1)
    rows = respond(request, response, "audit", audit.records(ctx.db, q), page, lambda r: (r.id,))
    return [AuditOut(**audit.as_dict(r)) for r in rows]


@router.get("/verify", response_model=AuditVerdict)
def verify(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> AuditVerdict:
    """Walk the hash chain; name the first record that was changed or is missing."""
    who.require("admin")
    v = audit.verify(ctx.db)
    return AuditVerdict(ok=v.ok, checked=v.checked, bad_id=v.bad_id, problem=v.problem)


@router.get("/export", response_class=StreamingResponse, responses={200: {"content": {"application/x-ndjson": {}}}})
def export(
    since: datetime | None = None, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> StreamingResponse:
    """Every record (from ``since``) as JSON lines, oldest first, in pages."""
    who.require("admin")

    def lines() -> Iterator[bytes]:
        after = 0
        while True:
            page = audit.records(ctx.db, audit.Query(since=since, after_id=after, limit=1000))
            if not page:
                return
            for r in page:
                yield (json.dumps(audit.as_dict(r), ensure_ascii=False) + "\n").encode()
            after = page[-1].id

    return StreamingResponse(lines(), media_type="application/x-ndjson")
