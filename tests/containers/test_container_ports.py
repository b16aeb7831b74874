"""A published port of a real container through the server's port proxy (its own
listener, one host name per port): HTTP and WebSocket, only with a credential that may
see the instance.

This machine's resolver does not map ``*.localhost`` (browsers do it themselves), so the
tests connect to 127.0.0.1 and send the port's ``Host`` header, which the proxy routes by.
"""

from __future__ import annotations

import json
import socket
import subprocess
from urllib.parse import urlsplit, urlunsplit

from suanli.client import SuanliClient
from tests import http_helpers as web
from tests.control.control_helpers import LiveServer, cli_command, wait_until

#: A stdlib-only HTTP + WebSocket echo service, run inside the instance (no pip there).
ECHO = r"""
import base64, hashlib, socket, struct, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def frames(c):
    while True:
        h = c.recv(2)
        if len(h) < 2: return
        op, n = h[0] & 15, h[1] & 127
        if n == 126: n = struct.unpack(">H", c.recv(2))[0]
        elif n == 127: n = struct.unpack(">Q", c.recv(8))[0]
        mask = c.recv(4); data = b""
        while len(data) < n: data += c.recv(n - len(data))
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        head = bytes([0x80 | op]) + (bytes([len(data)]) if len(data) < 126 else b"\x7e" + struct.pack(">H", len(data)))
        c.sendall(head + data)
        if op == 8: return
def serve(c):
    req = b""
    while b"\r\n\r\n" not in req: req += c.recv(4096)
    head = req.decode().split("\r\n")
    hdrs = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in head[1:] if l)}
    if hdrs.get("upgrade", "").lower() == "websocket":
        acc = base64.b64encode(hashlib.sha1((hdrs["sec-websocket-key"] + GUID).encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Accept: {acc}\r\n\r\n").encode())
        frames(c)
    else:
        body = f"hello from {socket.gethostname()} path={head[0].split()[1]}".encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8888)); s.listen(16)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def via_loopback(url: str) -> tuple[str, dict[str, str]]:
    """``url`` of a port's host as 127.0.0.1's URL and the ``Host`` header that names the port."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}")), {"Host": parts.netloc}


def test_http_and_websocket_reach_the_instance_through_the_proxy(live: LiveServer) -> None:
    from websockets.sync.client import connect

    admin = live.client()
    r = subprocess.run(
        cli_command("instances", "create", "--gpu", "h100:1", "--port", "8888", "--wait", "--json"),
        capture_output=True,
        text=True,
        env=live.cli_env(),
        timeout=120,
    )
    inst = json.loads(r.stdout)
    url = inst["ports"]["8888"]
    assert url == f"http://{inst['id']}-8888.localhost:{live.proxy_port}/"
    start = admin.exec(
        inst["id"],
        f"cat > /workspace/echo.py <<'EOF'\n{ECHO}\nEOF\n"
        "setsid python3 /workspace/echo.py > /workspace/echo.log 2>&1 < /dev/null &",
        30,
    )
    assert start["exit_code"] == 0, start
    base, host = via_loopback(url)
    auth = {"Authorization": f"Bearer {live.token}"}
    page = wait_until(lambda: (x := web.get(base + "lab?x=1", headers={**host, **auth})).status_code == 200 and x, 20)
    assert page.text == f"hello from instance-{inst['id']} path=/lab?x=1"  # the path reaches the service unchanged
    assert web.get(base, headers=host).status_code == 401  # no credential
    admin.request("POST", "/v1/tenants", json={"name": "other"})
    admin.topup("other", "1000")  # prepaid: a new tenant rents nothing without a balance
    stranger = admin.request("POST", "/v1/users", json={"name": "s", "tenant": "other"})["token"]
    assert web.get(base, headers={**host, "Authorization": f"Bearer {stranger}"}).status_code == 404
    assert SuanliClient(live.url, stranger).instances() == []

    # a browser's link: ?token= traded for a host-only pass, which then opens this port alone
    link = web.get(base + f"lab?token={live.token}", headers=host)
    assert link.status_code == 307 and link.headers["location"] == "/lab" and "Domain" not in link.headers["set-cookie"]
    cookie = {"Cookie": link.headers["set-cookie"].split(";")[0]}
    assert web.get(base + "lab", headers={**host, **cookie}).text.endswith("path=/lab")
    # the path form (API clients): the bearer header opens it, the browser's cookie does not
    path_form = f"http://127.0.0.1:{live.proxy_port}/proxy/instances/{inst['id']}/8888/"
    assert web.get(path_form + "x", headers=auth).text.endswith("path=/x")
    assert web.get(path_form + "x", headers=cookie).status_code == 401
    # the API's own origin serves no proxy: renters' pages never share the console's origin
    assert web.get(f"{live.url}/proxy/instances/{inst['id']}/8888/", headers=auth).status_code == 404

    sock = socket.create_connection(("127.0.0.1", live.proxy_port))
    with connect(url.replace("http://", "ws://") + "ws", sock=sock, additional_headers=auth, proxy=None) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=10) == b"\x00\x01binary"
