"""Tenants and users: made, listed and disabled by admins; console passwords and
TOTP second factors (RFC 6238); sign-in, which trades a password (and a code) for a
session token that expires.

Passwords are kept as argon2id hashes (``argon2-cffi``); a TOTP secret is sealed with
the server's key (``Sealer``: ``control.secrets.Keyring``) and opened only to check a
code. A tenant may require the second factor (``require_2fa``): its people then sign in
with password and code, and one who has not enrolled yet gets a session that can only
enrol (``ENROL_SCOPES``).
"""

from __future__ import annotations

import functools
import hmac
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

import argon2
import pyotp
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.billing.store import tenant_id_of
from suanli.bounds import parse_id
from suanli.control.auth import ROLES, Principal, TokenCache, mint
from suanli.db import keyset
from suanli.db.clock import utcnow
from suanli.db.models import ApiToken, Tenant, User
from suanli.db.session import Database
from suanli.errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized

SESSION_HOURS = 12
MIN_PASSWORD = 10
#: what a session that must enrol a second factor may reach: who am I, the enrolment, signing out
ENROL_SCOPES = ["route:/v1/me", "route:/v1/sessions"]
_hasher = argon2.PasswordHasher()


@functools.cache
def _dummy() -> str:
    """Checked against when the user does not exist, so both answers take as long. Made on
    first use, not at import: a hash costs 0.15 s of CPU, and every process that imports
    the server (CLI runs, workers) paid it."""
    return _hasher.hash("not a password of anyone's")


class Sealer(Protocol):
    def seal(self, plaintext: str, aad: str) -> str: ...
    def unseal(self, sealed: str, aad: str) -> str: ...
    def reseal(self, sealed: str, aad: str) -> str: ...


def _totp_aad(user_id: int) -> str:
    return f"user:{user_id}:totp"


# -- tenants ---------------------------------------------------------------------------


def create_tenant(db: Database, who: Principal, name: str, require_2fa: bool = False) -> Tenant:
    who.require("admin")
    try:
        with db.transaction() as s:
            t = Tenant(name=name, require_2fa=require_2fa)
            s.add(t)
            s.flush()
            return t
    except IntegrityError:
        raise Conflict(f"tenant {name!r} exists", code="exists") from None


def list_tenants(db: Database, who: Principal, page: keyset.Page | None = None) -> list[Tenant]:
    who.require("admin")
    with db.sessions() as s:
        return list(s.scalars(keyset.select_page(select(Tenant), [Tenant.id], page)))


def set_tenant_2fa(db: Database, who: Principal, tenant: str, required: bool) -> Tenant:
    who.require("admin")
    with db.transaction() as s:
        t = _tenant(s, tenant)
        t.require_2fa = required
        return t


def set_tenant_autostop(db: Database, who: Principal, tenant: str, window_s: int | None) -> Tenant:
    """The tenant's default idle auto-stop window (``control.autostop``); None: none."""
    who.require("admin", "operator")
    with db.transaction() as s:
        t = _tenant(s, tenant)
        t.autostop_s = window_s
        return t


def _tenant(s: Session, tenant: str) -> Tenant:
    t = s.get(Tenant, tenant_id_of(s, tenant))
    assert t is not None
    return t


# -- users -----------------------------------------------------------------------------


def create_user(
    db: Database, who: Principal, name: str, role: str, tenant: str | None, password: str | None = None
) -> tuple[User, str]:
    """A new user and their first token (returned once)."""
    who.require("admin")
    if role not in ROLES:
        raise Invalid(f"role: one of {', '.join(ROLES)}")
    hashed = _hash_password(password) if password is not None else None
    try:
        with db.transaction() as s:
            tenant_id = _tenant(s, tenant).id if tenant else who.tenant_id
            user = User(tenant_id=tenant_id, name=name, role=role, password_hash=hashed)
            s.add(user)
            s.flush()
            _, token = mint(s, user, name="first token")
            return user, token
    except IntegrityError:
        raise Conflict(f"user {name!r} exists", code="exists") from None


def list_users(db: Database, who: Principal, tenant: str | None = None, page: keyset.Page | None = None) -> list[User]:
    who.require("admin", "operator")
    with db.sessions() as s:
        stmt = select(User)
        if tenant:
            stmt = stmt.where(User.tenant_id == _tenant(s, tenant).id)
        return list(s.scalars(keyset.select_page(stmt, [User.id], page)))


def _user(s: Session, user: str) -> User:
    """The user ``user`` names: its id (``bounds.parse_id``), else its name."""
    n = parse_id(user)
    row = s.get(User, n) if n is not None else s.scalar(select(User).where(User.name == user))
    if row is None:
        raise NotFound(f"no user {user!r}")
    return row


def get_user(db: Database, who: Principal, user: str) -> User:
    who.require("admin", "operator")
    with db.sessions() as s:
        return _user(s, user)


def set_disabled(db: Database, who: Principal, user: str, disabled: bool, cache: TokenCache | None = None) -> User:
    """A disabled user's tokens and sign-ins are refused at once; their work is left
    running (stop it, or the tenant, separately)."""
    who.require("admin")
    with db.transaction() as s:
        row = _user(s, user)
        if row.id == who.user_id and disabled:
            raise Invalid("you cannot disable yourself")
        row.disabled = disabled
    if cache is not None:
        cache.forget()
    return row


# -- passwords -------------------------------------------------------------------------


def _hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise Invalid(f"password: at least {MIN_PASSWORD} characters")
    if len(password) > 1024:
        raise Invalid("password: at most 1024 characters")
    return _hasher.hash(password)


def set_password(db: Database, who: Principal, user: str | None, password: str, current: str | None = None) -> User:
    """Your own password (give the current one, if you have one), or, as an admin,
    anyone's."""
    hashed = _hash_password(password)
    with db.transaction() as s:
        row = _user(s, user) if user else s.get(User, who.user_id)
        assert row is not None
        if row.id != who.user_id:
            who.require("admin")
        elif row.password_hash is not None and not _matches(row.password_hash, current or ""):
            raise Forbidden("the current password is wrong")
        row.password_hash = hashed
        return row


def _matches(hashed: str | None, password: str) -> bool:
    try:
        return _hasher.verify(hashed or _dummy(), password) and hashed is not None
    except argon2.exceptions.VerificationError:
        return False
    except argon2.exceptions.InvalidHashError:
        return False


# -- the second factor -----------------------------------------------------------------


@dataclass(frozen=True)
class Enrolment:
    secret: str
    uri: str


def enrol_2fa(db: Database, who: Principal, sealer: Sealer, issuer: str = "Suanli") -> Enrolment:
    """A new TOTP secret for you, not yet in force: confirm it with a code from your
    authenticator app (``confirm_2fa``). Enrolling again replaces an unconfirmed one; a
    confirmed one is replaced only after ``disable_2fa``."""
    with db.transaction() as s:
        user = s.get(User, who.user_id)
        assert user is not None
        if user.totp_enabled:
            raise Conflict("two-factor sign-in is on already; turn it off first to enrol a new device", code="exists")
        secret = pyotp.random_base32()
        user.totp_secret = sealer.seal(secret, _totp_aad(user.id))
        return Enrolment(secret, pyotp.TOTP(secret).provisioning_uri(name=user.name, issuer_name=issuer))


def confirm_2fa(db: Database, who: Principal, sealer: Sealer, code: str) -> None:
    with db.transaction() as s:
        user = s.get(User, who.user_id)
        assert user is not None
        if user.totp_secret is None:
            raise Invalid("enrol first (POST /v1/me/2fa)")
        if not _code_ok(user, sealer, code):
            raise Forbidden("that code is not right (check the device's clock)")
        user.totp_enabled = True


def disable_2fa(db: Database, who: Principal, sealer: Sealer, user: str | None = None, code: str | None = None) -> None:
    """Turn your second factor off (with a current code), or, as an admin, anyone's
    (a lost phone)."""
    with db.transaction() as s:
        row = _user(s, user) if user else s.get(User, who.user_id)
        assert row is not None
        if row.id != who.user_id:
            who.require("admin")
        elif row.totp_enabled and not _code_ok(row, sealer, code or ""):
            raise Forbidden("that code is not right")
        row.totp_secret, row.totp_enabled = None, False


def reseal_totp(db: Database, sealer: Sealer) -> int:
    """Every stored TOTP secret under the active key (key rotation, ``control.rekey``)."""
    with db.sessions() as s:
        ids = list(s.scalars(select(User.id).where(User.totp_secret.is_not(None))))
    for uid in ids:
        with db.transaction() as s:
            user = s.get(User, uid)
            if user is not None and user.totp_secret is not None:
                user.totp_secret = sealer.reseal(user.totp_secret, _totp_aad(uid))
    return len(ids)


def _code_ok(user: User, sealer: Sealer, code: str) -> bool:
    """A code of this time step or a neighbour's (a clock off by up to 30 s), not older
    than one already accepted: a code seen once, over a shoulder or in a log, is spent."""
    if user.totp_secret is None or not (code.isascii() and code.isdigit() and len(code) == 6):
        return False
    totp = pyotp.TOTP(sealer.unseal(user.totp_secret, _totp_aad(user.id)))
    now = utcnow()
    for drift in (0, -1, 1):
        at = now + timedelta(seconds=drift * totp.interval)
        step = totp.timecode(at)
        if hmac.compare_digest(totp.at(at), code) and step > (user.totp_last_step or -1):
            user.totp_last_step = step  # the caller's transaction commits it
            return True
    return False


# -- sign-in ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SignedIn:
    token: str
    token_id: int
    expires_at: str
    #: the tenant requires a second factor this user has not enrolled: the session may only enrol
    must_enrol_2fa: bool = False


def sign_in(db: Database, sealer: Sealer, name: str, password: str, code: str | None = None) -> SignedIn:
    """A console session for a person: password, and a TOTP code when they have one
    (or their tenant requires one). Every refusal reads the same, so it tells nothing
    about which part was wrong, or whether the user exists."""
    refused = Unauthorized("wrong user name, password or code")
    with db.transaction() as s:
        row = s.execute(select(User, Tenant).join(Tenant, Tenant.id == User.tenant_id).where(User.name == name)).first()
        user, tenant = row if row is not None else (None, None)
        if not _matches(user.password_hash if user else None, password) or user is None or tenant is None:
            raise refused
        if user.disabled:
            raise refused
        must_enrol = tenant.require_2fa and not user.totp_enabled
        if user.totp_enabled and not _code_ok(user, sealer, code or ""):
            raise refused
        expires = utcnow() + timedelta(hours=SESSION_HOURS)
        row_token, token = mint(
            s, user, name="console sign-in", kind="session", scopes=ENROL_SCOPES if must_enrol else [], expires_at=expires
        )
        return SignedIn(token, row_token.id, expires.isoformat(), must_enrol)


def sign_out(db: Database, who: Principal, cache: TokenCache | None = None) -> None:
    """End this session: its token is revoked."""
    if who.token_id is None:
        return
    with db.transaction() as s:
        s.execute(update(ApiToken).where(ApiToken.id == who.token_id).values(revoked=True, revoked_at=utcnow()))
    if cache is not None:
        cache.forget()
