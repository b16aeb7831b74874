"""The port proxy's WebSocket half (JupyterLab's kernels, terminals): the same admission
as HTTP (``proxy``: target host, credential, origin, the instance's published port),
then a relay of frames both ways with close codes passed on."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from suanli.api.errors import error_body, http_status
from suanli.api.proxy import (
    Credential,
    Target,
    Upstream,
    _domain,
    _nowhere,
    _principal,
    _raw_path,
    _upstream_headers,
    _upstream_target,
    check_origin,
    credential,
    resolve_upstream,
    target_of,
)
from suanli.errors import DomainError

router = APIRouter(tags=["proxy"])


def _sendable(code: int | None) -> int:
    """A close code that may go in a close frame (1005/1006/1015 are only reported)."""
    if code is not None and (1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999):
        return code
    return 1000


async def _deny(websocket: WebSocket, status: int, code: str, message: str) -> None:
    """Refuse the handshake with the same JSON error as HTTP where the server can
    (WebSocket Denial Response), else a policy-violation close."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(JSONResponse(error_body(code, message), status_code=status))
    else:
        await websocket.close(code=1008, reason=f"{code}: {message}"[:120])


def _ws_admit(
    ctx: Any, secret: bytes, domain: str, headers: Any, raw_path: str, raw_query: str, source: str = ""
) -> tuple[Target, Credential, Upstream]:
    """Who may open this WebSocket, to where (a DomainError to deny it). A link's
    ``?token=`` counts on a port's host: a socket cannot be redirected to set a cookie."""
    target = target_of(headers.get("host"), raw_path, domain)
    if not isinstance(target, Target):
        raise _nowhere(domain)
    cred = credential(headers, raw_query, target, secret, time.time())
    who = _principal(ctx, cred, target, "GET", source)
    assert cred is not None
    check_origin(headers, cred, None)
    return target, cred, resolve_upstream(ctx.db, who, target.instance_id, target.port)


@router.websocket("/{rest:path}")
async def forward_ws(websocket: WebSocket, rest: str) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidStatus
    from websockets.typing import Origin

    app = websocket.app
    try:
        target, cred, up = await run_in_threadpool(
            _ws_admit,
            app.state.ctx,
            app.state.secret,
            _domain(app),
            websocket.headers,
            _raw_path(websocket.scope),
            websocket.url.query,
            websocket.client.host if websocket.client else "",
        )
    except DomainError as exc:
        await _deny(websocket, http_status(exc), exc.code, exc.message)
        return
    port, instance_id = target.port, target.instance_id
    scheme = "wss" if websocket.url.scheme == "wss" else "ws"
    headers = [
        (k, v)
        for k, v in _upstream_headers(
            websocket.headers,
            cred,
            websocket.client.host if websocket.client else None,
            "https" if scheme == "wss" else "http",
            target.prefix or None,
        )
        if k.lower() not in ("host", "origin", "user-agent", "sec-websocket-extensions")
    ]
    host = websocket.headers.get("host") or up.address
    try:
        upstream = await connect(
            f"ws://{host}{_upstream_target(websocket.scope, target)}",
            host=up.host,
            port=up.host_port,
            subprotocols=websocket.scope.get("subprotocols") or None,
            additional_headers=headers,
            origin=Origin(o) if (o := websocket.headers.get("origin")) else None,
            user_agent_header=websocket.headers.get("user-agent"),
            proxy=None,
            compression=None,
            max_size=None,
            ping_interval=None,
            open_timeout=10,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        await _deny(
            websocket,
            status if 400 <= status < 600 else 502,
            "upstream_refused",
            f"port {port} of instance {instance_id} refused the WebSocket (HTTP {status})",
        )
        return
    except (TimeoutError, OSError, InvalidHandshake):
        await _deny(
            websocket,
            502,
            "upstream_unreachable",
            f"nothing accepts WebSockets on port {port} in instance {instance_id}: start the service there and retry",
        )
        return
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _relay(websocket, upstream)


async def _relay(websocket: WebSocket, upstream: Any) -> None:
    """Text and binary frames both ways until one side closes; its close code goes to the other."""
    from websockets.exceptions import ConnectionClosed

    async def from_client() -> tuple[str, int, str]:
        while True:
            msg = await websocket.receive()
            if msg["type"] == "websocket.disconnect":
                return "client", msg.get("code", 1000), msg.get("reason") or ""
            try:
                await upstream.send(msg["text"] if msg.get("text") is not None else msg.get("bytes") or b"")
            except ConnectionClosed:
                return "upstream", upstream.close_code, upstream.close_reason or ""

    async def from_upstream() -> tuple[str, int, str]:
        while True:
            try:
                data = await upstream.recv()
            except ConnectionClosed:
                return "upstream", upstream.close_code, upstream.close_reason or ""
            try:
                if isinstance(data, str):
                    await websocket.send_text(data)
                else:
                    await websocket.send_bytes(data)
            except Exception:  # the client went away mid-send
                return "client", 1001, ""

    tasks = [asyncio.ensure_future(from_client()), asyncio.ensure_future(from_upstream())]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    side, code, reason = next(iter(done)).result()
    if side == "client":
        await upstream.close(code=_sendable(code), reason=reason)
    else:
        try:
            await websocket.close(code=_sendable(code), reason=reason)
        except Exception:
            pass  # the client is gone too
