"""Alerts: what a tenant should know now, as records and as signed webhook POSTs.

**Sources** (``scan``, read from what the platform already records, past a cursor kept in
``alert_cursor``, in the transaction that writes the alerts: each source row alerts once;
the first scan starts the cursor at the newest rows, so an upgraded server does not alert
its whole history):

==============  ==========================================================================
kind            from
==============  ==========================================================================
``idle``        an instance's idle auto-stop notice (event ``running -> noticed``, "idle since")
``autostop``    an instance stopped for idleness (event ``-> stopped``, "auto-stop")
``job_failed``  a job's event ``-> failed``
``node_down``   a node's event ``-> down``: to the operator's tenant and every tenant with
                work on it
``low_balance`` a billing notice "balance low" (``billing.funds.low_balance_alerts``)
``budget``      any other billing notice: a budget threshold crossed, a hard-cap notice or stop
==============  ==========================================================================

Each alert is also an event (kind ``alert``, its id, ``to_state`` its kind), so the event
log is one timeline.

**Delivery** (``deliver``, the alerts thread, never inside a transaction): each pending
alert of a tenant with a webhook is POSTed as JSON with ``X-Suanli-Signature:
sha256=<hex HMAC-SHA256 of the body under the webhook's secret>`` (GitHub's scheme), and
``X-Suanli-Event`` / ``X-Suanli-Delivery``. A 2xx answer delivers it; anything else
(status, refused connection, timeout) is retried with exponential backoff (5 s, 10 s,
20 s, ... at most 10 minutes) up to ``MAX_ATTEMPTS``, then marked ``failed`` with the last
error. A tenant without a webhook gets its alerts recorded (``delivery`` ``none``), shown in
the console and ``GET /v1/alerts``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets as pysecrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.billing.tables import Notice as BillingNotice
from suanli.control.auth import Principal
from suanli.control.secrets import Keyring
from suanli.db import keyset
from suanli.db.clock import utcnow
from suanli.db.models import Alert, AlertCursor, Allocation, Event, Instance, Job, Node, Tenant, TenantWebhook, User
from suanli.db.session import Database
from suanli.errors import Invalid, NotFound

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
FIRST_RETRY_S = 5.0
MAX_RETRY_S = 600.0
TIMEOUT_S = 5.0
SCAN_BATCH = 1000

#: what a POST is: (url, body, headers) -> HTTP status; raises on no answer
Post = Callable[[str, bytes, dict[str, str]], int]


def signature(secret: str, body: bytes) -> str:
    """The ``X-Suanli-Signature`` value: ``sha256=`` + hex HMAC-SHA256 of the exact body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_s(attempts: int) -> float:
    """The wait after the ``attempts``-th failed try."""
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** max(0, attempts - 1))


# -- webhooks ---------------------------------------------------------------------------------


def _aad(tenant_id: int) -> str:
    return f"webhook:{tenant_id}"


def _tenant_for(s: Session, who: Principal, tenant: str) -> Tenant:
    from suanli.billing.store import tenant_id_of

    t = s.get(Tenant, tenant_id_of(s, tenant))
    if t is None or (not who.sees_all and t.id != who.tenant_id):
        raise NotFound(f"no tenant {tenant!r}")
    return t


def _private(host: str) -> bool:
    """Whether ``host`` is, or resolves to, a loopback, private or link-local address."""
    try:
        addrs = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError, ValueError):
        return False  # unresolvable now: delivery will fail and say so
    for a in addrs:
        ip = ipaddress.ip_address(a.split("%")[0])
        if ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_reserved or ip.is_unspecified:
            return True
    return False


def check_url(url: str, may_reach_private: bool) -> str:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise Invalid(f"url: {url!r} is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(f"url: {url!r} is not an http(s) URL with a host")
    if len(url) > 2000:
        raise Invalid("url: longer than 2000 characters")
    if not may_reach_private and _private(parts.hostname):
        raise Invalid(
            f"url: {parts.hostname} is a loopback, private or link-local address; only an operator may send "
            "webhooks there (the server would POST into its own network)"
        )
    return url.strip()


def set_webhook(db: Database, keyring: Keyring, who: Principal, tenant: str, url: str, secret: str | None) -> tuple[str, str]:
    """Set a tenant's webhook (its members, or an operator); returns (url, secret): the secret
    made here when none is given, shown this once."""
    url = check_url(url, who.role in ("admin", "operator") and not who.pinned)
    if secret is not None and not 16 <= len(secret) <= 200:
        raise Invalid("secret: 16 to 200 characters (or none: one is made for you)")
    secret = secret or pysecrets.token_urlsafe(32)
    with db.transaction() as s:
        t = _tenant_for(s, who, tenant)
        row = s.get(TenantWebhook, t.id)
        if row is None:
            row = TenantWebhook(tenant_id=t.id, url=url, secret="")
            s.add(row)
        row.url, row.secret = url, keyring.seal(secret, _aad(t.id))
    return url, secret


def get_webhook(db: Database, who: Principal, tenant: str) -> str | None:
    with db.sessions() as s:
        t = _tenant_for(s, who, tenant)
        row = s.get(TenantWebhook, t.id)
        return row.url if row else None


def remove_webhook(db: Database, who: Principal, tenant: str) -> bool:
    with db.transaction() as s:
        t = _tenant_for(s, who, tenant)
        row = s.get(TenantWebhook, t.id)
        if row is None:
            return False
        s.delete(row)
        return True


def list_alerts(db: Database, who: Principal, tenant: str | None, page: keyset.Page) -> list[Alert]:
    """One page of alerts, newest first (``db.keyset``: one more than asked when more follow)."""
    with db.sessions() as s:
        q = select(Alert)
        if tenant is not None:
            q = q.where(Alert.tenant_id == _tenant_for(s, who, tenant).id)
        elif not who.sees_all:
            q = q.where(Alert.tenant_id == who.tenant_id)
        return list(s.scalars(keyset.select_page(q, [Alert.id], page, descending=True)))


# -- scan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _New:
    tenant_id: int
    kind: str
    object: str
    message: str


def _operator_tenant(s: Session) -> int | None:
    return s.scalar(select(User.tenant_id).where(User.role == "admin").order_by(User.id).limit(1))


def _from_event(s: Session, e: Event) -> list[_New]:
    if e.kind == "instance" and e.to_state in ("noticed", "stopped"):
        row = s.get(Instance, e.object_id)
        if row is None:
            return []
        if e.to_state == "noticed" and e.message.startswith("idle since"):
            return [_New(row.tenant_id, "idle", f"instance-{row.id}", e.message)]
        if e.to_state == "stopped" and "auto-stop" in e.message:
            return [_New(row.tenant_id, "autostop", f"instance-{row.id}", e.message)]
    if e.kind == "job" and e.to_state == "failed":
        job = s.get(Job, e.object_id)
        return [_New(job.tenant_id, "job_failed", f"job-{job.id}", e.message)] if job else []
    if e.kind == "node" and e.to_state == "down":
        node = s.get(Node, e.object_id)
        name = node.name if node else f"node-{e.object_id}"
        tenants = set(
            s.scalars(
                select(Allocation.tenant_id).where(Allocation.node_id == e.object_id, Allocation.ended_at.is_(None)).distinct()
            )
        )
        op = _operator_tenant(s)
        if op is not None:
            tenants.add(op)
        return [_New(t, "node_down", name, f"node {name} is down: {e.message}".rstrip(": ")) for t in sorted(tenants)]
    return []


def _from_notice(n: BillingNotice) -> _New:
    kind = "low_balance" if n.message.startswith("balance low") else "budget"
    return _New(n.tenant_id, kind, f"tenant-{n.tenant_id}", n.message)


def open_cursor(s: Session) -> bool:
    """Start alerting from now on, where no cursor is yet: past the newest event and
    notice, so a server upgraded to alerts does not alert its history. A server opens it
    as it starts, before any work runs (``api.server.bootstrap``): opened by the alerts
    thread's first scan instead, it skipped what happened before that scan, and on a
    loaded machine a job that failed in the server's first second was never alerted.
    True if it opened it."""
    if s.get(AlertCursor, 1) is not None:
        return False
    last_event = s.scalar(select(func.max(Event.id))) or 0
    last_notice = s.scalar(select(func.max(BillingNotice.id))) or 0
    try:
        with s.begin_nested():
            s.add(AlertCursor(id=1, last_event_id=last_event, last_notice_id=last_notice))
    except IntegrityError:  # another server starting on the same database opened it first
        return False
    return True


def scan(db: Database) -> int:
    """New alerts from the events and billing notices past the cursor; returns how many."""
    with db.transaction() as s:
        cur = s.get(AlertCursor, 1, with_for_update=True)
        if cur is None:  # a database no server started: from now on
            open_cursor(s)
            return 0
        new: list[_New] = []
        events = list(s.scalars(select(Event).where(Event.id > cur.last_event_id).order_by(Event.id).limit(SCAN_BATCH)))
        for e in events:
            new += _from_event(s, e)
        notices = list(
            s.scalars(
                select(BillingNotice).where(BillingNotice.id > cur.last_notice_id).order_by(BillingNotice.id).limit(SCAN_BATCH)
            )
        )
        new += [_from_notice(n) for n in notices]
        if events:
            cur.last_event_id = events[-1].id
        if notices:
            cur.last_notice_id = notices[-1].id
        hooked = set(s.scalars(select(TenantWebhook.tenant_id)))
        for a in new:
            row = Alert(
                tenant_id=a.tenant_id,
                kind=a.kind,
                object=a.object,
                message=a.message,
                delivery="pending" if a.tenant_id in hooked else "none",
            )
            s.add(row)
            s.flush()
            # in the event log too (kind ``alert``, the alert's id): one timeline of what happened
            s.add(Event(kind="alert", object_id=row.id, from_state=None, to_state=a.kind, message=f"{a.object}: {a.message}"))
    return len(new)


# -- delivery ---------------------------------------------------------------------------------


def http_post(url: str, body: bytes, headers: dict[str, str]) -> int:
    with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
        return client.post(url, content=body, headers=headers).status_code


def payload(a: Alert, tenant: str) -> bytes:
    return json.dumps(
        {
            "id": a.id,
            "tenant": tenant,
            "kind": a.kind,
            "object": a.object,
            "message": a.message,
            "created_at": a.created_at.isoformat() if a.created_at else None,
            "attempt": a.attempts + 1,
        },
        sort_keys=True,
    ).encode()


def deliver(db: Database, keyring: Keyring, post: Post = http_post, now: float | None = None, batch: int = 50) -> int:
    """POST the due pending alerts (no transaction open while POSTing); returns how many
    were delivered now."""
    now = time.time() if now is None else now
    todo: list[tuple[int, str, bytes, dict[str, str]]] = []
    with db.sessions() as s:
        due = list(
            s.scalars(
                select(Alert)
                .where(Alert.delivery == "pending", (Alert.next_attempt_at.is_(None)) | (Alert.next_attempt_at <= now))
                .order_by(Alert.id)
                .limit(batch)
            )
        )
        hooks = {
            h.tenant_id: h
            for h in s.scalars(select(TenantWebhook).where(TenantWebhook.tenant_id.in_({a.tenant_id for a in due})))
        }
        names = dict(s.execute(select(Tenant.id, Tenant.name)).all())
        for a in due:
            hook = hooks.get(a.tenant_id)
            if hook is None:
                todo.append((a.id, "", b"", {}))  # the webhook was removed meanwhile
                continue
            body = payload(a, names.get(a.tenant_id, str(a.tenant_id)))
            secret = keyring.unseal(hook.secret, _aad(a.tenant_id))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "suanli-webhook",
                "X-Suanli-Event": a.kind,
                "X-Suanli-Delivery": str(a.id),
                "X-Suanli-Signature": signature(secret, body),
            }
            todo.append((a.id, hook.url, body, headers))
    delivered = 0
    for aid, url, body, headers in todo:
        error = ""
        if not url:
            error = "no webhook"
        else:
            try:
                status = post(url, body, headers)
                if not 200 <= status < 300:
                    error = f"HTTP {status}"
            except Exception as exc:  # refused, timed out, TLS: retried
                error = f"{type(exc).__name__}: {exc}"[:500]
        with db.transaction() as s:
            row = s.get(Alert, aid)
            if row is None or row.delivery != "pending":
                continue
            a = row
            a.attempts += 1
            if not error:
                a.delivery, a.delivered_at, a.last_error = "delivered", utcnow(), ""
                delivered += 1
            elif error == "no webhook":
                a.delivery, a.last_error = "none", error
            else:
                a.last_error = error
                if a.attempts >= MAX_ATTEMPTS:
                    a.delivery = "failed"
                    log.warning("alert %s: webhook delivery failed after %d attempts: %s", aid, a.attempts, error)
                else:
                    a.next_attempt_at = now + backoff_s(a.attempts)
    return delivered


def run(db: Database, keyring: Keyring, post: Post = http_post) -> None:
    """One pass of the alerts thread: scan, then deliver what is due."""
    scan(db)
    deliver(db, keyring, post)
