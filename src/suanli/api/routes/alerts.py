"""Alerts, the tenant's webhook they are POSTed to, and the tenant's idle auto-stop default."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import NamePath, TextQuery
from suanli.api.schemas import AlertOut, AutostopSet, TenantOut, WebhookOut, WebhookSet
from suanli.control import accounts, alerts
from suanli.control.auth import Principal

router = APIRouter(prefix="/v1", tags=["alerts"])


@router.get("/alerts", response_model=list[AlertOut], responses=PAGED)
def list_alerts(
    request: Request,
    response: Response,
    tenant: TextQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[AlertOut]:
    """Your tenant's latest alerts (an operator: everyone's, or ``tenant``'s) with their
    delivery, oldest first within a page; the next page is the one before it (back in time)."""
    page = paged.page("alerts", (int,))
    rows = respond(request, response, "alerts", alerts.list_alerts(ctx.db, who, tenant, page), page, lambda a: (a.id,))
    return [
        AlertOut(
            id=a.id,
            tenant_id=a.tenant_id,
            kind=a.kind,
            object=a.object,
            message=a.message,
            created_at=a.created_at,
            delivery=a.delivery,
            attempts=a.attempts,
            last_error=a.last_error,
        )
        for a in reversed(rows)
    ]


@router.put("/tenants/{tenant}/webhook", response_model=WebhookOut)
def set_webhook(
    tenant: NamePath, body: WebhookSet, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> WebhookOut:
    """Where the tenant's alerts are POSTed, signed with ``X-Suanli-Signature: sha256=HMAC``. The
    secret is in this answer only (sealed at rest). Private and loopback addresses: operators only."""
    secret = body.secret.get_secret_value() if body.secret is not None else None
    url, secret = alerts.set_webhook(ctx.db, ctx.keyring, who, tenant, body.url, secret)
    return WebhookOut(url=url, secret=secret)


@router.get("/tenants/{tenant}/webhook", response_model=WebhookOut)
def get_webhook(tenant: NamePath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> WebhookOut:
    return WebhookOut(url=alerts.get_webhook(ctx.db, who, tenant))


@router.delete("/tenants/{tenant}/webhook", response_model=WebhookOut)
def remove_webhook(tenant: NamePath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> WebhookOut:
    alerts.remove_webhook(ctx.db, who, tenant)
    return WebhookOut(url=None)


@router.put("/tenants/{tenant}/autostop", response_model=TenantOut)
def set_autostop(
    tenant: NamePath, body: AutostopSet, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> TenantOut:
    """The idle auto-stop window the tenant's new instances get when they ask none (admins, operators)."""
    window = ctx.autostop.check(body.autostop_s)
    t = accounts.set_tenant_autostop(ctx.db, who, tenant, window or None)
    return TenantOut(id=t.id, name=t.name, require_2fa=t.require_2fa, autostop_s=t.autostop_s)
