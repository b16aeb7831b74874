"""SSH public keys per user: what opens that user's instances, nobody else's.

A key is stored only after ``cryptography`` parsed it, and stored re-serialised
("type base64 comment"): what reaches an ``authorized_keys`` file is always one
well-formed line, never the caller's text, so no ``command=``/``from=`` option,
no second line and no private key can slip through. An instance gets the keys
of its owner only, which is what refuses another user's or another tenant's key.

Keys live in the database; ``push_keys`` tells running instances when they change.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.backends.base import Backend, Handle, SupportsSsh
from suanli.bounds import MAX_KEY_TEXT as MAX_TEXT
from suanli.bounds import looks_private, parse_id
from suanli.control.auth import Principal
from suanli.db import keyset
from suanli.db.models import Instance, SshKey
from suanli.db.session import Database
from suanli.errors import Conflict, Invalid, NotFound

log = logging.getLogger(__name__)

ACCEPTED = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")
MIN_RSA_BITS = 2048
NAME_MAX = 100  #: the column's width

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ParsedKey:
    type: str
    line: str  #: normalised "type base64 comment" (comment omitted when empty)
    fingerprint: str  #: ``SHA256:...`` as ``ssh-keygen -lf`` prints it
    comment: str


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a key blob: base64 without padding."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def key_type(line: str) -> str:
    return line.split(" ", 1)[0]


def parse(text: str) -> ParsedKey:
    """One OpenSSH public key line, validated; ``Invalid`` with a reason otherwise."""
    if len(text) > MAX_TEXT:
        raise Invalid(f"public_key: {len(text)} characters is not an SSH public key (at most {MAX_TEXT})")
    if looks_private(text):
        raise Invalid(
            "public_key: this looks like a PRIVATE key; nothing was stored. Send the public key "
            "(the .pub file, e.g. ~/.ssh/id_ed25519.pub) and keep the private key to yourself",
            code="private_key",
        )
    lines = [ln.strip() for ln in text.lstrip("\ufeff").splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines:
        raise Invalid("public_key: empty; paste one line such as 'ssh-ed25519 AAAA... you@host'")
    if len(lines) > 1:
        raise Invalid(f"public_key: {len(lines)} lines; add one key at a time")
    fields = lines[0].split(None, 2)
    if fields[0].startswith("---- BEGIN SSH2"):
        raise Invalid("public_key: this is an RFC 4716 (SSH2) key; convert it with 'ssh-keygen -i -f FILE'")
    if fields[0] not in ACCEPTED:
        what = (
            f"key type {fields[0]!r} is not accepted"
            if _looks_like_type(fields[0])
            else "not an OpenSSH public key line (expected 'TYPE BASE64 [COMMENT]', without options)"
        )
        raise Invalid(f"public_key: {what}; accepted types: {', '.join(ACCEPTED)} (RSA of at least {MIN_RSA_BITS} bits)")
    if len(fields) < 2:
        raise Invalid("public_key: the key's base64 part is missing")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            key = serialization.load_ssh_public_key(f"{fields[0]} {fields[1]}".encode())
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise Invalid(f"public_key: not a valid {fields[0]} key ({exc})") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise Invalid(
            f"public_key: this RSA key has {key.key_size} bits; at least {MIN_RSA_BITS} are needed "
            "(or use 'ssh-keygen -t ed25519')"
        )
    if not isinstance(key, (rsa.RSAPublicKey, ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey)):
        raise Invalid(f"public_key: key type {fields[0]!r} is not accepted")
    kind, b64 = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode().split(" ")[:2]
    comment = " ".join(_CONTROL.sub(" ", fields[2]).split()) if len(fields) > 2 else ""
    line = f"{kind} {b64} {comment}" if comment else f"{kind} {b64}"
    return ParsedKey(kind, line, fingerprint(base64.b64decode(b64)), comment)


def _looks_like_type(word: str) -> bool:
    return bool(re.fullmatch(r"(ssh|ecdsa|sk|rsa)-[a-z0-9@.-]+", word))


def add(db: Database, who: Principal, text: str, name: str = "", on_change: Callable[[int], None] | None = None) -> SshKey:
    """Store one public key for ``who``; a key they already have is ``Conflict`` ``exists``."""
    parsed = parse(text)
    name = " ".join(_CONTROL.sub(" ", name or parsed.comment).split())[:NAME_MAX]
    try:
        with db.transaction() as s:
            dup = s.scalar(select(SshKey.id).where(SshKey.user_id == who.user_id, SshKey.fingerprint == parsed.fingerprint))
            if dup is not None:
                raise Conflict(f"you already have this key ({parsed.fingerprint}, id {dup})", code="exists")
            row = SshKey(user_id=who.user_id, name=name, public_key=parsed.line, fingerprint=parsed.fingerprint)
            s.add(row)
            s.flush()
    except IntegrityError:  # the same key added twice at once: the unique constraint decides
        raise Conflict(f"you already have this key ({parsed.fingerprint})", code="exists") from None
    if on_change is not None:
        on_change(who.user_id)
    return row


def list_(db: Database, who: Principal, page: keyset.Page | None = None) -> list[SshKey]:
    """``who``'s own keys: a key opens only its owner's instances, so nobody else needs to see it."""
    with db.sessions() as s:
        return list(s.scalars(keyset.select_page(select(SshKey).where(SshKey.user_id == who.user_id), [SshKey.id], page)))


def remove(db: Database, who: Principal, key: int | str, on_change: Callable[[int], None] | None = None) -> SshKey:
    """Delete one of ``who``'s keys by id or fingerprint; anyone else's is ``NotFound``."""
    with db.transaction() as s:
        q = select(SshKey).where(SshKey.user_id == who.user_id)
        text = str(key).strip()
        if (key_id := parse_id(text)) is not None:
            q = q.where(SshKey.id == key_id)
        elif text.startswith("SHA256:"):
            q = q.where(SshKey.fingerprint == text)
        else:
            raise NotFound(f"no key {text!r}: give its id or its SHA256:... fingerprint (suanli keys list)")
        row = s.scalar(q)
        if row is None:
            raise NotFound(f"no key {text}")
        s.delete(row)
    if on_change is not None:
        on_change(who.user_id)
    return row


def authorized_keys(session: Session, user_id: int) -> str:
    """The ``authorized_keys`` text of one user: one normalised line per key, "" for none."""
    rows = session.scalars(select(SshKey.public_key).where(SshKey.user_id == user_id).order_by(SshKey.id))
    return "".join(f"{line}\n" for line in rows)


def push_keys(db: Database, backends: dict[str, Backend], user_id: int) -> int:
    """Give the user's running instances their new key set; returns how many took it.

    A backend that cannot (no ``SupportsSsh``) is skipped: its instances get the keys at
    their next start. Failures are logged, not raised: the key change itself is done."""
    with db.sessions() as s:
        text = authorized_keys(s, user_id)
        rows = s.execute(
            select(Instance.id, Instance.handles).where(Instance.user_id == user_id, Instance.state == "running")
        ).all()
    pushed = 0
    for instance_id, handles in rows:
        if not handles:
            continue
        try:
            h = Handle.from_json(handles[0])
            backend = backends.get(h.backend)
            if not isinstance(backend, SupportsSsh):
                continue
            backend.set_authorized_keys(h, text)
            pushed += 1
        except Exception:  # noqa: BLE001 - one broken instance must not stop the others
            log.exception("could not update the SSH keys of instance %s", instance_id)
    return pushed
