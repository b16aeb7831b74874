"""Who is asking: API tokens to principals.

A token is ``sl_`` + 32 random bytes (URL-safe); only its SHA-256 is stored,
which is enough for high-entropy secrets and makes lookup an indexed equality.
Making, listing and revoking tokens is ``control.tokens``; tenants, users, passwords
and second factors are ``control.accounts``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from suanli.db.clock import utcnow
from suanli.db.models import ApiToken, Tenant, User
from suanli.db.session import Database
from suanli.errors import Forbidden, Unauthorized

ROLES = ("admin", "operator", "member")


@dataclass(frozen=True)
class Principal:
    """Who a request speaks for, and what its token lets it do.

    ``scopes`` narrow the user's rights, never widen them: ``read`` allows only GET
    (and HEAD); ``route:/v1/jobs`` allows only paths under it (several route scopes:
    any of them). ``pinned``: the token acts inside tenant ``tenant_id`` only, with a
    member's rights, whatever its user's role (an operator's token for one customer)."""

    user_id: int
    tenant_id: int
    name: str
    role: str
    token_id: int | None = None
    scopes: tuple[str, ...] = ()
    pinned: bool = False

    @property
    def sees_all(self) -> bool:
        return self.role in ("admin", "operator") and not self.pinned

    def require(self, *roles: str) -> None:
        if self.pinned and "member" not in roles:
            raise Forbidden(
                f"this token is limited to one tenant (id {self.tenant_id}); this needs the {' or '.join(roles)} role"
            )
        if self.role not in roles:
            raise Forbidden(f"this needs the {' or '.join(roles)} role; you are {self.role}")

    def allows(self, method: str, path: str) -> bool:
        """May this token make ``method path`` at all (before the route's own checks)?"""
        if "read" in self.scopes and method not in ("GET", "HEAD"):
            return False
        routes = [s.removeprefix("route:") for s in self.scopes if s.startswith("route:")]
        return not routes or any(path == r or path.startswith(r.rstrip("/") + "/") for r in routes)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(session: Session, user: User, **columns: Any) -> tuple[ApiToken, str]:
    """A new token row for ``user`` (``columns``: name, kind, scopes, tenant_id,
    expires_at) and the token itself, which is never stored."""
    token = "sl_" + secrets.token_urlsafe(32)
    row = ApiToken(user_id=user.id, token_hash=hash_token(token), prefix=token[:8], **columns)
    session.add(row)
    session.flush()
    return row, token


def usable() -> ColumnElement[bool]:
    """The WHERE clause of a token that may be used now: not revoked, not expired, and
    its user not disabled (join ``User`` on ``ApiToken.user_id``)."""
    return and_(
        ApiToken.revoked.is_(False),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > utcnow()),
        User.disabled.is_(False),
    )


def principal_of(user: User, token: ApiToken) -> Principal:
    pinned = token.tenant_id is not None
    return Principal(
        user.id,
        token.tenant_id if token.tenant_id is not None else user.tenant_id,
        user.name,
        user.role,
        token_id=token.id,
        scopes=tuple(token.scopes or ()),
        pinned=pinned,
    )


class TokenCache:
    """Recently verified tokens (by hash) for a few seconds: saves a query per
    request under load. Only successes are cached, never past the token's expiry;
    whatever revokes a token or disables a user clears the cache (``forget``), so a
    revoked token stops working at once in this process, and in the server's other API
    worker processes (each has its own cache) within ``ttl_s``."""

    def __init__(self, ttl_s: float = 10.0, size: int = 10_000) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._hits: dict[str, tuple[float, Principal]] = {}

    def get(self, key: str) -> Principal | None:
        hit = self._hits.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: str, who: Principal, expires_in_s: float | None = None) -> None:
        if len(self._hits) >= self.size:
            self._hits.clear()
        ttl = self.ttl_s if expires_in_s is None else min(self.ttl_s, expires_in_s)
        self._hits[key] = (time.monotonic() + ttl, who)

    def forget(self) -> None:
        self._hits.clear()


def authenticate(db: Database, token: str | None, cache: TokenCache | None = None) -> Principal:
    if not token:
        raise Unauthorized("missing bearer token (suanli login, or SUANLI_TOKEN)")
    key = hash_token(token)
    if cache is not None and (who := cache.get(key)) is not None:
        return who
    who, expires_in_s = _lookup(db, key)
    if cache is not None:
        cache.put(key, who, expires_in_s)
    return who


def _lookup(db: Database, token_hash: str) -> tuple[Principal, float | None]:
    with db.reads() as s:
        row = s.execute(
            select(User, ApiToken).join(ApiToken, ApiToken.user_id == User.id).where(ApiToken.token_hash == token_hash, usable())
        ).first()
        if row is None:
            raise Unauthorized("invalid, expired or revoked token")
        user, token = row
    now = utcnow()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:  # a write a minute, at most
        with db.transaction() as s:
            s.execute(update(ApiToken).where(ApiToken.id == token.id).values(last_used_at=now))
    left = (token.expires_at - now).total_seconds() if token.expires_at else None
    return principal_of(user, token), left


#: the operator's own tenant, made on first start
DEFAULT_TENANT = "default"


def bootstrap_admin(db: Database, data_dir: Path) -> str | None:
    """On an empty database: create tenant ``default`` and user ``admin``, write
    the token to ``<data-dir>/admin-token`` (0600) and return it; else None."""
    with db.transaction() as s:
        if s.scalar(select(func.count()).select_from(User)):
            return None
        tenant = Tenant(name=DEFAULT_TENANT)
        s.add(tenant)
        s.flush()
        admin = User(tenant_id=tenant.id, name="admin", role="admin")
        s.add(admin)
        s.flush()
        _, token = mint(s, admin, name="first start")
    path = Path(data_dir) / "admin-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token
