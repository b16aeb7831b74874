"""Request dependencies: the server context and the authenticated principal."""

from __future__ import annotations

from fastapi import Depends, Request

from suanli.api.context import ServerContext
from suanli.control.auth import Principal, authenticate


def context(request: Request) -> ServerContext:
    return request.app.state.ctx


def principal(request: Request, ctx: ServerContext = Depends(context)) -> Principal:
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else None
    return authenticate(ctx.db, token, ctx.tokens)
