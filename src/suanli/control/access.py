"""How a renter reaches an instance's services: the port proxy's addresses, the signed
pass its browser cookie holds, and JupyterLab started behind it on images that have it.

Every published port has an origin of its own, ``http://ID-PORT.DOMAIN:PROXY_PORT/``
(what RunPod and vast.ai do): a page served by one instance runs its scripts on that
origin only, so it can neither read another instance's pages nor ride the browser
credentials the user holds for them (the cookie is host-only). The path form
``/proxy/instances/ID/PORT/`` stays for API clients and takes only a bearer header.

The cookie holds a *pass*, not the user's API token: an HMAC over (token id, instance,
port, expiry) with a server secret kept in the data dir. A pass leaked by the service it
fronts (the service never sees it: the proxy strips it, but it is still a bearer
credential) opens that one port until it expires, and revoking the token that issued it
revokes it. These helpers live below the API because the launcher needs
``jupyter_command`` too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from suanli.bounds import DB_INT_MAX
from suanli.control.auth import Principal, hash_token, principal_of, usable
from suanli.db.models import ApiToken, User
from suanli.db.session import Database

JUPYTER_PORT = 8888
DEFAULT_PROXY_DOMAIN = "localhost"  #: browsers resolve ``*.localhost`` to loopback themselves
PASS_TTL_S = 24 * 3600  #: how long a browser's pass for one port lasts
SECRET_FILE = "proxy-secret"
_PASS_VERSION = "p1"


# -- addresses ------------------------------------------------------------------------------


def port_host(instance_id: int, port: int, domain: str) -> str:
    """The host name of one published port: ``ID-PORT.DOMAIN``."""
    return f"{instance_id}-{port}.{domain}"


def port_url(scheme: str, domain: str, proxy_port: int | None, instance_id: int, port: int) -> str:
    """What the instance listing shows for a published port (the service's root)."""
    where = port_host(instance_id, port, domain) + (f":{proxy_port}" if proxy_port is not None else "")
    return f"{scheme}://{where}/"


_HOST = re.compile(r"^([0-9]{1,12})-([0-9]{1,5})\.(.+?)(?::[0-9]{1,5})?$")


def parse_port_host(host: str | None, domain: str) -> tuple[int, int] | None:
    """``(instance id, port)`` of a ``Host`` header ``ID-PORT.DOMAIN[:N]``, else None."""
    m = _HOST.match((host or "").strip().lower())
    if m is None or m.group(3) != domain.lower().rstrip("."):
        return None
    instance_id, port = int(m.group(1)), int(m.group(2))
    return (instance_id, port) if 0 < instance_id <= DB_INT_MAX and 0 < port < 65536 else None


def proxy_path(instance_id: int, port: int) -> str:
    """The API clients' path prefix of a port (bearer header only), with a trailing slash."""
    return f"/proxy/instances/{instance_id}/{port}/"


def jupyter_command() -> str:
    """JupyterLab in the background of an instance's keeper, at ``/`` of its port's own
    host. No token of its own: the proxy admits only users who may see the instance."""
    return (
        f"jupyter lab --allow-root --no-browser --ip=0.0.0.0 --port={JUPYTER_PORT} --ServerApp.root_dir=/workspace "
        "--ServerApp.base_url=/ --ServerApp.token= "
        "--ServerApp.password= --ServerApp.allow_remote_access=True > /var/log/jupyterlab.log 2>&1 &"
    )


# -- the signed pass ------------------------------------------------------------------------


def load_secret(data_dir: Path) -> bytes:
    """The server's pass-signing key, ``DATA_DIR/proxy-secret`` (0600), made on first use.
    Deleting it (and restarting) logs every browser out of every port."""
    path = Path(data_dir) / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = bytes.fromhex(path.read_text().strip())
        if len(key) < 32:
            raise ValueError(f"{path} holds no 32-byte key; delete it to make a new one") from None
        return key
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex() + "\n")
    return key


def _sign(secret: bytes, body: str) -> str:
    mac = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def make_pass(secret: bytes, token_id: int, instance_id: int, port: int, expires: int) -> str:
    """``p1.TOKEN_ID.INSTANCE.PORT.EXPIRES.MAC`` (cookie-safe characters only)."""
    body = f"{_PASS_VERSION}.{token_id}.{instance_id}.{port}.{expires}"
    return f"{body}.{_sign(secret, body)}"


def check_pass(secret: bytes, value: str, instance_id: int, port: int, now: float) -> int | None:
    """The token id of a pass good for this port now, or None (forged, expired, another port)."""
    if not value.isascii() or len(value) > 200:
        return None
    body, _, mac = value.rpartition(".")
    fields = body.split(".")
    if len(fields) != 5 or fields[0] != _PASS_VERSION or not all(f.isdigit() for f in fields[1:]):
        return None
    if not hmac.compare_digest(mac, _sign(secret, body)):
        return None
    token_id, inst, prt, expires = (int(f) for f in fields[1:])
    if (inst, prt) != (instance_id, port) or expires <= now:
        return None
    return token_id


@dataclass(frozen=True)
class Issued:
    who: Principal
    token_id: int


def token_owner(db: Database, token: str) -> Issued | None:
    """The usable API token ``token`` (its id, for a pass) and its user, or None."""
    with db.sessions() as s:
        row = s.execute(
            select(ApiToken, User)
            .join(User, User.id == ApiToken.user_id)
            .where(ApiToken.token_hash == hash_token(token), usable())
        ).first()
        if row is None:
            return None
        tok, user = row
        return Issued(principal_of(user, tok), tok.id)


def pass_owner(db: Database, token_id: int) -> Principal | None:
    """Who a pass speaks for: the user of its token while that token is usable (not
    revoked or expired, its user not disabled)."""
    with db.sessions() as s:
        row = s.execute(
            select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.id == token_id, usable())
        ).first()
        return None if row is None else principal_of(row[1], row[0])
