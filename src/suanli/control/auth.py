"""Tenants, users and API tokens.

A token is ``sl_`` + 32 random bytes (URL-safe); only its SHA-256 is stored,
which is enough for high-entropy secrets and makes lookup an indexed equality.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.db.models import ApiToken, Tenant, User
from suanli.db.session import Database
from suanli.errors import Conflict, Forbidden, NotFound, Unauthorized

ROLES = ("admin", "operator", "member")


@dataclass(frozen=True)
class Principal:
    user_id: int
    tenant_id: int
    name: str
    role: str

    @property
    def sees_all(self) -> bool:
        return self.role in ("admin", "operator")

    def require(self, *roles: str) -> None:
        if self.role not in roles:
            raise Forbidden(f"this needs the {' or '.join(roles)} role; you are {self.role}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _issue(session: Session, user: User) -> str:
    token = "sl_" + secrets.token_urlsafe(32)
    session.add(ApiToken(user_id=user.id, token_hash=hash_token(token), prefix=token[:8]))
    return token


class TokenCache:
    """Recently verified tokens (by hash) for a few seconds: saves a query per
    request under load. Only successes are cached; a revoked token stops working
    within ``ttl_s``."""

    def __init__(self, ttl_s: float = 10.0, size: int = 10_000) -> None:
        self.ttl_s, self.size = ttl_s, size
        self._hits: dict[str, tuple[float, Principal]] = {}

    def get(self, key: str) -> Principal | None:
        hit = self._hits.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: str, who: Principal) -> None:
        if len(self._hits) >= self.size:
            self._hits.clear()
        self._hits[key] = (time.monotonic() + self.ttl_s, who)


def authenticate(db: Database, token: str | None, cache: TokenCache | None = None) -> Principal:
    if not token:
        raise Unauthorized("missing bearer token (suanli login, or SUANLI_TOKEN)")
    key = hash_token(token)
    if cache is not None and (who := cache.get(key)) is not None:
        return who
    who = _lookup(db, key)
    if cache is not None:
        cache.put(key, who)
    return who


def _lookup(db: Database, token_hash: str) -> Principal:
    with db.sessions() as s:
        row = s.execute(
            select(User)
            .join(ApiToken, ApiToken.user_id == User.id)
            .where(ApiToken.token_hash == token_hash, ApiToken.revoked.is_(False))
        ).scalar_one_or_none()
        if row is None:
            raise Unauthorized("invalid or revoked token")
        return Principal(row.id, row.tenant_id, row.name, row.role)


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
        token = _issue(s, admin)
    path = Path(data_dir) / "admin-token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def create_tenant(db: Database, who: Principal, name: str) -> Tenant:
    who.require("admin")
    try:
        with db.transaction() as s:
            t = Tenant(name=name)
            s.add(t)
            s.flush()
            return t
    except IntegrityError:
        raise Conflict(f"tenant {name!r} exists", code="exists") from None


def list_tenants(db: Database, who: Principal) -> list[Tenant]:
    who.require("admin")
    with db.sessions() as s:
        return list(s.scalars(select(Tenant).order_by(Tenant.id)))


def create_user(db: Database, who: Principal, name: str, role: str, tenant: str | None) -> tuple[User, str]:
    """A new user and their first token (returned once)."""
    who.require("admin")
    try:
        with db.transaction() as s:
            tenant_id = who.tenant_id
            if tenant:
                t = s.scalar(select(Tenant).where(Tenant.name == tenant))
                if t is None:
                    raise NotFound(f"no tenant {tenant!r}")
                tenant_id = t.id
            user = User(tenant_id=tenant_id, name=name, role=role)
            s.add(user)
            s.flush()
            return user, _issue(s, user)
    except IntegrityError:
        raise Conflict(f"user {name!r} exists", code="exists") from None


def new_token(db: Database, who: Principal) -> str:
    with db.transaction() as s:
        user = s.get(User, who.user_id)
        assert user is not None
        return _issue(s, user)
