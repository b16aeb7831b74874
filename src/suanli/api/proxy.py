"""Port proxy: a renter reaches the web services of an instance (JupyterLab,
TensorBoard, an inference server) through an authenticated URL of the Suanli
server, ``/proxy/instances/ID/PORT/...``, WebSocket included.

Why a proxy: containers publish their ports on the host's loopback only
(``-p 127.0.0.1:HOST:CTR``), so no host port is exposed to the network and no
service in an instance is reachable without a Suanli token that may see that
instance. The proxy authenticates, checks that the instance is running and the
port was published (``--port``), and relays to ``127.0.0.1:HOST``.

Credentials, all of them stripped before anything reaches the instance:

- ``Authorization: Bearer sl_...`` (scripts, the CLI);
- ``?token=sl_...``: a link a browser can open; the proxy answers with an
  HttpOnly, SameSite=Lax cookie scoped to ``/proxy/instances/ID/`` and a
  redirect to the same URL without the token;
- that cookie, ``suanli_proxy_ID`` (the browser's later requests, WebSockets).

Only values that look like Suanli tokens (``sl_`` prefix) are taken: a service's
own ``?token=`` (Jupyter) or ``Authorization`` (an API key of vLLM) passes through.
A request that only the cookie authenticates, if it is a WebSocket or changes
something (not GET/HEAD/OPTIONS), must come from the server's own origin: SameSite
does not separate sibling sub-domains, and a hijacked Jupyter socket is a shell.

Proxied pages are served from the Suanli server's origin, so their scripts share it
with the web console (whose token is in localStorage): ``create_proxy_app`` gives the
proxy alone, for a listener on an origin of its own (another port or host name).

Two URL forms, because services disagree about paths behind a prefix:

- ``/proxy/instances/ID/PORT/rest`` reaches the service as ``/rest`` (prefix
  stripped, ``X-Forwarded-Prefix`` set, ``Location`` redirects re-prefixed):
  any service with relative links (``python -m http.server``, TensorBoard) or
  a client that takes a base URL (an OpenAI-compatible API);
- ``/proxy/instances/ID/absolute/PORT/rest`` reaches it with the full path, for
  services told their base URL (JupyterLab ``--ServerApp.base_url``, which
  cannot work behind a stripping proxy); ``proxy_path(..., absolute=True)``.

The client's ``Host`` and ``Origin`` are passed through (Jupyter compares them
to refuse cross-site WebSockets and XSRF).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx
from fastapi import APIRouter, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from suanli.control.access import proxy_path
from suanli.api import errors
from suanli.api.errors import error_body
from suanli.control import instances
from suanli.control.auth import Principal, authenticate
from suanli.control.errors import Conflict, ControlError, Forbidden, NotFound, Unauthorized
from suanli.db.models import Instance
from suanli.db.session import Database

router = APIRouter(tags=["proxy"])

TOKEN_PREFIX = "sl_"  #: every Suanli API token starts so (control/auth.py)
LOOPBACK = "127.0.0.1"
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: RFC 9110 hop-by-hop headers, never forwarded either way
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "trailers", "transfer-encoding", "upgrade", "proxy-connection"})
#: connect fast (loopback); no read timeout: streams and long polls stay open while the client wants them
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0)
_SSL = ssl.create_default_context()  # built once: httpx would build one per client (never used: upstream is http)


class BadGateway(ControlError):
    status = 502
    code = "upstream_unreachable"


# -- URLs ---------------------------------------------------------------------------------

def proxy_url(base_url: str, instance_id: int, port: int, *, absolute: bool = False) -> str:
    """What the instance listing shows for a published port."""
    return base_url.rstrip("/") + proxy_path(instance_id, port, absolute=absolute)


def cookie_name(instance_id: int) -> str:
    return f"suanli_proxy_{instance_id}"


def cookie_path(instance_id: int) -> str:
    return f"/proxy/instances/{instance_id}/"


# -- instance -> host port ----------------------------------------------------------------

@dataclass(frozen=True)
class Upstream:
    instance_id: int
    port: int  #: in the container
    host: str
    host_port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.host_port}"


def published_host_port(row: Instance, port: int) -> int | None:
    """The host port of container ``port`` of a running instance, from its handle
    (``data.ports``: container port text -> host port), or None."""
    if not row.handles:
        return None
    ports = (row.handles[0].get("data") or {}).get("ports") or {}
    value = ports.get(str(port))
    return int(value) if value is not None else None


def resolve_upstream(db: Database, who: Principal, instance_id: int, port: int) -> Upstream:
    """Where to reach ``port`` of the instance for ``who``: NotFound for an instance it
    may not see (as the API) or a port not published, Conflict ``invalid_state`` when
    the instance is not running."""
    row = instances.get(db, who, instance_id)
    if port not in (row.ports or []):
        published = ", ".join(str(p) for p in row.ports or []) or "none"
        raise NotFound(f"port {port} of instance {instance_id} is not published (published: {published}; "
                       f"publish ports with --port when creating the instance)", code="not_published")
    if row.state != "running" or not row.handles:
        raise Conflict(f"instance {instance_id} is {row.state}; its ports are reachable while it runs", code="invalid_state")
    host_port = published_host_port(row, port)
    if host_port is None:
        raise NotFound(f"port {port} of instance {instance_id} was not published by its runtime "
                       f"({row.runtime or 'unknown'})", code="not_published")
    host = str((row.handles[0].get("data") or {}).get("host") or LOOPBACK)
    return Upstream(instance_id, port, host, host_port)


# -- credentials --------------------------------------------------------------------------

def _ours(value: str | None) -> str | None:
    return value if value and value.startswith(TOKEN_PREFIX) else None


def _bearer(headers: Any) -> str | None:
    header = headers.get("authorization", "")
    return _ours(header[7:].strip()) if header.lower().startswith("bearer ") else None


def _query_token(raw_query: str) -> str | None:
    for part in raw_query.split("&"):
        name, _, value = part.partition("=")
        if unquote(name) == "token" and _ours(unquote(value)):
            return unquote(value)
    return None


def strip_token_query(raw_query: str) -> str:
    """The query string without our ``token=sl_...`` (others kept byte for byte)."""
    kept = [p for p in raw_query.split("&") if p and not (unquote(p.partition("=")[0]) == "token"
                                                         and _ours(unquote(p.partition("=")[2])))]
    return "&".join(kept)


def _strip_cookies(header: str) -> str:
    """The Cookie header without any ``suanli_proxy_*`` cookie (no instance sees a token)."""
    kept = [c for c in (p.strip() for p in header.split(";")) if c and not c.startswith("suanli_proxy_")]
    return "; ".join(kept)


@dataclass(frozen=True)
class Credential:
    token: str
    source: str  #: "query", "header" or "cookie"


def credential(headers: Any, raw_query: str, cookies: dict[str, str], instance_id: int) -> Credential | None:
    if token := _query_token(raw_query):
        return Credential(token, "query")
    if token := _bearer(headers):
        return Credential(token, "header")
    if token := _ours(cookies.get(cookie_name(instance_id))):
        return Credential(token, "cookie")
    return None


def _principal(db: Database, cred: Credential | None, tokens: Any) -> Principal:
    if cred is None:
        raise Unauthorized("this proxy needs a Suanli token: an Authorization: Bearer header, or open the URL "
                           "once with ?token=TOKEN (it then sets a cookie)")
    return authenticate(db, cred.token, tokens)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def check_origin(headers: Any, cred: Credential, method: str | None) -> None:
    """Refuse a cross-origin WebSocket (``method`` None) or unsafe request that only the
    cookie authenticates (cross-site request forgery, WebSocket hijacking)."""
    if cred.source != "cookie" or (method is not None and method in SAFE_METHODS):
        return
    origin = headers.get("origin")
    if origin is None:
        return  # not a browser's cross-origin request: browsers send Origin on those and on every WebSocket
    host = (headers.get("x-forwarded-host") or headers.get("host") or "").split(",")[0].strip().lower()
    netloc = urlsplit(origin).netloc.lower() if origin != "null" else None
    strip = lambda h: h.removesuffix(":80").removesuffix(":443")  # noqa: E731 - default ports
    if netloc is None or strip(netloc) != strip(host):
        raise Forbidden(f"cross-origin request from {origin} refused: the proxy's cookie is only "
                        f"good for pages of {host}; send an Authorization: Bearer header instead", code="cross_origin")


def _upstream_headers(headers: Any, cred: Credential | None, client_host: str | None, scheme: str,
                      prefix: str | None) -> list[tuple[str, str]]:
    """The client's headers for the service: hop-by-hop ones and our credentials removed,
    ``X-Forwarded-*`` added. ``Host`` is kept (Jupyter checks Origin against it)."""
    listed = {h.strip().lower() for h in headers.get("connection", "").split(",")}
    out: list[tuple[str, str]] = []
    forwarded_for = None
    for name, value in headers.items():
        low = name.lower()
        if low in HOP_BY_HOP or low in listed or low.startswith("sec-websocket-"):
            continue
        if low == "authorization" and cred is not None and cred.source == "header":
            continue
        if low == "cookie":
            value = _strip_cookies(value)
            if not value:
                continue
        if low == "x-forwarded-for":
            forwarded_for = value
            continue
        if low in ("x-forwarded-prefix", "x-forwarded-proto", "x-forwarded-host"):
            continue
        out.append((name, value))
    if client_host:
        out.append(("X-Forwarded-For", f"{forwarded_for}, {client_host}" if forwarded_for else client_host))
    out.append(("X-Forwarded-Proto", headers.get("x-forwarded-proto") or scheme))
    if host := headers.get("host"):
        out.append(("X-Forwarded-Host", headers.get("x-forwarded-host") or host))
    if prefix:
        out.append(("X-Forwarded-Prefix", prefix.rstrip("/")))
    return out


def _upstream_target(scope: dict, absolute: bool) -> str:
    """The path and query the service sees (raw bytes kept: ``%2F`` stays encoded)."""
    raw = _raw_path(scope)
    if not absolute:
        parts = raw.split("/", 5)  # "", proxy, instances, ID, PORT, rest
        raw = "/" + (parts[5] if len(parts) > 5 else "")
    query = strip_token_query(scope.get("query_string", b"").decode("latin-1"))
    return raw + ("?" + query if query else "")


def _raw_path(scope: dict) -> str:
    """The request's path as the client wrote it (percent-encoding kept), for redirects."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1").split("?", 1)[0] if raw else quote(scope["path"])


def _rewrite_location(location: str, up: Upstream, public_host: str | None, prefix: str) -> str:
    """Keep redirects of the service inside its proxy path: a Location at the upstream's
    own address, or (prefix stripped) a path-absolute one outside the prefix."""
    parts = urlsplit(location)
    if parts.netloc == up.address:
        parts = parts._replace(scheme="", netloc="")
    if parts.netloc not in ("", public_host) or not parts.path.startswith("/"):
        return urlunsplit(parts)
    if prefix and not parts.path.startswith(prefix):
        parts = parts._replace(path=prefix.rstrip("/") + parts.path)
    return urlunsplit(parts)


def create_proxy_app(ctx: Any) -> FastAPI:
    """The proxy alone (``ctx``: the ServerContext), to serve on an origin of its own:
    proxied pages then share no origin (localStorage, the console's token) with the
    console and the API."""
    app = FastAPI(title="Suanli port proxy", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ctx = ctx
    errors.install(app)
    app.include_router(router)
    return app


# -- HTTP ---------------------------------------------------------------------------------

@router.api_route("/proxy/instances/{instance_id}/{port:int}", methods=METHODS, include_in_schema=False)
@router.api_route("/proxy/instances/{instance_id}/absolute/{port:int}", methods=METHODS, include_in_schema=False)
async def slash(request: Request, instance_id: int, port: int) -> Response:
    """The service's root is the path with a slash: relative links resolve against it."""
    query = request.url.query
    return RedirectResponse(_raw_path(request.scope) + "/" + ("?" + query if query else ""), status_code=307)


@router.api_route("/proxy/instances/{instance_id}/{port:int}/{path:path}", methods=METHODS,
                  summary="Reach a published port of an instance (prefix stripped)")
async def forward(request: Request, instance_id: int, port: int, path: str) -> Response:
    return await _forward(request, instance_id, port, absolute=False)


@router.api_route("/proxy/instances/{instance_id}/absolute/{port:int}/{path:path}", methods=METHODS,
                  summary="Reach a published port of an instance (full path, for services told their base URL)")
async def forward_absolute(request: Request, instance_id: int, port: int, path: str) -> Response:
    return await _forward(request, instance_id, port, absolute=True)


async def _forward(request: Request, instance_id: int, port: int, *, absolute: bool) -> Response:
    ctx = request.app.state.ctx
    cred = credential(request.headers, request.url.query, request.cookies, instance_id)
    who = await run_in_threadpool(_principal, ctx.db, cred, ctx.tokens)
    assert cred is not None
    check_origin(request.headers, cred, request.method)
    if cred.source == "query":  # a browser's link: trade the token for a cookie, drop it from the URL
        await run_in_threadpool(instances.get, ctx.db, who, instance_id)
        query = strip_token_query(request.url.query)
        resp = RedirectResponse(_raw_path(request.scope) + ("?" + query if query else ""), status_code=307)
        secure = (request.headers.get("x-forwarded-proto") or request.url.scheme) == "https"
        resp.set_cookie(cookie_name(instance_id), cred.token, path=cookie_path(instance_id), httponly=True,
                        samesite="lax", secure=secure)
        return resp
    up = await run_in_threadpool(resolve_upstream, ctx.db, who, instance_id, port)
    prefix = proxy_path(instance_id, port)
    headers = _upstream_headers(request.headers, cred, request.client.host if request.client else None,
                                request.url.scheme, None if absolute else prefix)
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False, verify=_SSL)
    try:
        upstream_req = client.build_request(request.method, f"http://{up.address}{_upstream_target(request.scope, absolute)}",
                                            headers=headers, content=request.stream() if has_body else None)
        upstream = await client.send(upstream_req, stream=True)
    except httpx.ConnectError:
        await client.aclose()
        raise BadGateway(f"nothing listens on port {port} in instance {instance_id}: start the service there "
                         f"(listening on 0.0.0.0:{port}) and retry") from None
    except httpx.TransportError as exc:
        await client.aclose()
        raise BadGateway(f"port {port} of instance {instance_id} did not answer: {exc.__class__.__name__}",
                         code="upstream_error") from None

    async def close() -> None:
        await upstream.aclose()
        await client.aclose()

    out = StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(close))
    raw: list[tuple[bytes, bytes]] = []
    listed = {h.strip().lower() for h in upstream.headers.get("connection", "").split(",")}
    for name, value in upstream.headers.multi_items():
        low = name.lower()
        if low in HOP_BY_HOP or low in listed or low in ("date", "server"):  # the server adds its own
            continue
        if low == "location":
            value = _rewrite_location(value, up, request.headers.get("host"), "" if absolute else prefix)
        raw.append((low.encode("latin-1"), value.encode("latin-1")))
    out.raw_headers = raw
    return out


# -- WebSocket ----------------------------------------------------------------------------

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


@router.websocket("/proxy/instances/{instance_id}/{port:int}/{path:path}")
async def forward_ws(websocket: WebSocket, instance_id: int, port: int, path: str) -> None:
    await _forward_ws(websocket, instance_id, port, absolute=False)


@router.websocket("/proxy/instances/{instance_id}/absolute/{port:int}/{path:path}")
async def forward_ws_absolute(websocket: WebSocket, instance_id: int, port: int, path: str) -> None:
    await _forward_ws(websocket, instance_id, port, absolute=True)


async def _forward_ws(websocket: WebSocket, instance_id: int, port: int, *, absolute: bool) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidStatus

    ctx = websocket.app.state.ctx
    cred = credential(websocket.headers, websocket.url.query, websocket.cookies, instance_id)
    try:
        who = await run_in_threadpool(_principal, ctx.db, cred, ctx.tokens)
        assert cred is not None
        check_origin(websocket.headers, cred, None)
        up = await run_in_threadpool(resolve_upstream, ctx.db, who, instance_id, port)
    except ControlError as exc:
        await _deny(websocket, exc.status, exc.code, exc.message)
        return
    scheme = "wss" if websocket.url.scheme == "wss" else "ws"
    headers = [(k, v) for k, v in _upstream_headers(
        websocket.headers, cred, websocket.client.host if websocket.client else None,
        "https" if scheme == "wss" else "http", None if absolute else proxy_path(instance_id, port),
    ) if k.lower() not in ("host", "origin", "user-agent", "sec-websocket-extensions")]
    host = websocket.headers.get("host") or up.address
    try:
        upstream = await connect(
            f"ws://{host}{_upstream_target(websocket.scope, absolute)}", host=up.host, port=up.host_port,
            subprotocols=websocket.scope.get("subprotocols") or None, additional_headers=headers,
            origin=websocket.headers.get("origin"), user_agent_header=websocket.headers.get("user-agent"),
            proxy=None, compression=None, max_size=None, ping_interval=None, open_timeout=10,
        )
    except InvalidStatus as exc:
        status = exc.response.status_code
        await _deny(websocket, status if 400 <= status < 600 else 502, "upstream_refused",
                    f"port {port} of instance {instance_id} refused the WebSocket (HTTP {status})")
        return
    except (OSError, asyncio.TimeoutError, InvalidHandshake):
        await _deny(websocket, 502, "upstream_unreachable",
                    f"nothing accepts WebSockets on port {port} in instance {instance_id}: start the service there and retry")
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
