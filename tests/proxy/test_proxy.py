"""The port proxy (``/proxy/instances/ID/PORT/...``) end to end over real sockets.

The Suanli app and a stand-in service both run under uvicorn on free loopback ports,
and the tests talk to the proxy with httpx and a real ``websockets`` client. The
instance is created through the API; its row is then set running with a handle whose
``data.ports`` maps container port 8888 to the service's port, directly in the database.
That stands in for the container runtime (which publishes ``-p 127.0.0.1:HOST:8888``
and writes that handle); the server runs without its control loop so nothing
reconciles the fake row away. A test through a real container lives with the runtime.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
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
from suanli.api.proxy import create_proxy_app, proxy_path, proxy_url, resolve_upstream
from suanli.api.server import build
from suanli.control.auth import Principal
from suanli.db.models import Instance

BIG = bytes(range(256)) * 8192  # 2 MiB


# -- real servers in threads ----------------------------------------------------------------

class Uvicorn:
    """An ASGI app under uvicorn on an ephemeral loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def service_app(seen: dict[str, Any]) -> Starlette:
    """The service in the instance: echoes requests, redirects, streams, and a WebSocket echo."""

    async def echo(request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"method": request.method, "path": request.scope["raw_path"].decode(),
                             "query": request.scope["query_string"].decode(), "headers": dict(request.headers),
                             "length": len(body), "sha256": hashlib.sha256(body).hexdigest()},
                            headers={"x-service": "yes"})

    async def redirect(request: Request) -> Response:
        resp = RedirectResponse("/elsewhere", status_code=302)
        resp.set_cookie("a", "1")
        resp.set_cookie("b", "2")
        return resp

    async def big(request: Request) -> Response:
        async def chunks() -> Any:
            for i in range(0, len(BIG), 65536):
                yield BIG[i:i + 65536]
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

    return Starlette(routes=[
        Route("/redirect", redirect), Route("/big", big), WebSocketRoute("/ws", ws),
        WebSocketRoute("/proxy/instances/{i}/absolute/{p}/ws", ws), Route("/proxy/instances/{i}/absolute/{p}/redirect", redirect),
        Route("/{path:path}", echo, methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]),
    ])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Env:
    base: str  #: the Suanli server's proxy listener (an origin of its own)
    token: str  #: admin of tenant "default"
    instance: int  #: running, ports 8888 (the service) and 9000 (nothing listens)
    pending: int  #: not running, port 8888
    seen: dict[str, Any]
    ctx: Any
    api: str = ""  #: the Suanli API

    def url(self, port: int = 8888, rest: str = "", instance: int | None = None) -> str:
        return self.base + proxy_path(instance or self.instance, port) + rest

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> Iterator[Env]:
    seen: dict[str, Any] = {}
    service = Uvicorn(service_app(seen))
    ctx, boot = build(tmp_path / "data", db_url, start_loop=False)
    assert boot.admin_token
    suanli = Uvicorn(create_app(ctx))
    proxy = Uvicorn(create_proxy_app(ctx))
    try:
        with httpx.Client(base_url=suanli.url, headers={"Authorization": f"Bearer {boot.admin_token}"}) as api:
            ids = []
            for name in ("jupyter", "waiting"):
                r = api.post("/v1/instances", json={"name": name, "gpu_milli": 100})
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
        handle = {"backend": "local", "key": f"instance-{ids[0]}",
                  "data": {"runtime": "container", "ports": {"8888": service.port, "9000": free_port()}}}
        with ctx.db.transaction() as s:
            row = s.get(Instance, ids[0])
            row.state, row.handles, row.ports, row.runtime = "running", [handle], [8888, 9000], "container"
            s.get(Instance, ids[1]).ports = [8888]
        yield Env(proxy.url, boot.admin_token, ids[0], ids[1], seen, ctx, suanli.url)
    finally:
        proxy.close()
        suanli.close()
        service.close()
        ctx.db.dispose()


def new_user(env: Env, name: str, tenant: str | None = None) -> str:
    with httpx.Client(base_url=env.api, headers=env.auth()) as api:
        if tenant:
            assert api.post("/v1/tenants", json={"name": tenant}).status_code == 201
        r = api.post("/v1/users", json={"name": name, "tenant": tenant})
        assert r.status_code == 201, r.text
        return r.json()["token"]


def error(r: httpx.Response) -> tuple[int, str, str]:
    return r.status_code, r.json()["error"]["code"], r.json()["error"]["message"]


# -- HTTP -----------------------------------------------------------------------------------

def test_get_and_post_with_bearer_header(env: Env) -> None:
    r = httpx.get(env.url(rest="tree/a%2Fb?x=1&token=jupyters-own"), headers={**env.auth(), "Cookie": "_xsrf=abc"})
    assert r.status_code == 200, r.text
    assert r.headers["x-service"] == "yes"
    got = r.json()
    assert got["method"] == "GET" and got["path"] == "/tree/a%2Fb"  # prefix stripped, encoding kept
    assert got["query"] == "x=1&token=jupyters-own"  # a service's own token= is not ours: passed through
    h = got["headers"]
    assert "authorization" not in h and h["cookie"] == "_xsrf=abc"
    assert h["host"] == f"127.0.0.1:{env.base.rsplit(':', 1)[1]}"  # the client's Host (Jupyter checks Origin against it)
    assert h["x-forwarded-prefix"] == proxy_path(env.instance, 8888).rstrip("/")
    assert h["x-forwarded-for"] == "127.0.0.1" and h["x-forwarded-proto"] == "http"

    r = httpx.post(env.url(rest="api/contents"), headers=env.auth(), content=BIG)
    assert r.status_code == 200
    assert (r.json()["method"], r.json()["length"], r.json()["sha256"]) == ("POST", len(BIG), hashlib.sha256(BIG).hexdigest())

    def chunked() -> Iterator[bytes]:  # no Content-Length: streamed as chunked
        yield b"part1-"
        yield b"part2"
    r = httpx.put(env.url(rest="upload"), headers=env.auth(), content=chunked())
    assert (r.json()["method"], r.json()["length"]) == ("PUT", 11)

    r = httpx.get(env.url(rest="big"), headers=env.auth())
    assert r.status_code == 200 and r.content == BIG

    r = httpx.head(env.url(rest="x"), headers=env.auth())
    assert r.status_code == 200 and r.content == b""


def test_redirects_stay_under_the_prefix(env: Env) -> None:
    r = httpx.get(env.base + f"/proxy/instances/{env.instance}/8888?a=1", headers=env.auth())
    assert r.status_code == 307 and r.headers["location"] == proxy_path(env.instance, 8888) + "?a=1"

    r = httpx.get(env.url(rest="redirect"), headers=env.auth())
    assert r.status_code == 302
    assert r.headers["location"] == proxy_path(env.instance, 8888) + "elsewhere"
    assert sorted(r.headers.get_list("set-cookie")) == ["a=1; Path=/; SameSite=lax", "b=2; Path=/; SameSite=lax"]


def test_absolute_form_keeps_the_full_path(env: Env) -> None:
    """For services told their base URL (JupyterLab's ``--ServerApp.base_url``)."""
    prefix = proxy_path(env.instance, 8888, absolute=True)
    r = httpx.get(env.base + prefix + "lab?x=1", headers=env.auth())
    assert r.status_code == 200
    assert r.json()["path"] == prefix + "lab" and r.json()["query"] == "x=1"
    assert "x-forwarded-prefix" not in r.json()["headers"]
    r = httpx.get(env.base + prefix + "redirect", headers=env.auth())
    assert r.headers["location"] == "/elsewhere"  # passed through: the service knows its base URL


def test_token_link_sets_a_cookie_then_the_cookie_alone_works(env: Env) -> None:
    with httpx.Client(base_url=env.base) as browser:
        r = browser.get(env.url(rest=f"lab/a%2Fb?token={env.token}&x=1"))
        assert r.status_code == 307, r.text
        assert r.headers["location"] == proxy_path(env.instance, 8888) + "lab/a%2Fb?x=1"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"suanli_proxy_{env.instance}={env.token};")
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and f"Path=/proxy/instances/{env.instance}/" in cookie
        assert browser.cookies.get(f"suanli_proxy_{env.instance}") == env.token

        r = browser.get(r.headers["location"])
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["path"] == "/lab/a%2Fb" and got["query"] == "x=1"
        assert "suanli_proxy" not in got["headers"].get("cookie", "") and "authorization" not in got["headers"]

        # a service's own Authorization (an API key) passes through when the cookie authenticates
        r = browser.get(env.url(rest="v1/models"), headers={"Authorization": "Bearer service-api-key"})
        assert r.status_code == 200 and r.json()["headers"]["authorization"] == "Bearer service-api-key"

        # the cookie is scoped to that instance: another instance's path does not get it
        r = browser.get(env.url(instance=env.pending))
        assert r.status_code == 401


def test_cookie_is_refused_from_another_origin(env: Env) -> None:
    """Cross-site request forgery with the proxy's cookie (SameSite=Lax lets sibling
    sub-domains through): unsafe methods need the server's own Origin."""
    cookie = {"Cookie": f"suanli_proxy_{env.instance}={env.token}"}
    evil = {**cookie, "Origin": "http://evil.example"}
    status, code, _ = error(httpx.post(env.url(rest="api/kernels"), headers=evil, content=b"{}"))
    assert (status, code) == (403, "cross_origin")
    assert httpx.get(env.url(rest="lab"), headers=evil).status_code == 200  # a link from elsewhere may open it
    assert httpx.post(env.url(rest="api/kernels"), headers={**cookie, "Origin": env.base}, content=b"{}").status_code == 200
    assert httpx.post(env.url(rest="api/kernels"), headers={**env.auth(), "Origin": "http://evil.example"}).status_code == 200


def test_bad_link_token_sets_no_cookie(env: Env) -> None:
    r = httpx.get(env.url(rest="?token=sl_not-a-token"))
    assert r.status_code == 401 and "set-cookie" not in r.headers


def test_refusals(env: Env) -> None:
    assert error(httpx.get(env.url()))[:2] == (401, "unauthorized")
    assert error(httpx.get(env.url(), headers=env.auth("sl_forged")))[:2] == (401, "unauthorized")

    other = new_user(env, "eve", tenant="lab")
    assert error(httpx.get(env.url(), headers=env.auth(other)))[:2] == (404, "not_found")
    r = httpx.get(env.url(rest=f"?token={other}"))
    assert r.status_code == 404 and "set-cookie" not in r.headers

    member = new_user(env, "bob")  # a member of the instance's tenant may use it
    assert httpx.get(env.url(), headers=env.auth(member)).status_code == 200

    status, code, message = error(httpx.get(env.url(port=7000), headers=env.auth()))
    assert (status, code) == (404, "not_published") and "8888, 9000" in message

    status, code, message = error(httpx.get(env.url(instance=env.pending), headers=env.auth()))
    assert (status, code) == (409, "invalid_state") and "pending" in message

    status, code, message = error(httpx.post(env.url(port=9000, rest="x"), headers=env.auth(), content=b"x"))
    assert (status, code) == (502, "upstream_unreachable") and "nothing listens on port 9000" in message

    assert error(httpx.get(env.base + "/proxy/instances/99999/8888/", headers=env.auth()))[:2] == (404, "not_found")


def test_proxy_alone_on_its_own_origin(env: Env) -> None:
    own = Uvicorn(create_proxy_app(env.ctx))
    try:
        r = httpx.get(own.url + proxy_path(env.instance, 8888) + "x", headers=env.auth())
        assert r.status_code == 200 and r.json()["path"] == "/x"
        assert httpx.get(own.url + "/v1/instances", headers=env.auth()).status_code == 404  # no API there
    finally:
        own.close()


def test_resolve_upstream_and_listing_url(env: Env) -> None:
    who = Principal(user_id=1, tenant_id=1, name="admin", role="admin")
    up = resolve_upstream(env.ctx.db, who, env.instance, 8888)
    assert (up.host, up.port) == ("127.0.0.1", 8888) and up.host_port > 0
    assert proxy_url("http://gpu.example:8470/", 7, 8888) == "http://gpu.example:8470/proxy/instances/7/8888/"


# -- WebSocket --------------------------------------------------------------------------------

def ws_url(env: Env, rest: str = "ws", port: int = 8888, absolute: bool = False) -> str:
    return "ws" + env.base[4:] + proxy_path(env.instance, port, absolute=absolute) + rest


def test_websocket_echo_text_binary_and_close_codes(env: Env) -> None:
    async def main() -> None:
        protocol = "v1.kernel.websocket.jupyter.org"
        async with connect(ws_url(env, "ws?session=1"), additional_headers=env.auth(), subprotocols=[protocol],
                           origin=env.base, proxy=None, max_size=None) as ws:
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
        assert "authorization" not in h and h["origin"] == env.base and h["host"] == env.base[7:]

        async with connect(ws_url(env), additional_headers=env.auth(), proxy=None) as ws:
            await ws.send(b"\x00\x01")
            assert await ws.recv() == b"echo:\x00\x01"
            await ws.close(code=4001)  # the client closes: its code reaches the service
        for _ in range(100):
            if env.seen.get("client_close") == 4001:
                break
            await asyncio.sleep(0.05)
        assert env.seen.get("client_close") == 4001

    asyncio.run(main())


def test_websocket_with_cookie_and_absolute_path(env: Env) -> None:
    async def main() -> None:
        cookie = {"Cookie": f"_xsrf=1; suanli_proxy_{env.instance}={env.token}"}
        async with connect(ws_url(env, "ws", absolute=True), additional_headers=cookie, proxy=None) as ws:
            await ws.send("x")
            assert await ws.recv() == "echo:x"
        assert env.seen["ws_path"] == proxy_path(env.instance, 8888, absolute=True) + "ws?"
        assert env.seen["ws_headers"]["cookie"] == "_xsrf=1"

        with pytest.raises(InvalidStatus) as refused:  # WebSocket hijacking from another origin
            async with connect(ws_url(env), additional_headers=cookie, origin="http://evil.example", proxy=None):
                pass
        assert refused.value.response.status_code == 403
        async with connect(ws_url(env), additional_headers=cookie, origin=env.base, proxy=None) as ws:
            await ws.send("same origin")
            assert await ws.recv() == "echo:same origin"

        async with connect(ws_url(env, f"ws?token={env.token}"), proxy=None) as ws:  # a link's token, stripped
            await ws.send("y")
            assert await ws.recv() == "echo:y"
        assert env.seen["ws_path"] == "/ws?"

    asyncio.run(main())


def test_websocket_refusals(env: Env) -> None:
    async def status(url: str, **kw: Any) -> int:
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, proxy=None, **kw):
                pass
        return info.value.response.status_code

    async def main() -> None:
        assert await status(ws_url(env)) == 401
        other = new_user(env, "mallory", tenant="other")
        assert await status(ws_url(env), additional_headers=env.auth(other)) == 404
        assert await status(ws_url(env, port=7000), additional_headers=env.auth()) == 404
        assert await status(ws_url(env, port=9000), additional_headers=env.auth()) == 502
        assert await status(ws_url(env, "nows"), additional_headers=env.auth()) in (403, 404)  # the service refuses

    asyncio.run(main())
