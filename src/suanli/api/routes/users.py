"""Who am I, tenants, users and tokens."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from suanli.api.context import ServerContext
from suanli.api.deps import context, principal
from suanli.api.schemas import Me, TenantCreate, TenantOut, TokenOut, UserCreate, UserOut
from suanli.control import auth
from suanli.control.auth import Principal

router = APIRouter(prefix="/v1", tags=["users"])


@router.get("/me", response_model=Me)
def me(who: Principal = Depends(principal)) -> Me:
    return Me(id=who.user_id, name=who.name, role=who.role, tenant_id=who.tenant_id)


@router.post("/tokens", response_model=TokenOut, status_code=201)
def new_token(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> TokenOut:
    return TokenOut(token=auth.new_token(ctx.db, who))


@router.get("/tenants", response_model=list[TenantOut])
def tenants(ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> list[TenantOut]:
    return [TenantOut(id=t.id, name=t.name) for t in auth.list_tenants(ctx.db, who)]


@router.post("/tenants", response_model=TenantOut, status_code=201)
def create_tenant(body: TenantCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> TenantOut:
    t = auth.create_tenant(ctx.db, who, body.name)
    return TenantOut(id=t.id, name=t.name)


@router.post("/users", response_model=UserOut, status_code=201)
def create_user(body: UserCreate, ctx: ServerContext = Depends(context), who: Principal = Depends(principal)) -> UserOut:
    user, token = auth.create_user(ctx.db, who, body.name, body.role, body.tenant)
    return UserOut(id=user.id, name=user.name, role=user.role, tenant_id=user.tenant_id, token=token)
