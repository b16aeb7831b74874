"""Who am I; tenants, users, tokens; console sign-in and the second factor."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Request, Response

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal, source
from suanli.api.paging import PAGED, Paging, paging, respond
from suanli.api.params import IdPath, NamePath
from suanli.api.schemas import (
    Code,
    EnrolmentOut,
    Me,
    PasswordChange,
    SessionOut,
    SignIn,
    TenantCreate,
    TenantOut,
    TenantPatch,
    TokenCreate,
    TokenInfo,
    TokenOut,
    UserCreate,
    UserOut,
    UserPatch,
)
from suanli.control import accounts, tokens
from suanli.control.auth import Principal
from suanli.db.models import ApiToken, Tenant, User
from suanli.errors import Unauthorized

router = APIRouter(prefix="/v1", tags=["users"])


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def _tenant_out(t: Tenant) -> TenantOut:
    return TenantOut(id=t.id, name=t.name, require_2fa=t.require_2fa, autostop_s=t.autostop_s)


def _user_out(u: User, token: str | None = None) -> UserOut:
    return UserOut(
        id=u.id,
        name=u.name,
        role=u.role,
        tenant_id=u.tenant_id,
        disabled=u.disabled,
        has_password=u.password_hash is not None,
        two_factor=u.totp_enabled,
        token=token,
    )


def _token_info(t: ApiToken, user: str) -> dict:
    return dict(
        id=t.id,
        name=t.name,
        user=user,
        kind=t.kind,
        prefix=t.prefix,
        scopes=list(t.scopes or []),
        tenant_id=t.tenant_id,
        created_at=t.created_at.isoformat(),
        expires_at=_iso(t.expires_at),
        last_used_at=_iso(t.last_used_at),
        state=tokens.state(t),
    )


@router.get("/me", response_model=Me)
def me(who: Principal = Depends(principal)) -> Me:
    return Me(id=who.user_id, name=who.name, role=who.role, tenant_id=who.tenant_id)


# -- tokens ----------------------------------------------------------------------------


@router.post("/tokens", response_model=TokenOut, status_code=201)
def new_token(
    body: TokenCreate | None = None, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> TokenOut:
    """A new token for you: shown once. Scopes and a tenant pin narrow it; it never has
    more than the token that made it."""
    body = body or TokenCreate()
    row, token = tokens.create(ctx.db, who, tokens.TokenRequest(body.name, tuple(body.scopes), body.expires_in_days, body.tenant))
    return TokenOut(**_token_info(row, who.name), token=token)


@router.get("/tokens", response_model=list[TokenInfo], responses=PAGED)
def list_tokens(
    request: Request,
    response: Response,
    all: bool = False,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[TokenInfo]:
    """Your tokens (an admin, with ``all``: everyone's), newest first, a page at a time; never the tokens themselves."""
    page = paged.page("tokens", (int,))
    rows = respond(request, response, "tokens", tokens.listing(ctx.db, who, all, page), page, lambda tu: (tu[0].id,))
    return [TokenInfo(**_token_info(t, user)) for t, user in rows]


@router.delete("/tokens/{token_id}", response_model=TokenInfo)
def revoke_token(token_id: IdPath, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> TokenInfo:
    """Revoke one of your tokens (an admin: anyone's): refused from now on."""
    row = tokens.revoke(ctx.db, who, token_id, ctx.tokens)
    return TokenInfo(**_token_info(row, who.name if row.user_id == who.user_id else str(row.user_id)))


# -- tenants and users -----------------------------------------------------------------


@router.get("/tenants", response_model=list[TenantOut], responses=PAGED)
def tenants(
    request: Request,
    response: Response,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[TenantOut]:
    """Tenants by id, a page at a time (admins)."""
    page = paged.page("tenants", (int,))
    rows = respond(request, response, "tenants", accounts.list_tenants(ctx.db, who, page), page, lambda t: (t.id,))
    return [_tenant_out(t) for t in rows]


@router.post("/tenants", response_model=TenantOut, status_code=201)
def create_tenant(body: TenantCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> TenantOut:
    return _tenant_out(accounts.create_tenant(ctx.db, who, body.name, body.require_2fa))


@router.patch("/tenants/{tenant}", response_model=TenantOut)
def patch_tenant(
    tenant: NamePath, body: TenantPatch, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> TenantOut:
    """Require (or stop requiring) a second factor at sign-in for the tenant's people."""
    return _tenant_out(accounts.set_tenant_2fa(ctx.db, who, tenant, body.require_2fa))


@router.get("/users", response_model=list[UserOut], responses=PAGED)
def users(
    request: Request,
    response: Response,
    tenant: str | None = None,
    paged: Paging = Depends(paging),
    ctx: ServerContext = Depends(context),
    who: Principal = Depends(principal),
) -> list[UserOut]:
    """People by id (``tenant``: that tenant's), a page at a time (admins, operators)."""
    page = paged.page("users", (int,))
    rows = respond(request, response, "users", accounts.list_users(ctx.db, who, tenant, page), page, lambda u: (u.id,))
    return [_user_out(u) for u in rows]


@router.post("/users", response_model=UserOut, status_code=201)
def create_user(body: UserCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> UserOut:
    user, token = accounts.create_user(ctx.db, who, body.name, body.role, body.tenant, body.password)
    return _user_out(user, token)


@router.patch("/users/{user}", response_model=UserOut)
def patch_user(
    user: NamePath, body: UserPatch, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)
) -> UserOut:
    """Admins: disable or enable a user (their tokens stop at once), set a password,
    turn a second factor off."""
    who.require("admin")
    row = None
    if body.password is not None:
        row = accounts.set_password(ctx.db, who, user, body.password)
    if body.reset_2fa:
        accounts.disable_2fa(ctx.db, who, ctx.keyring, user)
    if body.disabled is not None:
        row = accounts.set_disabled(ctx.db, who, user, body.disabled, ctx.tokens)
    return _user_out(row or accounts.get_user(ctx.db, who, user))


# -- people: password, second factor, sign-in ------------------------------------------


@router.put("/me/password", response_model=UserOut)
def change_password(body: PasswordChange, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> UserOut:
    return _user_out(accounts.set_password(ctx.db, who, None, body.password, body.current))


@router.post("/me/2fa", response_model=EnrolmentOut, status_code=201)
def enrol_2fa(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> EnrolmentOut:
    """A new TOTP secret for your authenticator app; in force once confirmed."""
    e = accounts.enrol_2fa(ctx.db, who, ctx.keyring)
    return EnrolmentOut(secret=e.secret, uri=e.uri)


@router.post("/me/2fa/confirm", response_model=Me)
def confirm_2fa(body: Code, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> Me:
    accounts.confirm_2fa(ctx.db, who, ctx.keyring, body.code)
    return Me(id=who.user_id, name=who.name, role=who.role, tenant_id=who.tenant_id)


@router.post("/me/2fa/disable", response_model=Me)
def disable_2fa(body: Code, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> Me:
    accounts.disable_2fa(ctx.db, who, ctx.keyring, None, body.code)
    return Me(id=who.user_id, name=who.name, role=who.role, tenant_id=who.tenant_id)


@router.post("/sessions", response_model=SessionOut, status_code=201)
def sign_in(body: SignIn, request: Request, ctx: ServerContext = Depends(context)) -> SessionOut:
    """Sign in with a password (and a TOTP code): a session token for 12 hours. Ten
    failures in 15 minutes, for a user name or from an address, and it waits (429)."""
    where = source(request)
    request.state.principal = Principal(0, 0, body.name, "")  # who tried, for the audit log
    for key in (f"user:{body.name}", f"from:{where}"):
        ctx.bad_sign_ins.check(key, "failed sign-ins")
    try:
        s = accounts.sign_in(ctx.db, ctx.keyring, body.name, body.password, body.code)
    except Unauthorized:
        for key in (f"user:{body.name}", f"from:{where}"):
            ctx.bad_sign_ins.fail(key)
        raise
    ctx.bad_sign_ins.forgive(f"user:{body.name}")
    return SessionOut(token=s.token, token_id=s.token_id, expires_at=s.expires_at, must_enrol_2fa=s.must_enrol_2fa)


@router.delete("/sessions/current", status_code=204)
def sign_out(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> None:
    accounts.sign_out(ctx.db, who, ctx.tokens)
