"""Port proxy: a renter reaches the web services of an instance (JupyterLab,
TensorBoard, an inference server), WebSocket included, through the Suanli server.

Why a proxy: containers publish their ports on the host's loopback only
(``-p 127.0.0.1:HOST:CTR``), so no host port is exposed to the network and no
service in an instance is reachable without a Suanli credential that may see that
instance. The proxy authenticates, checks that the instance is running and the
port was published (``--port``), and relays to ``127.0.0.1:HOST``.

One origin per port, like RunPod and vast.ai: browsers open
``http://ID-PORT.DOMAIN:PROXY_PORT/...`` (``--proxy-domain``, default ``localhost``,
whose sub-domains browsers resolve to loopback themselves), chosen by the ``Host``
header; the path reaches the service unchanged. Each instance's pages run their
scripts on an origin of their own, so a page of tenant A's instance cannot read
tenant B's (the same-origin policy) nor make the browser present the credentials a
user holds for B (host-only cookie, a pass signed for B's port alone).

Credentials, all of them stripped before anything reaches the instance:

- ``Authorization: Bearer sl_...`` (scripts, the CLI), on either form;
- on a port's host only: ``?token=sl_...``, a link a browser can open: the proxy
  answers with a host-only (no ``Domain``), ``Path=/``, HttpOnly, SameSite=Lax cookie
  ``suanli_proxy`` and a redirect to the same URL without the token. The cookie holds a
  *pass* (``control/access.py``): HMAC-signed (token id, instance, port, expiry), not
  the API token, so a leaked cookie opens that one port for a day at most, and
  revoking the token revokes it;
- on a port's host only: that cookie (the browser's later requests, WebSockets).

The path form ``/proxy/instances/ID/PORT/rest`` stays for API clients: it reaches the
service as ``/rest`` (prefix stripped, ``X-Forwarded-Prefix`` set, ``Location``
redirects re-prefixed) and takes *only* the bearer header, never a cookie or
``?token=``: every port shares that origin, so no ambient browser credential may work
there.

Only values that look like Suanli tokens (``sl_`` prefix) are taken: a service's
own ``?token=`` (Jupyter) or ``Authorization`` (an API key of vLLM) passes through.
A request that only the cookie authenticates must come from the port's own origin or
be a navigation to it (``Origin``, Fetch Metadata): SameSite does not separate sibling
sub-domains of one DNS name, and a hijacked Jupyter socket is a shell. A
service's ``Set-Cookie`` loses any ``Domain`` attribute (host-only: no instance sets
cookies for its siblings) and may not set ``suanli_proxy``.

The client's ``Host`` and ``Origin`` are passed through (Jupyter compares them to
refuse cross-site WebSockets and XSRF). A reverse proxy in front must keep ``Host``.
"""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from suanli.api import errors
from suanli.bounds import DB_INT_MAX
from suanli.control import instances
from suanli.control.access import (
    PASS_TTL_S,
    check_pass,
    make_pass,
    parse_port_host,
    pass_owner,
    port_url,
    proxy_path,
    token_owner,
)
from suanli.control.auth import Principal, authenticate, hash_token
from suanli.db.models import Instance
from suanli.db.session import Database
from suanli.errors import Conflict, DomainError, Forbidden, NotFound, Unauthorized

__all__ = ["port_url", "proxy_path", "resolve_upstream", "COOKIE"]

router = APIRouter(tags=["proxy"])

TOKEN_PREFIX = "sl_"  #: every Suanli API token starts so (control/auth.py)
COOKIE = "suanli_proxy"  #: the pass of a port's host (host-only, so one name serves every port)
LOOPBACK = "127.0.0.1"
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: RFC 9110 hop-by-hop headers, never forwarded either way
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
    }
)
#: connect fast (loopback); no read timeout: streams and long polls stay open while the client wants them
TIMEOUT = httpx.Timeout(connect=10.0, read=None, write=60.0, pool=10.0)
_SSL = ssl.create_default_context()  # built once: httpx would build one per client (never used: upstream is http)


@errors.http_error(502)
class BadGateway(DomainError):
    code = "upstream_unreachable"


# -- which port a request is for ------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    instance_id: int
    port: int  #: in the container
    #: True: the port's own host (browser credentials taken); False: the path form (bearer only)
    by_host: bool
    #: the path prefix stripped before the service (path form), "" on the port's host
    prefix: str = ""


_PATH_FORM = re.compile(r"^/proxy/instances/([0-9]{1,12})/([0-9]{1,5})(/.*)?$")


def target_of(host: str | None, raw_path: str, domain: str) -> Target | str | None:
    """The port a request is for: by its ``Host`` (``ID-PORT.DOMAIN``), else by the path
    form; the path with a slash added when the path form lacks it; None for neither."""
    if (hit := parse_port_host(host, domain)) is not None:
        return Target(hit[0], hit[1], by_host=True)
    m = _PATH_FORM.match(raw_path)
    if m is None or not 0 < int(m.group(2)) < 65536 or not 0 < int(m.group(1)) <= DB_INT_MAX:
        return None
    if m.group(3) is None:
        return raw_path + "/"
    instance_id, port = int(m.group(1)), int(m.group(2))
    return Target(instance_id, port, by_host=False, prefix=proxy_path(instance_id, port))


def _nowhere(domain: str) -> NotFound:
    return NotFound(
        f"this is Suanli's port proxy: open a published port at http://ID-PORT.{domain}:PROXY_PORT/ "
        "(the instance's ports list it), or, with an Authorization: Bearer header, at "
        "/proxy/instances/ID/PORT/",
        code="not_found",
    )


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
        raise NotFound(
            f"port {port} of instance {instance_id} is not published (published: {published}; "
            f"publish ports with --port when creating the instance)",
            code="not_published",
        )
    if row.state != "running" or not row.handles:
        raise Conflict(f"instance {instance_id} is {row.state}; its ports are reachable while it runs", code="invalid_state")
    host_port = published_host_port(row, port)
    if host_port is None:
        raise NotFound(
            f"port {port} of instance {instance_id} was not published by its runtime ({row.runtime or 'unknown'})",
            code="not_published",
        )
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
    kept = [
        p
        for p in raw_query.split("&")
        if p and not (unquote(p.partition("=")[0]) == "token" and _ours(unquote(p.partition("=")[2])))
    ]
    return "&".join(kept)


def _cookie_values(header: str) -> list[str]:
    """Every ``suanli_proxy`` value of a Cookie header (a sibling may have tossed one in)."""
    out = []
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            out.append(value.strip().strip('"'))
    return out


def _strip_cookies(header: str) -> str:
    """The Cookie header without any ``suanli_proxy*`` cookie (no instance sees a pass)."""
    kept = [c for c in (p.strip() for p in header.split(";")) if c and not c.startswith(COOKIE)]
    return "; ".join(kept)


@dataclass(frozen=True)
class Credential:
    source: str  #: "query", "header" or "cookie"
    token: str | None = None  #: an API token (query, header)
    token_id: int | None = None  #: the issuing token of a cookie's pass


def credential(headers: Any, raw_query: str, target: Target, secret: bytes, now: float) -> Credential | None:
    """What authenticates the request, by the form it came in: the path form takes the
    bearer header alone (Unauthorized, saying so, for a cookie or ``?token=`` there)."""
    if target.by_host and (token := _query_token(raw_query)):
        return Credential("query", token=token)
    if token := _bearer(headers):
        return Credential("header", token=token)
    if not target.by_host:
        if _query_token(raw_query) or _cookie_values(headers.get("cookie", "")):
            raise Unauthorized(
                "the path form /proxy/instances/ID/PORT/ takes only an Authorization: Bearer header; "
                "a browser opens the port's own address (the instance's ports list it)"
            )
        return None
    for value in _cookie_values(headers.get("cookie", "")):
        if (token_id := check_pass(secret, value, target.instance_id, target.port, now)) is not None:
            return Credential("cookie", token_id=token_id)
    return None


def _principal(ctx: Any, cred: Credential | None, target: Target, method: str, source: str) -> Principal:
    """Who the request speaks for. Bad tokens count against the source as on the API
    (429 past the limit), and a token's scopes hold here too: a read-only token only
    reads, a route-scoped one opens only ``/proxy/instances/ID/PORT/`` it names."""
    if cred is None:
        how = (
            ("an Authorization: Bearer header, or open the URL once with ?token=TOKEN (it then sets a cookie for this port)")
            if target.by_host
            else "an Authorization: Bearer header"
        )
        raise Unauthorized(f"this proxy needs a Suanli token: {how}")
    who = _who(ctx, cred, source)
    if not who.allows(method, proxy_path(target.instance_id, target.port)):
        raise Forbidden(f"this token's scopes ({', '.join(who.scopes)}) do not allow {method} on this port")
    return who


def _who(ctx: Any, cred: Credential, source: str) -> Principal:
    if cred.token is not None:
        if (cached := ctx.tokens.get(hash_token(cred.token))) is not None:
            return cached
        ctx.bad_tokens.check(source, "bad tokens")
        try:
            return authenticate(ctx.db, cred.token, ctx.tokens)
        except Unauthorized:
            ctx.bad_tokens.fail(source)
            raise
    assert cred.token_id is not None
    key = f"pass:{cred.token_id}"
    if (who := ctx.tokens.get(key)) is not None:
        return who
    who = pass_owner(ctx.db, cred.token_id)
    if who is None:
        raise Unauthorized("this port's cookie was issued by a revoked or expired token: open the link again")
    ctx.tokens.put(key, who)
    return who


def _issue_pass(db: Database, token: str, target: Target, secret: bytes, now: float) -> str:
    """A pass for this port, for a token that may see the instance (else 401 / 404)."""
    issued = token_owner(db, token)
    if issued is None:
        raise Unauthorized("invalid or revoked token")
    instances.get(db, issued.who, target.instance_id)
    return make_pass(secret, issued.token_id, target.instance_id, target.port, int(now) + PASS_TTL_S)


def check_origin(headers: Any, cred: Credential, method: str | None) -> None:
    """A request that only the cookie authenticates must come from the port's own pages or
    be a navigation to it: refuse one with another ``Origin`` (cross-site request forgery,
    WebSocket hijacking, a credentialed cross-origin read that a careless service's CORS
    would allow) and, by Fetch Metadata, a sibling's or another site's subresource or fetch
    (SameSite=Lax does not separate sibling sub-domains of one DNS name). ``method`` None:
    a WebSocket."""
    if cred.source != "cookie":
        return
    host = (headers.get("host") or "").strip().lower()
    origin = headers.get("origin")
    if origin is not None:  # browsers send it on every WebSocket, every cross-origin fetch and non-GET
        netloc = urlsplit(origin).netloc.lower() if origin != "null" else None
        strip = lambda h: h.removesuffix(":80").removesuffix(":443")  # noqa: E731 - default ports
        if netloc is None or strip(netloc) != strip(host):
            raise Forbidden(
                f"cross-origin request from {origin} refused: the proxy's cookie is only "
                f"good for pages of {host}; send an Authorization: Bearer header instead",
                code="cross_origin",
            )
    site, mode = headers.get("sec-fetch-site"), headers.get("sec-fetch-mode")
    if site in ("same-site", "cross-site") and mode != "navigate":
        raise Forbidden(
            f"a {mode or 'subresource'} request from another site's page refused: the proxy's cookie is "
            f"only good for pages of {host} and for opening it",
            code="cross_origin",
        )


def _upstream_headers(
    headers: Any, cred: Credential | None, client_host: str | None, scheme: str, prefix: str | None
) -> list[tuple[str, str]]:
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


def _upstream_target(scope: Mapping[str, Any], target: Target) -> str:
    """The path and query the service sees (raw bytes kept: ``%2F`` stays encoded)."""
    raw = _raw_path(scope)
    if target.prefix:
        raw = "/" + raw[len(target.prefix) :]
    query = strip_token_query(scope.get("query_string", b"").decode("latin-1"))
    return raw + ("?" + query if query else "")


def _raw_path(scope: Mapping[str, Any]) -> str:
    """The request's path as the client wrote it (percent-encoding kept), for redirects."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1").split("?", 1)[0] if raw else quote(scope["path"])


def _rewrite_location(location: str, up: Upstream, public_host: str | None, prefix: str) -> str:
    """Keep redirects of the service inside its proxy address: a Location at the upstream's
    own address, or (path form) a path-absolute one outside the prefix."""
    parts = urlsplit(location)
    if parts.netloc == up.address:
        parts = parts._replace(scheme="", netloc="")
    if parts.netloc not in ("", public_host) or not parts.path.startswith("/"):
        return urlunsplit(parts)
    if prefix and not parts.path.startswith(prefix):
        parts = parts._replace(path=prefix.rstrip("/") + parts.path)
    return urlunsplit(parts)


def _host_only_cookie(value: str) -> str | None:
    """A service's Set-Cookie without ``Domain`` (host-only: it reaches no sibling port),
    or None for one that would replace our ``suanli_proxy``."""
    pair, *attrs = value.split(";")
    if pair.strip().partition("=")[0].strip().startswith(COOKIE):
        return None
    kept = [a for a in attrs if a.strip().partition("=")[0].strip().lower() != "domain"]
    return ";".join([pair, *kept]) if len(kept) != len(attrs) else value


def _domain(app: Any) -> str:
    return getattr(app.state.ctx, "proxy_domain", None) or "localhost"


# -- HTTP ---------------------------------------------------------------------------------


@router.api_route("/{rest:path}", methods=METHODS, include_in_schema=False)
async def forward(request: Request, rest: str) -> Response:
    """Every request: to the port its ``Host`` names, or the path form's."""
    ctx, secret, domain = request.app.state.ctx, request.app.state.secret, _domain(request.app)
    target = target_of(request.headers.get("host"), _raw_path(request.scope), domain)
    if target is None:
        raise _nowhere(domain)
    if isinstance(target, str):  # the service's root is the path with a slash: relative links resolve against it
        query = request.url.query
        return RedirectResponse(target + ("?" + query if query else ""), status_code=307)
    now = time.time()
    cred = credential(request.headers, request.url.query, target, secret, now)
    # a browser's link: trade the token for a pass, drop it from the URL
    if cred is not None and cred.source == "query" and cred.token is not None:
        value = await run_in_threadpool(_issue_pass, ctx.db, cred.token, target, secret, now)
        query = strip_token_query(request.url.query)
        resp = RedirectResponse(_raw_path(request.scope) + ("?" + query if query else ""), status_code=307)
        secure = getattr(ctx, "tls", False) or (request.headers.get("x-forwarded-proto") or request.url.scheme) == "https"
        resp.set_cookie(COOKIE, value, max_age=PASS_TTL_S, path="/", httponly=True, samesite="lax", secure=secure)
        return resp
    source = request.client.host if request.client else ""
    who = await run_in_threadpool(_principal, ctx, cred, target, request.method, source)
    assert cred is not None
    check_origin(request.headers, cred, request.method)
    up = await run_in_threadpool(resolve_upstream, ctx.db, who, target.instance_id, target.port)
    headers = _upstream_headers(
        request.headers, cred, request.client.host if request.client else None, request.url.scheme, target.prefix or None
    )
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, trust_env=False, verify=_SSL)
    port, instance_id = target.port, target.instance_id
    try:
        upstream_req = client.build_request(
            request.method,
            f"http://{up.address}{_upstream_target(request.scope, target)}",
            headers=headers,
            content=request.stream() if has_body else None,
        )
        upstream = await client.send(upstream_req, stream=True)
    except httpx.ConnectError:
        await client.aclose()
        raise BadGateway(
            f"nothing listens on port {port} in instance {instance_id}: start the service there "
            f"(listening on 0.0.0.0:{port}) and retry"
        ) from None
    except httpx.TransportError as exc:
        await client.aclose()
        raise BadGateway(
            f"port {port} of instance {instance_id} did not answer: {exc.__class__.__name__}", code="upstream_error"
        ) from None

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
            value = _rewrite_location(value, up, request.headers.get("host"), target.prefix)
        if low == "set-cookie" and (value := _host_only_cookie(value)) is None:  # type: ignore[assignment]
            continue
        raw.append((low.encode("latin-1"), value.encode("latin-1")))
    out.raw_headers = raw
    return out
