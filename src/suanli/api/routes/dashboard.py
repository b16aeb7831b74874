"""The console's dashboard: one read of the figures over a window of days."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.billing.price_versions import current_book
from suanli.control.auth import Principal
from suanli.control.dashboard import MAX_DAYS, dashboard

router = APIRouter(prefix="/v1", tags=["dashboard"])

Days = Annotated[int, Query(ge=1, le=MAX_DAYS, description=f"the window, in days (1..{MAX_DAYS})")]


@router.get("/dashboard")
def get(days: Days = 30, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict[str, Any]:
    """Your tenant's spend per day (micro-units of ``currency``); for operators also the
    platform's allocation per GPU model over time, revenue per day, the queue and why it
    waits, and node states."""
    with ctx.db.reads() as s:
        currency = current_book(s)[1].currency
        board = dashboard(s, who.tenant_id, currency, days, who.sees_all, ctx.waiting_reasons)
    return asdict(board)
