"""API tokens: made with a name, scopes and an expiry, listed, revoked.

A token made by a scoped token is at most as strong as its maker: it keeps the maker's
scopes, tenant pin and expiry, and can only add to the first two and shorten the last.
Each user holds at most ``MAX_ACTIVE`` usable tokens, so a leaked token cannot mint
without limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from suanli.billing.store import find_tenant
from suanli.control.auth import Principal, TokenCache, mint, usable
from suanli.db import keyset
from suanli.db.clock import utcnow
from suanli.db.models import ApiToken, User
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound

MAX_ACTIVE = 100
MAX_DAYS = 3660  #: ten years: the longest expiry a token may be given
_ROUTE = re.compile(r"^route:/v1(/[A-Za-z0-9_\-]+)*/?$")


@dataclass(frozen=True)
class TokenRequest:
    name: str = ""
    scopes: tuple[str, ...] = ()
    expires_in_days: float | None = None
    #: pin the token to this tenant (name or id): it acts inside it only, as a member
    tenant: str | None = None


def check_scopes(scopes: tuple[str, ...]) -> tuple[str, ...]:
    for sc in scopes:
        if sc != "read" and not _ROUTE.match(sc):
            raise Invalid(f"scope {sc!r}: use 'read' (GET only) or 'route:/v1/PATH' (only paths under it)")
    return tuple(dict.fromkeys(scopes))


def create(db: Database, who: Principal, req: TokenRequest, kind: str = "api") -> tuple[ApiToken, str]:
    scopes = check_scopes(tuple(who.scopes) + tuple(req.scopes))
    if req.expires_in_days is not None and not (0 < req.expires_in_days <= MAX_DAYS):
        raise Invalid(f"expires_in_days: between 0 and {MAX_DAYS}")
    with db.transaction() as s:
        user = s.get(User, who.user_id)
        if user is None:
            raise NotFound("your user is gone")
        mine = s.scalar(select(ApiToken).where(ApiToken.id == who.token_id)) if who.token_id else None
        expires = utcnow() + timedelta(days=req.expires_in_days) if req.expires_in_days is not None else None
        if mine is not None and mine.expires_at is not None and (expires is None or expires > mine.expires_at):
            expires = mine.expires_at  # never outlive the token that made it
        tenant_id = _pin(s, who, req.tenant)
        active = s.scalar(
            select(func.count())
            .select_from(ApiToken)
            .join(User, User.id == ApiToken.user_id)
            .where(ApiToken.user_id == user.id, usable())
        )
        if (active or 0) >= MAX_ACTIVE:
            raise Conflict(
                f"you hold {active} usable tokens, the most allowed; revoke some (suanli tokens revoke ID)",
                code="too_many_tokens",
            )
        return mint(s, user, name=req.name, kind=kind, scopes=list(scopes), tenant_id=tenant_id, expires_at=expires)


def _pin(s: Session, who: Principal, tenant: str | None) -> int | None:
    if who.pinned:
        if tenant is not None and find_tenant(s, tenant) != who.tenant_id:
            raise NotFound(f"no tenant {tenant!r}")
        return who.tenant_id
    if tenant is None:
        return None
    tid = find_tenant(s, tenant)
    if tid is None or (not who.sees_all and tid != who.tenant_id):
        raise NotFound(f"no tenant {tenant!r}")  # the same answer for a tenant that is not yours
    return tid


def listing(db: Database, who: Principal, everyone: bool = False, page: keyset.Page | None = None) -> list[tuple[ApiToken, str]]:
    """Your tokens (an admin: everyone's, with ``everyone``), newest first, with their users' names."""
    if everyone:
        who.require("admin")
    stmt = select(ApiToken, User.name).join(User, User.id == ApiToken.user_id)
    if not everyone:
        stmt = stmt.where(ApiToken.user_id == who.user_id)
    with db.sessions() as s:
        return [(t, n) for t, n in s.execute(keyset.select_page(stmt, [ApiToken.id], page, descending=True))]


def revoke(db: Database, who: Principal, token_id: int, cache: TokenCache | None = None) -> ApiToken:
    """Revoke one of your tokens (an admin: anyone's). It is refused at once: the
    server's cache of verified tokens is cleared."""
    with db.transaction() as s:
        row = s.get(ApiToken, token_id)
        if row is None or (row.user_id != who.user_id and not (who.role == "admin" and not who.pinned)):
            raise NotFound(f"no token {token_id}")
        if not row.revoked:
            s.execute(update(ApiToken).where(ApiToken.id == token_id).values(revoked=True, revoked_at=utcnow()))
            row.revoked, row.revoked_at = True, utcnow()
    if cache is not None:
        cache.forget()
    return row


def state(t: ApiToken, now: datetime | None = None) -> str:
    if t.revoked:
        return "revoked"
    if t.expires_at is not None and t.expires_at <= (now or utcnow()):
        return "expired"
    return "active"
