"""Every state-changing API call, and every operator's read of a tenant's logs, into the
audit log (``control.audit``), as pure ASGI middleware (one place, no route can forget).

The record is written when the response starts, before the client sees it: a caller
never holds an answer whose record is missing. It names the actor (the principal the
route authenticated, ``-`` when none did), the action (``instances.stop``: the route's
collection and verb), the object (``instance/7``; for a create, the id in the answer),
the object's tenant, the source address and the status code. Refused calls (401, 403,
422...) are recorded too: failed attempts are what an audit is read for. Bodies are not
recorded (they can hold secrets and passwords).

Not recorded: reads (GET, except operators' reads of logs), the advisor's and the
quote's computations (POST, but they change nothing), and agents' heartbeats (a liveness
signal every few seconds per node; the node's state changes they cause are events).
"""

from __future__ import annotations

import json
import logging
import re

import anyio.to_thread
from fastapi import FastAPI
from sqlalchemy import select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from suanli.billing.store import find_tenant
from suanli.bounds import parse_id
from suanli.control import audit
from suanli.control.auth import Principal
from suanli.db.models import Instance, Job
from suanli.db.session import Database

log = logging.getLogger(__name__)

WRITES = {"POST", "PUT", "PATCH", "DELETE"}
#: POSTs that compute an answer and change nothing, and the agents' liveness signal
UNAUDITED = re.compile(r"^/v1/(advise/|quote$|nodes/[^/]+/heartbeat$)")
#: GETs audited when an operator makes them: reading a tenant's output
OPERATOR_READS = re.compile(r"^/v1/(instances|jobs)/[^/]+/logs$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}
#: a path parameter's object kind, where the collection's singular would be wrong
_KINDS = {
    "instances": "instance",
    "jobs": "job",
    "pipelines": "job",  # a pipeline's answer is its jobs
    "nodes": "node",
    "images": "image",
    "grants": "grant",
    "keys": "key",
}
_MAX_CREATED_BODY = 1 << 20
_MAX_TEED_BODY = 64 << 10


def action_and_object(method: str, path: str, params: dict) -> tuple[str, str]:
    """``("instances.stop", "instance/7")`` for ``POST /v1/instances/7/stop``."""
    parts = [p for p in path.removeprefix("/v1/").split("/") if p]
    values = {str(v) for v in params.values()}
    names = [p for p in parts if p not in values]
    if names[:1] == ["billing"] and len(names) > 1:  # a namespace, not a collection: topups.create
        names = names[1:]
    collection = names[0] if names else "root"
    verb = names[-1] if len(names) > 1 else ("read" if method == "GET" else _VERBS.get(method, method.lower()))
    ident = next((p for p in parts if p in values), "")
    kind = _KINDS.get(collection, collection.removesuffix("s"))
    return f"{collection}.{verb}", (f"{kind}/{ident}" if ident else collection)


def _tenant_of(db: Database, obj: str, asked: str | None) -> int | None:
    """The tenant whose object it is: an instance's or job's, else the one the body named."""
    kind, _, ident = obj.partition("/")
    models: dict[str, type[Instance] | type[Job]] = {"instance": Instance, "job": Job}
    model = models.get(kind)
    with db.reads() as s:
        if model is not None and (n := parse_id(ident)) is not None:
            return s.scalar(select(model.tenant_id).where(model.id == n))
        if asked:
            return find_tenant(s, asked)
    return None


class AuditMiddleware:
    def __init__(self, app: ASGIApp, db: Database) -> None:
        self.app, self.db = app, db
        self.writer = audit.Writer(db)

    def _audited(self, scope: Scope) -> bool:
        path, method = scope["path"], scope["method"]
        if not path.startswith("/v1/"):
            return False
        if method in WRITES:
            return not UNAUDITED.match(path)
        return method == "GET" and bool(OPERATOR_READS.match(path))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._audited(scope):
            return await self.app(scope, receive, send)
        held: list[Message] = []
        size = 0
        asked: dict = {}  # the body's ``tenant``, the one field read from it
        if scope["method"] in WRITES and _json(scope):
            receive = _tee_tenant(receive, asked)

        async def send_wrapper(message: Message) -> None:
            nonlocal size
            if message["type"] == "http.response.start":
                if message["status"] != 201:
                    await self._record(scope, message["status"], None, asked)
                    return await send(message)
                held.append(message)
                return None
            if held:  # a create: its body names the new object
                held.append(message)
                size += len(message.get("body", b""))
                if message.get("more_body") and size < _MAX_CREATED_BODY:
                    return None
                body = b"".join(m.get("body", b"") for m in held[1:])
                await self._record(scope, 201, body, asked)
                pending = held[:]
                held.clear()
                for m in pending:
                    await send(m)
                return None
            return await send(message)

        await self.app(scope, receive, send_wrapper)

    async def _record(self, scope: Scope, status: int, created: bytes | None, asked: dict | None = None) -> None:
        who: Principal | None = scope.get("state", {}).get("principal")
        if scope["method"] == "GET" and (who is None or not who.sees_all):
            return  # a renter reading their own logs
        route = scope.get("route")
        action, obj = action_and_object(scope["method"], scope["path"], scope.get("path_params") or {})
        tenant_id: int | None = None
        if created:
            try:
                out = json.loads(created)
            except ValueError:
                out = None
            if isinstance(out, list) and out and all(isinstance(o, dict) and isinstance(o.get("id"), int) for o in out):
                ids = [o["id"] for o in out]  # a pipeline's jobs: job/12..15
                kind = _KINDS.get(obj.split("/")[0], obj.split("/")[0])
                obj = f"{kind}/{ids[0]}" if len(ids) == 1 else f"{kind}/{min(ids)}..{max(ids)}"
            if isinstance(out, dict):
                kind = obj.split("/")[0]
                if out.get("id") is not None:
                    obj = f"{_KINDS.get(kind, kind.removesuffix('s'))}/{out['id']}"
                own = out.get("id") if kind == "tenants" else out.get("tenant_id")  # a new tenant is its own
                tenant_id = own if isinstance(own, int) else None
        client = scope.get("client")
        entry = audit.Entry(
            actor=who.name if who else "-",
            actor_id=(who.user_id or None) if who else None,
            actor_role=who.role if who else "",
            tenant_id=tenant_id,
            action=action,
            object=obj,
            source=str(client[0]) if client else "",
            result=str(status),
            detail={
                "method": scope["method"],
                "path": scope["path"],
                **({"route": route.path} if route is not None else {}),
                **({"tenant": asked["tenant"]} if asked and asked.get("tenant") else {}),
            },
        )
        try:
            await anyio.to_thread.run_sync(self._write, entry, who.tenant_id if who and who.tenant_id else None)
        except Exception:  # the change is committed already; say so loudly rather than hide it
            log.exception("audit record NOT written: %s %s by %s -> %s", scope["method"], scope["path"], entry.actor, status)

    def _write(self, entry: audit.Entry, actors_tenant: int | None) -> None:
        """Write ``entry`` with its object's tenant: an instance's or job's, the one the
        body named, else the actor's own (on whose behalf the call acted)."""
        if entry.tenant_id is None:
            tid = _tenant_of(self.db, entry.object, entry.detail.get("tenant"))
            entry = audit.Entry(**{**entry.__dict__, "tenant_id": tid if tid is not None else actors_tenant})
        self.writer.write(entry)


def _json(scope: Scope) -> bool:
    headers = dict(scope.get("headers") or [])
    length = headers.get(b"content-length", b"0")
    return b"json" in headers.get(b"content-type", b"") and length.isdigit() and int(length) <= _MAX_TEED_BODY


def _tee_tenant(receive: Receive, asked: dict) -> Receive:
    """``receive`` that also reads the request body's ``tenant`` field into ``asked``
    (the tenant an operator acts on: top-ups, grants, terms, budgets)."""
    chunks: list[bytes] = []

    async def tee() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                try:
                    body = json.loads(b"".join(chunks))
                except ValueError:
                    body = None
                value = body.get("tenant") if isinstance(body, dict) else None
                if isinstance(value, str | int) and not isinstance(value, bool):
                    asked["tenant"] = str(value)[:100]
        return message

    return tee


def install(app: FastAPI, db: Database) -> None:
    app.add_middleware(AuditMiddleware, db=db)
