"""Request dependencies: the server context and the authenticated principal."""

from __future__ import annotations

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from suanli.api.context import ServerContext
from suanli.control.auth import Principal, authenticate, hash_token
from suanli.errors import Forbidden, Unauthorized

# ``context``, ``paging`` and ``principal`` are ``async``: FastAPI runs a plain ``def``
# dependency on a worker thread, a hand-off each (three per request) that under many
# clients waits for a free thread and the GIL; what may block (the database) still runs
# on a thread.


async def context(request: Request) -> ServerContext:
    return request.app.state.ctx


def source(request: Request) -> str:
    """The caller's address (the TCP peer: a proxy in front must be trusted explicitly)."""
    return request.client.host if request.client else ""


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


async def principal(request: Request, ctx: ServerContext = Depends(context)) -> Principal:
    """``authenticated``, on this thread for a token in this process's cache, else on a
    worker thread (it reads the database)."""
    token = bearer(request)
    who = ctx.tokens.get(hash_token(token)) if token else None
    if who is None:
        return await run_in_threadpool(authenticated, request, ctx)
    return _admitted(request, who)


def authenticated(request: Request, ctx: ServerContext) -> Principal:
    """Who is asking, from the bearer token. A source that sent too many bad tokens
    waits (429) before its next token is even looked at (a token this process verified
    in the last seconds is not a guess: it skips that read); a token's scopes are checked
    here, before the route's own rules. The principal is kept on the request for the
    audit log (``api.audit``)."""
    token, where = bearer(request), source(request)
    who = ctx.tokens.get(hash_token(token)) if token else None
    if who is None:
        if token:
            ctx.bad_tokens.check(where, "bad tokens")
        try:
            who = authenticate(ctx.db, token, ctx.tokens)
        except Unauthorized:
            if token:
                ctx.bad_tokens.fail(where)
            raise
    return _admitted(request, who)


def _admitted(request: Request, who: Principal) -> Principal:
    request.state.principal = who
    if not who.allows(request.method, request.url.path):
        raise Forbidden(f"this token's scopes ({', '.join(who.scopes)}) do not allow {request.method} {request.url.path}")
    return who
