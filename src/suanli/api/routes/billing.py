"""Billing: usage, bill, invoices, prices, top-ups, grants, budgets, subscriptions,
transfers, quotes, rating runs. Tenants see their own; operators and admins may
name any tenant (``?tenant=``) and change prices, balances and grants.

Reads never rate: they show what is posted (and the bill's accruing estimate); the
server's billing thread (``control.billing_worker``) and ``POST /rate`` rate."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field

from suanli import gpu_names
from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdPath, TenantQuery
from suanli.billing import funds, rater, reports, spot, store
from suanli.billing import quote as quoting
from suanli.billing.money import MoneyError
from suanli.billing.store import BillingError, dt_to_ms
from suanli.billing.tables import Grant, Subscription
from suanli.bounds import DB_INT_MAX, MAX_DISK_GIB, EpochMs, Finite, TenantRef, Text
from suanli.control import admission
from suanli.control.auth import Principal
from suanli.control.task import Task, check_max_price
from suanli.errors import Forbidden, NotFound

router = APIRouter(prefix="/v1/billing", tags=["billing"])
OPERATOR = ("admin", "operator")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PriceSet(Strict):
    gpu_model: Text | None = Field(default=None, max_length=50)
    plan: Text = Field(min_length=1, max_length=20)
    price: Text = Field(min_length=1, max_length=30, description='decimal text in the book\'s currency, e.g. "1.96"')
    note: Text = Field(default="", max_length=500)
    effective_ms: EpochMs | None = None


class TopUp(Strict):
    tenant: TenantRef
    amount: Text = Field(min_length=1, max_length=30)
    key: Text | None = Field(default=None, max_length=100, description="idempotency key: a repeat posts nothing")
    memo: Text = Field(default="", max_length=500)


class GrantIn(Strict):
    tenant: TenantRef
    gpu_model: Text | None = Field(default=None, max_length=50)
    max_gpus: Finite = Field(gt=0, le=100_000)
    gpu_minutes: int | None = Field(default=None, ge=0, le=DB_INT_MAX)
    qos: Literal["spot", "on-demand", "reserved"] = "on-demand"
    expires_at: datetime | None = None


class BudgetIn(Strict):
    tenant: TenantRef | None = None
    limit: Text | None = Field(default=None, max_length=30)
    thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=lambda: [50, 80, 100], max_length=20, description="percent of the limit at which to alert"
    )
    hard_cap: bool = False
    notice_s: int = Field(default=300, ge=0, le=86_400 * 7)


class TermsIn(Strict):
    tenant: TenantRef | None = None
    terms: Literal["prepaid", "credit", "postpaid"] | None = None
    credit_limit: Text | None = Field(
        default=None, max_length=30, description="credit terms: how far below zero the balance may go"
    )
    grace_s: int | None = Field(default=None, ge=0, le=86_400 * 7, description="notice before running work stops")
    low_balance: Text | None = Field(default=None, max_length=30, description='alert below this amount; "" turns it off')
    storage_debt_limit: Text | None = Field(
        default=None, max_length=30, description="how far a stopped disk's storage may take the balance below its floor"
    )


class SubscriptionIn(Strict):
    tenant: TenantRef | None = None
    plan: Literal["monthly", "reserved"]
    gpu_model: Text = Field(min_length=1, max_length=50)
    gpu_count: int = Field(ge=1, le=4096)
    months: int = Field(default=1, ge=1, le=36)


class TransferIn(Strict):
    tenant: TenantRef
    gib: Text = Field(min_length=1, max_length=30)
    note: Text = Field(default="", max_length=200)


class QuoteIn(Strict):
    task: Task
    max_hours: Finite | None = Field(default=None, gt=0, le=24 * 366)
    disk_gib: int = Field(default=0, ge=0, le=MAX_DISK_GIB)
    max_price: Text | None = Field(
        default=None, max_length=30, description="spot bid per GPU-hour; default: the task's resources.max_price"
    )


class RateIn(Strict):
    cutoff_ms: EpochMs | None = None


def _tenant(ctx: ServerContext, who: Principal, tenant: str | None) -> int:
    """The tenant ``?tenant=`` (or a body's ``tenant``) names, for ``who``: its own always,
    any for operators. A member naming another tenant gets the very answer a tenant that
    does not exist gets (404, same body), so the answer tells no tenant's name."""
    if tenant is None:
        return who.tenant_id
    with ctx.db.sessions() as s:
        tid = store.find_tenant(s, tenant)
    if tid is not None and (tid == who.tenant_id or who.role in OPERATOR):
        return tid
    raise NotFound("no tenant of that name or id that you may see")


@router.get("/usage")
def usage(
    tenant: TenantQuery = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = Query(1000, ge=1, le=100_000),
    all_tenants: bool = Query(False, alias="all"),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[dict]:
    if all_tenants:
        who.require(*OPERATOR)
    tid = None if all_tenants else _tenant(ctx, who, tenant)
    return reports.usage(ctx.db, tid, dt_to_ms(since) if since else None, dt_to_ms(until) if until else None, limit)


@router.get("/bill")
def bill(tenant: TenantQuery = None, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    return reports.bill(ctx.db, _tenant(ctx, who, tenant))


@router.get("/terms")
def terms(tenant: TenantQuery = None, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    """Payment terms (prepaid, credit, post-paid), grace period, low-balance alert and
    what the tenant has left."""
    tid = _tenant(ctx, who, tenant)
    with ctx.db.sessions() as s:
        return funds.terms_doc(s, tid)


@router.put("/terms")
def set_terms(body: TermsIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    """Operators set a tenant's terms; a member may set only its own low-balance alert."""
    tid = _tenant(ctx, who, body.tenant)
    if who.role not in OPERATOR and (body.terms, body.credit_limit, body.grace_s, body.storage_debt_limit) != (None,) * 4:
        raise Forbidden("only operators set payment terms; a member may set its own low_balance alert", code="forbidden")
    store.set_terms(
        ctx.db,
        tid,
        who.name,
        terms=body.terms,
        credit_limit=body.credit_limit,
        grace_s=body.grace_s,
        low_balance=body.low_balance or None,
        clear_low_balance=body.low_balance == "",
        storage_debt_limit=body.storage_debt_limit,
    )
    ctx.wake()  # held work may start now
    ctx.wake_billing()
    with ctx.db.sessions() as s:
        return funds.terms_doc(s, tid)


@router.get("/invoice", response_model=None)
def invoice(
    month: str = Query(pattern=r"^[0-9]{4}-[0-9]{2}$", description="YYYY-MM"),
    tenant: TenantQuery = None,
    format: Literal["json", "html"] = "json",
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> dict | HTMLResponse:
    from suanli.billing.invoice import render_html

    doc = reports.invoice_doc(ctx.db, _tenant(ctx, who, tenant), month)
    return HTMLResponse(render_html(doc)) if format == "html" else doc


@router.post("/rate")
def rate(body: RateIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    if body.cutoff_ms is not None and body.cutoff_ms > store.now_ms():
        raise BillingError("cutoff_ms: a rating run cannot look into the future (records it writes are final)")
    r = rater.run(ctx.db, cutoff_ms=body.cutoff_ms)
    actions = admission.enforce_budgets(ctx.db, r.cutoff_ms)  # then the budgets, as the billing thread does
    return {
        "run_id": r.run_id,
        "cutoff_ms": r.cutoff_ms,
        "records": r.records,
        "inserted": r.posted.inserted,
        "skipped": r.posted.skipped,
        "batches": r.posted.batches,
        "budget_actions": actions,
    }


@router.get("/prices")
def prices(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    return reports.price_list(ctx.db)


@router.put("/prices")
def set_price(body: PriceSet, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    store.set_price(ctx.db, who.name, body.gpu_model, body.plan, body.price, body.note, body.effective_ms)
    return reports.price_list(ctx.db)


@router.post("/topups", status_code=201)
def topup(body: TopUp, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    posted, bal = store.topup(ctx.db, body.tenant, body.amount, body.key, body.memo)
    ctx.wake()  # held work may start now
    ctx.wake_billing()  # and the hard cap's notice clears
    return {"posted": posted, "balance_micros": bal, "balance": float(bal) / 1_000_000}


def _grant_out(g: Grant) -> dict:
    return {
        "id": g.id,
        "tenant_id": g.tenant_id,
        "gpu_model": g.gpu_model,
        "max_gpus": g.max_gpu_milli / 1000,
        "gpu_minutes": g.gpu_minutes,
        "qos": g.qos,
        "expires_at": g.expires_at.isoformat() if g.expires_at else None,
    }


@router.get("/grants", responses=PAGED)
def grants(
    request: Request,
    response: Response,
    tenant: TenantQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[dict]:
    """Grants in force by id, a page at a time."""
    tid = None if (tenant is None and who.sees_all) else _tenant(ctx, who, tenant)
    page = paged.page("grants", (int,))
    rows = respond(request, response, "grants", store.list_grants(ctx.db, tid, page), page, lambda g: (g.id,))
    return [_grant_out(g) for g in rows]


@router.post("/grants", status_code=201)
def create_grant(body: GrantIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    g = store.create_grant(
        ctx.db, store.GrantSpec(body.tenant, body.gpu_model, body.max_gpus, body.gpu_minutes, body.qos, body.expires_at)
    )
    return _grant_out(g)


@router.delete("/grants/{grant_id}")
def revoke_grant(grant_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    store.revoke_grant(ctx.db, grant_id)
    ctx.wake()
    return {"revoked": grant_id}


@router.put("/budget")
def set_budget(body: BudgetIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    """A tenant sets its own budget, operators anyone's; an operator's budget is a floor a
    member may tighten, never loosen; every change records who made it."""
    tid = _tenant(ctx, who, body.tenant)
    editor = store.Editor(who.name, who.role)
    store.set_budget(ctx.db, tid, body.limit, body.thresholds, body.hard_cap, body.notice_s, editor)
    return reports.bill(ctx.db, tid)["budget"] or {}


@router.get("/budget/changes", responses=PAGED)
def budget_changes(
    request: Request,
    response: Response,
    tenant: TenantQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[dict]:
    """Who changed the budget, when, from what to what; oldest first, a page at a time."""
    tid = _tenant(ctx, who, tenant)
    page = paged.page("budget-changes", (int,))
    rows = respond(request, response, "budget-changes", store.budget_changes(ctx.db, tid, page), page, lambda c: (c.id,))
    return [
        {"at": c.created_at.isoformat(), "user": c.user_name, "role": c.role, "before": c.before, "after": c.after} for c in rows
    ]


def _sub_out(r: Subscription) -> dict:
    return {
        "id": r.id,
        "tenant_id": r.tenant_id,
        "plan": r.plan,
        "gpu_model": r.gpu_model,
        "gpu_count": r.gpu_count,
        "start": reports.iso(r.start_ms),
        "end": reports.iso(r.end_ms),
        "fee": r.fee / 1_000_000,
        "fee_micros": r.fee,
        "cancelled": reports.iso(r.cancelled_ms) if r.cancelled_ms else None,
        "refund_micros": r.refund,
    }


@router.get("/subscriptions", responses=PAGED)
def subscriptions(
    request: Request,
    response: Response,
    tenant: TenantQuery = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[dict]:
    """Subscriptions by id, a page at a time."""
    page = paged.page("subscriptions", (int,))
    rows = store.list_subscriptions(ctx.db, _tenant(ctx, who, tenant), page)
    return [_sub_out(r) for r in respond(request, response, "subscriptions", rows, page, lambda r: (r.id,))]


@router.post("/subscriptions", status_code=201)
def subscribe(body: SubscriptionIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    tid = _tenant(ctx, who, body.tenant)
    return _sub_out(store.subscribe(ctx.db, tid, body.plan, body.gpu_model, body.gpu_count, body.months))


@router.post("/subscriptions/{sub_id}/cancel")
def cancel(sub_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    return _sub_out(store.cancel_subscription(ctx.db, sub_id, None if who.sees_all else who.tenant_id))


@router.post("/transfers", status_code=201)
def transfer(body: TransferIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    who.require(*OPERATOR)
    r = store.record_transfer(ctx.db, body.tenant, body.gib, note=body.note)
    return {"id": r.id, "tenant_id": r.tenant_id, "gib": r.gib_milli / 1000}


@router.post("/quote")
def quote(body: QuoteIn, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> dict:
    r = body.task.resources
    accel = r.accel
    with ctx.db.transaction() as s:
        mk = spot.market(s)  # the book now, and the spot market for a spot request
    book = mk.book
    offered = reports.offered_models(ctx.db)
    # the renter's spelling (a100, 910b) as the nodes registered it, by gpu_names' one rule
    models = [gpu_names.lookup(accel.model, offered) or accel.model] if accel else offered
    if not r.gpu_milli and not accel:
        raise BillingError("resources.accelerators: a quote needs GPUs (MODEL:COUNT or gpu_milli)")
    count = accel.count if accel and not r.gpu_milli else 0
    bid = r.max_price  # the task's bid, unless the quote names another
    if body.max_price is not None:
        try:
            bid = check_max_price(body.max_price, r.priority)
        except ValueError as exc:
            raise BillingError(f"max_price: {exc}") from None
    util = None
    if r.priority == "spot":  # the price admission compares the bid with: now, the request counted as running
        milli = (r.gpu_milli or count * 1000) * body.task.num_nodes
        util = {m: mk.utilisation(m, milli) for m in models}
    try:
        lines = quoting.quote(
            book,
            models,
            count,
            r.gpu_milli or 0,
            body.task.num_nodes,
            r.priority,
            body.max_hours,
            body.disk_gib,
            bid,
            utilisation=util,
        )
    except MoneyError as exc:
        raise BillingError(f"max_price: {exc}") from None
    if not lines:
        raise BillingError(
            f"no price for {', '.join(models) or 'any registered GPU model'} in the price book; "
            f"choose one of: {', '.join(offered) or 'none registered'}"
        )
    return {"currency": book.currency, "max_hours": body.max_hours, "quotes": quoting.as_json(lines, book.currency)}
