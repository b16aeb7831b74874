"""The port proxy end to end over real sockets: each published port on a host name of
its own (``ID-PORT.localhost``, browsers' origin), and the path form
``/proxy/instances/ID/PORT/`` for API clients (bearer header only).

The Suanli app and a stand-in service both run under uvicorn on free loopback ports,
and the tests talk to the proxy with httpx and a real ``websockets`` client. This
machine's resolver does not map ``*.localhost`` (browsers do it themselves), so the
tests connect to 127.0.0.1 and send the port's ``Host`` header, which is what the proxy
routes by. The instances are created through the API; their rows are then set running
with a handle whose ``data.ports`` maps container port 8888 to the service's port,
directly in the database. That stands in for the container runtime (which publishes
``-p 127.0.0.1:HOST:8888`` and writes that handle); the server runs without its control
loop so nothing reconciles the fake rows away. Tests through a real container live with
the runtime, and a real browser's view of the origins in tests/console.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from suanli.api.app import create_app
from suanli.api.proxy import COOKIE, port_url, proxy_path, resolve_upstream
from suanli.api.proxy_app import create_proxy_app
from suanli.api.server import build
from suanli.control.access import PASS_TTL_S, check_pass, load_secret, make_pass, parse_port_host
from suanli.control.auth import Principal, hash_token
from suanli.db.models import ApiToken, Instance
from tests import http_helpers as web
from tests.async_helpers import run_async
from tests.control.control_helpers import closed_port

BIG = bytes(range(256)) * 8192  # 2 MiB


# -- real servers in threads ----------------------------------------------------------------


class Uvicorn:
    """An ASGI app under uvicorn on an ephemeral loopback port, in a thread."""

    def __init__(self, app: Any, wait: bool = True) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        if wait:
            self.wait_started()

    def wait_started(self) -> Uvicorn:
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        close_all(self)


def close_all(*servers: Uvicorn) -> None:
    """Stop them together: each takes a main-loop turn (0.1 s) and its connections' close
    to notice, so one after the other cost half a second a test."""
    for s in servers:
        s.server.should_exit = True
    for s in servers:
        s.thread.join(10)


def service_app(seen: dict[str, Any]) -> Starlette:
    """The service in the instance: echoes requests, redirects, streams, and a WebSocket echo."""

    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.scope["raw_path"].decode(),
                "query": request.scope["query_string"].decode(),
                "headers": dict(request.headers),
                "length": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
            },
            headers={"x-service": "yes"},
        )

    async def redirect(request: Request) -> Response:
        resp = RedirectResponse("/elsewhere", status_code=302)
        resp.set_cookie("a", "1")
        resp.set_cookie("b", "2")
        return resp

    async def own_address(request: Request) -> Response:  # a redirect to where the service thinks it is
        return RedirectResponse(f"http://{request.scope['server'][0]}:{request.scope['server'][1]}/there?q=1", 302)

    async def toss(request: Request) -> Response:  # cookies for the sibling ports, and over the proxy's own
        resp = Response("tossed")
        resp.set_cookie("_xsrf", "attacker", domain="localhost")
        resp.set_cookie(COOKIE, "forged", domain="localhost")
        resp.set_cookie(COOKIE + "_x", "forged")
        return resp

    async def big(request: Request) -> Response:
        async def chunks() -> Any:
            for i in range(0, len(BIG), 65536):
                yield BIG[i : i + 65536]

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def ws(websocket: WebSocket) -> None:
        offered = websocket.scope.get("subprotocols") or []
        seen["ws_headers"] = dict(websocket.headers)
        seen["ws_path"] = websocket.scope["raw_path"].decode() + "?" + websocket.scope["query_string"].decode()
        await websocket.accept(subprotocol=offered[0] if offered else None)
        while True:
            msg = await websocket.receive()
            if msg["type"] == "websocket.disconnect":
                seen["client_close"] = msg.get("code")
                return
            text = msg.get("text")
            if text is not None and text.startswith("close:"):
                await websocket.close(code=int(text[6:]), reason="asked")
                return
            if text is not None:
                await websocket.send_text("echo:" + text)
            else:
                await websocket.send_bytes(b"echo:" + msg["bytes"])

    return Starlette(
        routes=[
            Route("/redirect", redirect),
            Route("/own-address", own_address),
            Route("/toss", toss),
            Route("/big", big),
            WebSocketRoute("/ws", ws),
            Route("/{path:path}", echo, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
        ]
    )


@dataclass
class Env:
    base: str  #: the Suanli server's proxy listener, http://127.0.0.1:PORT
    token: str  #: admin of tenant "default"
    instance: int  #: running, ports 8888 (the service) and 9000 (nothing listens)
    other: int  #: running too, port 8888 (the same service): a second instance of the same user
    pending: int  #: not running, port 8888
    seen: dict[str, Any]
    ctx: Any
    api: str = ""  #: the Suanli API

    @property
    def proxy_port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def host(self, instance: int | None = None, port: int = 8888) -> str:
        """The ``Host`` of one port's origin, as a browser sends it."""
        return f"{instance or self.instance}-{port}.localhost:{self.proxy_port}"

    def origin(self, instance: int | None = None, port: int = 8888) -> str:
        return "http://" + self.host(instance, port)

    def at(self, instance: int | None = None, port: int = 8888, **headers: str) -> dict[str, str]:
        """Headers addressing one port's origin (connecting to 127.0.0.1)."""
        return {"Host": self.host(instance, port), **headers}

    def url(self, port: int = 8888, rest: str = "", instance: int | None = None) -> str:
        """The path form (API clients)."""
        return self.base + proxy_path(instance or self.instance, port) + rest

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    seen: dict[str, Any] = {}
    service = Uvicorn(service_app(seen), wait=False)
    ctx, boot = build(tmp_path / "data", db_url, start_loop=False)
    assert boot.admin_token
    suanli, proxy = Uvicorn(create_app(ctx), wait=False), Uvicorn(create_proxy_app(ctx), wait=False)
    for started in (service, suanli, proxy):  # started together, waited for together
        started.wait_started()
    ctx.proxy_port = proxy.port  # what start_proxy records: the listing's URLs name it
    held = ExitStack()  # the port of nothing, bound until the end
    try:
        port_9000 = held.enter_context(closed_port())
        with web.client(base_url=suanli.url, headers={"Authorization": f"Bearer {boot.admin_token}"}) as api:
            ids = []
            for name in ("jupyter", "other", "waiting"):
                r = api.post("/v1/instances", json={"name": name, "gpu_milli": 100})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
        with ctx.db.transaction() as s:
            for i, ports in ((ids[0], {"8888": service.port, "9000": port_9000}), (ids[1], {"8888": service.port})):
                row = s.get(Instance, i)
                handle = {"backend": "local", "key": f"instance-{i}", "data": {"runtime": "container", "ports": ports}}
                row.state, row.handles, row.ports, row.runtime = "running", [handle], [int(p) for p in ports], "container"
            s.get(Instance, ids[2]).ports = [8888]
        yield Env(proxy.url, boot.admin_token, ids[0], ids[1], ids[2], seen, ctx, suanli.url)
    finally:
        close_all(proxy, suanli, service)
        held.close()
        ctx.db.dispose()


def new_user(env: Env, name: str, tenant: str | None = None) -> str:
    with web.client(base_url=env.api, headers=env.auth()) as api:
        if tenant:
            assert api.post("/v1/tenants", json={"name": tenant}).status_code == 201
            assert api.post("/v1/billing/topups", json={"tenant": tenant, "amount": "1000"}).status_code == 201  # prepaid
        r = api.post("/v1/users", json={"name": name, "tenant": tenant})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def error(r: httpx.Response) -> tuple[int, str, str]:
    return r.status_code, r.json()["error"]["code"], r.json()["error"]["message"]


def open_link(env: Env, instance: int | None = None, port: int = 8888, rest: str = "", token: str | None = None) -> str:
    """What a browser does with the console's link: ``?token=`` on the port's host; returns
    the ``suanli_proxy`` cookie's value (the pass) after checking its attributes."""
    sep = "&" if "?" in rest else "?"
    r = web.get(env.base + "/" + rest + f"{sep}token={token or env.token}", headers=env.at(instance, port))
    assert r.status_code == 307, r.text
    name, _, rest_of = r.headers["set-cookie"].partition("=")
    value, *attrs = rest_of.split("; ")
    assert name == COOKIE
    assert sorted(a.split("=")[0].lower() for a in attrs) == ["httponly", "max-age", "path", "samesite"]  # no Domain
    assert "Path=/" in attrs and "HttpOnly" in attrs and "SameSite=lax" in attrs and f"Max-Age={PASS_TTL_S}" in attrs
    return value


# -- each port on its own host (browsers) ---------------------------------------------------------


def test_a_port_host_passes_the_path_unchanged(env: Env) -> None:
    r = web.get(env.base + "/tree/a%2Fb?x=1&token=jupyters-own", headers=env.at(**env.auth(), Cookie="_xsrf=abc"))
    assert r.status_code == 200, r.text
    assert r.headers["x-service"] == "yes"
    got = r.json()
    assert got["method"] == "GET" and got["path"] == "/tree/a%2Fb"  # unchanged, encoding kept
    assert got["query"] == "x=1&token=jupyters-own"  # a service's own token= is not ours: passed through
    h = got["headers"]
    assert "authorization" not in h and h["cookie"] == "_xsrf=abc"
    assert h["host"] == env.host()  # the client's Host (Jupyter checks Origin against it)
    assert "x-forwarded-prefix" not in h
    assert h["x-forwarded-for"] == "127.0.0.1" and h["x-forwarded-proto"] == "http"

    # on a port's host every path is the service's, the path form's included
    r = web.get(env.base + f"/proxy/instances/{env.other}/8888/x", headers=env.at(**env.auth()))
    assert r.json()["path"] == f"/proxy/instances/{env.other}/8888/x"

    r = web.post(env.base + "/api/contents", headers=env.at(**env.auth()), content=BIG)
    assert r.status_code == 200
    assert (r.json()["method"], r.json()["length"], r.json()["sha256"]) == ("POST", len(BIG), hashlib.sha256(BIG).hexdigest())

    def chunked() -> Iterator[bytes]:  # no Content-Length: streamed as chunked
        yield b"part1-"
        yield b"part2"

    r = web.put(env.base + "/upload", headers=env.at(**env.auth()), content=chunked())
    assert (r.json()["method"], r.json()["length"]) == ("PUT", 11)

    r = web.get(env.base + "/big", headers=env.at(**env.auth()))
    assert r.status_code == 200 and r.content == BIG

    r = web.head(env.base + "/x", headers=env.at(**env.auth()))
    assert r.status_code == 200 and r.content == b""


def test_a_port_hosts_redirects_and_cookies(env: Env) -> None:
    r = web.get(env.base + "/redirect", headers=env.at(**env.auth()))
    assert r.status_code == 302 and r.headers["location"] == "/elsewhere"  # the service's own root: unchanged
    assert sorted(r.headers.get_list("set-cookie")) == ["a=1; Path=/; SameSite=lax", "b=2; Path=/; SameSite=lax"]
    r = web.get(env.base + "/own-address", headers=env.at(**env.auth()))
    assert r.headers["location"] == "/there?q=1"  # the upstream's loopback address never reaches the browser
    # a service sets cookies for its own host only, and never the proxy's
    r = web.get(env.base + "/toss", headers=env.at(**env.auth()))
    assert r.status_code == 200 and r.headers.get_list("set-cookie") == ["_xsrf=attacker; Path=/; SameSite=lax"]


def test_token_link_sets_a_host_only_pass_then_the_cookie_alone_works(env: Env) -> None:
    r = web.get(env.base + f"/lab/a%2Fb?token={env.token}&x=1", headers=env.at())
    assert r.status_code == 307, r.text
    assert r.headers["location"] == "/lab/a%2Fb?x=1"
    value = open_link(env, rest="lab")
    assert env.token not in value and check_pass(load_secret(env.ctx.data_dir), value, env.instance, 8888, time.time())
    cookie = {"Cookie": f"{COOKIE}={value}"}

    r = web.get(env.base + "/lab/a%2Fb?x=1", headers=env.at(**cookie))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["path"] == "/lab/a%2Fb" and got["query"] == "x=1"
    assert COOKIE not in got["headers"].get("cookie", "") and "authorization" not in got["headers"]

    # a service's own Authorization (an API key) passes through when the cookie authenticates
    r = web.get(env.base + "/v1/models", headers=env.at(**cookie, Authorization="Bearer service-api-key"))
    assert r.status_code == 200 and r.json()["headers"]["authorization"] == "Bearer service-api-key"

    # a sibling tossed a forged suanli_proxy in next to the real one: the real one still counts
    r = web.get(env.base + "/x", headers=env.at(Cookie=f"{COOKIE}=forged; {COOKIE}={value}"))
    assert r.status_code == 200


def test_the_hole_is_closed_a_pass_opens_its_own_port_only(env: Env) -> None:
    """A page of instance A runs on A's origin. Even had the browser sent it A's cookie
    for B (it does not: host-only), the proxy refuses it: the pass names one port."""
    value = open_link(env, env.instance)
    cookie = f"{COOKIE}={value}"
    assert web.get(env.base + "/x", headers=env.at(env.instance, Cookie=cookie)).status_code == 200
    for instance, port in ((env.other, 8888), (env.instance, 9000), (env.pending, 8888)):
        status, code, _ = error(web.get(env.base + "/x", headers=env.at(instance, port, Cookie=cookie)))
        assert (status, code) == (401, "unauthorized"), (instance, port)

    # the path form is one origin for every port: it takes no cookie and no ?token=, only the header
    status, code, message = error(web.get(env.url(instance=env.other, rest="x"), headers={"Cookie": cookie}))
    assert (status, code) == (401, "unauthorized") and "only an Authorization: Bearer header" in message
    r = web.get(env.url(instance=env.other, rest=f"x?token={env.token}"))
    assert r.status_code == 401 and "set-cookie" not in r.headers
    assert web.get(env.url(instance=env.other, rest="x"), headers=env.auth()).status_code == 200

    # a pass is not the token and is not made up: tampered, expired, or of another server's secret
    secret = load_secret(env.ctx.data_dir)
    token_id = check_pass(secret, value, env.instance, 8888, time.time())
    assert token_id is not None
    fields = value.split(".")  # p1.TOKEN_ID.INSTANCE.PORT.EXPIRES.MAC: the instance changed, the MAC kept
    tampered = ".".join([*fields[:2], str(env.other), *fields[3:]])
    expired = make_pass(secret, token_id, env.instance, 8888, int(time.time()) - 1)
    foreign = make_pass(os.urandom(32), token_id, env.instance, 8888, int(time.time()) + 60)
    for bad in (tampered, expired, foreign, env.token):
        assert (
            web.get(env.base + "/x", headers=env.at(env.other if bad is tampered else None, Cookie=f"{COOKIE}={bad}")).status_code
            == 401
        ), bad


def test_a_revoked_token_revokes_its_passes(env: Env) -> None:
    token = new_user(env, "carol")
    value = open_link(env, token=token)
    with env.ctx.db.transaction() as s:
        s.query(ApiToken).filter(ApiToken.token_hash == hash_token(token)).update({"revoked": True})
    status, _, message = error(web.get(env.base + "/x", headers=env.at(Cookie=f"{COOKIE}={value}")))
    assert status == 401 and "revoked" in message


def test_the_secret_is_private_and_survives_a_restart(env: Env, tmp_path: Path) -> None:
    path = env.ctx.data_dir / "proxy-secret"
    assert path.stat().st_mode & 0o777 == 0o600
    value = open_link(env)
    again = Uvicorn(create_proxy_app(env.ctx))  # a second app on the same data dir: the same key
    try:
        r = web.get(again.url + "/x", headers={"Host": f"{env.instance}-8888.localhost", "Cookie": f"{COOKIE}={value}"})
        assert r.status_code == 200
    finally:
        again.close()
    assert load_secret(tmp_path / "elsewhere") != load_secret(env.ctx.data_dir)


def test_cookie_is_refused_from_another_origin(env: Env) -> None:
    """Cross-site request forgery, credentialed cross-origin reads and sibling subresources
    with the proxy's cookie (SameSite=Lax lets sibling sub-domains through): only the
    port's own pages, and navigations to it, may use it."""
    cookie = f"{COOKIE}={open_link(env)}"
    for evil in ("http://evil.example", env.origin(env.other), env.base, "null"):
        for method in ("POST", "GET"):
            r = web.request(method, env.base + "/api/kernels", headers=env.at(Cookie=cookie, Origin=evil), content=b"{}")
            assert error(r)[:2] == (403, "cross_origin"), (method, evil)
    for site, mode in (("same-site", "no-cors"), ("cross-site", "cors"), ("same-site", "websocket")):
        r = web.get(env.base + "/lab", headers=env.at(Cookie=cookie, **{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode}))
        assert error(r)[:2] == (403, "cross_origin"), (site, mode)
    navigate = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert web.get(env.base + "/lab", headers=env.at(Cookie=cookie, **navigate)).status_code == 200  # a link opens it
    own = {"Origin": env.origin(), "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
    assert web.post(env.base + "/api/kernels", headers=env.at(Cookie=cookie, **own), content=b"{}").status_code == 200
    assert web.get(env.base + "/api/kernels", headers=env.at(Cookie=cookie, **own)).status_code == 200
    # a bearer header is no ambient credential: any origin may send it
    assert web.post(env.base + "/api/kernels", headers=env.at(**env.auth(), Origin="http://evil.example")).status_code == 200


def test_bad_link_token_sets_no_cookie(env: Env) -> None:
    r = web.get(env.base + "/?token=sl_not-a-token", headers=env.at())
    assert r.status_code == 401 and "set-cookie" not in r.headers


def test_refusals(env: Env) -> None:
    assert error(web.get(env.base + "/", headers=env.at()))[:2] == (401, "unauthorized")
    assert error(web.get(env.base + "/", headers=env.at(**env.auth("sl_forged"))))[:2] == (401, "unauthorized")
    assert error(web.get(env.url()))[:2] == (401, "unauthorized")

    other = new_user(env, "eve", tenant="lab")
    assert error(web.get(env.base + "/", headers=env.at(**env.auth(other))))[:2] == (404, "not_found")
    assert error(web.get(env.url(), headers=env.auth(other)))[:2] == (404, "not_found")
    r = web.get(env.base + f"/?token={other}", headers=env.at())
    assert r.status_code == 404 and "set-cookie" not in r.headers

    member = new_user(env, "bob")  # a member of the instance's tenant may use it
    assert web.get(env.base + "/", headers=env.at(**env.auth(member))).status_code == 200

    status, code, message = error(web.get(env.base + "/", headers=env.at(port=7000, **env.auth())))
    assert (status, code) == (404, "not_published") and "8888, 9000" in message

    status, code, message = error(web.get(env.base + "/", headers=env.at(env.pending, **env.auth())))
    assert (status, code) == (409, "invalid_state") and "pending" in message

    status, code, message = error(web.post(env.base + "/x", headers=env.at(port=9000, **env.auth()), content=b"x"))
    assert (status, code) == (502, "upstream_unreachable") and "nothing listens on port 9000" in message

    assert error(web.get(env.base + "/", headers=env.at(99999, **env.auth())))[:2] == (404, "not_found")
    # neither a port's host nor the path form: the proxy says where ports are
    status, code, message = error(web.get(env.base + "/lab", headers=env.auth()))
    assert (status, code) == (404, "not_found") and "ID-PORT.localhost" in message
    assert error(web.get(env.base + "/", headers={"Host": "7-8888.evil.example", **env.auth()}))[:2] == (404, "not_found")


# -- the path form (API clients, bearer header only) ------------------------------------------------


def test_path_form_strips_its_prefix(env: Env) -> None:
    r = web.get(env.url(rest="tree/a%2Fb?x=1&token=jupyters-own"), headers={**env.auth(), "Cookie": "_xsrf=abc"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["path"] == "/tree/a%2Fb" and got["query"] == "x=1&token=jupyters-own"
    h = got["headers"]
    assert "authorization" not in h and h["cookie"] == "_xsrf=abc" and h["host"] == env.base[7:]
    assert h["x-forwarded-prefix"] == proxy_path(env.instance, 8888).rstrip("/")

    r = web.post(env.url(rest="api/contents"), headers=env.auth(), content=BIG)
    assert (r.json()["length"], r.json()["sha256"]) == (len(BIG), hashlib.sha256(BIG).hexdigest())


def test_path_form_redirects_stay_under_the_prefix(env: Env) -> None:
    r = web.get(env.base + f"/proxy/instances/{env.instance}/8888?a=1", headers=env.auth())
    assert r.status_code == 307 and r.headers["location"] == proxy_path(env.instance, 8888) + "?a=1"

    r = web.get(env.url(rest="redirect"), headers=env.auth())
    assert r.status_code == 302
    assert r.headers["location"] == proxy_path(env.instance, 8888) + "elsewhere"
    assert sorted(r.headers.get_list("set-cookie")) == ["a=1; Path=/; SameSite=lax", "b=2; Path=/; SameSite=lax"]
    r = web.get(env.url(rest="own-address"), headers=env.auth())
    assert r.headers["location"] == proxy_path(env.instance, 8888) + "there?q=1"


def test_proxy_alone_on_its_own_origin(env: Env) -> None:
    own = Uvicorn(create_proxy_app(env.ctx))
    try:
        r = web.get(own.url + proxy_path(env.instance, 8888) + "x", headers=env.auth())
        assert r.status_code == 200 and r.json()["path"] == "/x"
        assert web.get(own.url + "/v1/instances", headers=env.auth()).status_code == 404  # no API there
    finally:
        own.close()
    assert web.get(env.api + f"/proxy/instances/{env.instance}/8888/", headers=env.auth()).status_code == 404


def test_resolve_upstream_and_listing_url(env: Env) -> None:
    who = Principal(user_id=1, tenant_id=1, name="admin", role="admin")
    up = resolve_upstream(env.ctx.db, who, env.instance, 8888)
    assert (up.host, up.port) == ("127.0.0.1", 8888) and up.host_port > 0
    assert port_url("https", "proxy.example.com", 8471, 7, 8888) == "https://7-8888.proxy.example.com:8471/"
    assert parse_port_host("7-8888.Proxy.Example.com:8471", "proxy.example.com") == (7, 8888)
    for host in (
        "7-8888.example.com",
        "7-8888.proxy.example.com.evil",
        "x7-8888.proxy.example.com",
        "7-70000.localhost",
        "0-8888.localhost",
        "7-8888.a.localhost",
        None,
    ):
        assert parse_port_host(host, "localhost" if host and "localhost" in host else "proxy.example.com") is None, host
    listed = web.get(env.api + "/v1/instances", headers=env.auth()).json()
    ports = {i["id"]: i["ports"] for i in listed}
    assert ports[env.instance] == {
        "8888": f"http://{env.instance}-8888.localhost:{env.proxy_port}/",
        "9000": f"http://{env.instance}-9000.localhost:{env.proxy_port}/",
    }


# -- WebSocket --------------------------------------------------------------------------------


def ws_connect(env: Env, rest: str = "ws", instance: int | None = None, port: int = 8888, **kw: Any) -> Any:
    """A WebSocket to one port's host (the URL's host name, 127.0.0.1's socket)."""
    return connect(f"ws://{env.host(instance, port)}/{rest}", host="127.0.0.1", port=env.proxy_port, proxy=None, **kw)


def ws_path(env: Env, rest: str = "ws", port: int = 8888, instance: int | None = None) -> str:
    return "ws" + env.base[4:] + proxy_path(instance or env.instance, port) + rest


def test_websocket_echo_text_binary_and_close_codes(env: Env) -> None:
    async def main() -> None:
        protocol = "v1.kernel.websocket.jupyter.org"
        async with ws_connect(
            env, "ws?session=1", additional_headers=env.auth(), subprotocols=[protocol], origin=env.origin(), max_size=None
        ) as ws:
            assert ws.subprotocol == protocol
            await ws.send("hello")
            assert await ws.recv() == "echo:hello"
            await ws.send(BIG)
            assert await ws.recv() == b"echo:" + BIG
            await ws.send("close:4002")  # the service closes: its code reaches the client
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 4002 and ws.close_reason == "asked"
        h = env.seen["ws_headers"]
        assert env.seen["ws_path"] == "/ws?session=1"
        assert "authorization" not in h and h["origin"] == env.origin() and h["host"] == env.host()

        async with connect(ws_path(env), additional_headers=env.auth(), proxy=None) as ws:  # the path form
            await ws.send(b"\x00\x01")
            assert await ws.recv() == b"echo:\x00\x01"
            await ws.close(code=4001)  # the client closes: its code reaches the service
        assert env.seen["ws_path"] == "/ws?"
        for _ in range(100):
            if env.seen.get("client_close") == 4001:
                break
            await asyncio.sleep(0.05)
        assert env.seen.get("client_close") == 4001

    run_async(main())


def test_websocket_with_the_cookie_on_its_own_origin_only(env: Env) -> None:
    async def main() -> None:
        cookie = {"Cookie": f"_xsrf=1; {COOKIE}={open_link(env)}"}
        async with ws_connect(env, additional_headers=cookie, origin=env.origin()) as ws:
            await ws.send("x")
            assert await ws.recv() == "echo:x"
        assert env.seen["ws_headers"]["cookie"] == "_xsrf=1"

        for evil in ("http://evil.example", env.origin(env.other)):  # WebSocket hijacking from another origin
            with pytest.raises(InvalidStatus) as refused:
                async with ws_connect(env, additional_headers=cookie, origin=evil):
                    pass
            assert refused.value.response.status_code == 403
        for instance in (env.other,):  # A's pass on B's host
            with pytest.raises(InvalidStatus) as refused:
                async with ws_connect(env, instance=instance, additional_headers=cookie, origin=env.origin(instance)):
                    pass
            assert refused.value.response.status_code == 401
        with pytest.raises(InvalidStatus) as refused:  # the path form takes no cookie
            async with connect(ws_path(env), additional_headers=cookie, proxy=None):
                pass
        assert refused.value.response.status_code == 401
        with pytest.raises(InvalidStatus) as refused:  # nor ?token=
            async with connect(ws_path(env, f"ws?token={env.token}"), proxy=None):
                pass
        assert refused.value.response.status_code == 401

        async with ws_connect(env, f"ws?token={env.token}") as ws:  # a link's token on the port's host, stripped
            await ws.send("y")
            assert await ws.recv() == "echo:y"
        assert env.seen["ws_path"] == "/ws?"

    run_async(main())


def test_websocket_refusals(env: Env) -> None:
    async def status(ctx: Any) -> int:
        with pytest.raises(InvalidStatus) as info:
            async with ctx:
                pass
        return info.value.response.status_code

    async def main() -> None:
        assert await status(ws_connect(env)) == 401
        other = new_user(env, "mallory", tenant="other")
        assert await status(ws_connect(env, additional_headers=env.auth(other))) == 404
        assert await status(ws_connect(env, port=7000, additional_headers=env.auth())) == 404
        assert await status(ws_connect(env, port=9000, additional_headers=env.auth())) == 502
        assert await status(ws_connect(env, "nows", additional_headers=env.auth())) in (403, 404)  # the service refuses
        assert await status(connect(env.base.replace("http", "ws") + "/ws", additional_headers=env.auth(), proxy=None)) == 404

    run_async(main())
