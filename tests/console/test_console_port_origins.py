"""One origin per published port, seen from a real Chromium: a page served by one
instance cannot read another instance's service as the user viewing it.

The attack this closes: a renter's service (instance A) serves a page whose script,
when an operator who also opened instance B views it, fetches B's service and reads it
with the browser's credentials for B. Here both run on the process runtime (a port is
published as itself), the user opens B's port from the console first (so the browser
holds B's cookie), then A's; A's page tries every way to B it has and writes what it got.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.control.control_helpers import LiveServer, free_port

pytestmark = pytest.mark.browser

SECRET = "the secret of instance B"

#: A's page: each way to reach B, what came back (a status and body, or the error)
ATTACK = """<!doctype html><title>A</title><pre id="out">running</pre><script>
const targets = %s;
async function attempt(t) {
  try {
    if (t.ws) {
      return await new Promise((ok) => { const ws = new WebSocket(t.url);
        ws.onopen = () => ws.send("x"); ws.onmessage = (m) => ok("message:" + m.data); ws.onerror = () => ok("ws error"); });
    }
    const r = await fetch(t.url, { credentials: "include", mode: t.mode || "cors" });
    return r.type + ":" + r.status + ":" + await r.text();
  } catch (e) { return "error:" + e; }
}
(async () => {
  const got = {};
  for (const t of targets) got[t.name] = await attempt(t);
  document.getElementById("out").textContent = JSON.stringify(got);
})();
</script>"""


class Service(BaseHTTPRequestHandler):
    """A renter's web service on a host port; ``page`` is what it serves, ``seen`` what reached it."""

    page: bytes = b""
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        type(self).seen.append((self.path, self.headers.get("Cookie", "")))
        body = type(self).page
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve(cls: type[Service]) -> tuple[int, ThreadingHTTPServer]:
    port = free_port()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), cls)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return port, httpd


@pytest.fixture
def services() -> Iterator[tuple[tuple[int, type[Service]], tuple[int, type[Service]]]]:
    a = type("ServiceA", (Service,), {"seen": [], "page": b""})
    b = type("ServiceB", (Service,), {"seen": [], "page": SECRET.encode()})
    (pa, ha), (pb, hb) = serve(a), serve(b)
    try:
        yield (pa, a), (pb, b)
    finally:
        for h in (ha, hb):
            h.shutdown()
            h.server_close()


def open_port(page: Page, name: str, port: int) -> Any:
    box = page.locator("#live tbody tr", has_text=name)
    expect(box.locator(".state")).to_have_text("running")
    with page.context.expect_page() as opened:
        box.locator(f"a[data-port='{port}']").click()
    tab = opened.value
    tab.wait_for_load_state()
    return tab


def test_a_page_of_one_instance_cannot_read_another(page: Page, console_server: LiveServer, services: Any) -> None:
    (pa, a), (pb, b) = services
    c = console_server.client()
    ia = c.create_instance(name="tenant-a-box", gpu_milli=100, ports=[pa])
    ib = c.create_instance(name="tenant-b-box", gpu_milli=100, ports=[pb])
    proxy = console_server.proxy_port
    b_url = f"http://{ib['id']}-{pb}.localhost:{proxy}/"
    targets = [
        {"name": "b_host", "url": b_url + "data"},
        {"name": "b_host_no_cors", "url": b_url + "data", "mode": "no-cors"},
        {"name": "path_form", "url": f"http://127.0.0.1:{proxy}/proxy/instances/{ib['id']}/{pb}/data"},
        {"name": "path_form_on_a_host", "url": f"/proxy/instances/{ib['id']}/{pb}/data"},  # A's own origin
        {"name": "b_socket", "url": b_url.replace("http", "ws") + "ws", "ws": True},
    ]
    a.page = (ATTACK % json.dumps(targets)).encode()

    page.goto("/")
    page.fill("#login input[name=token]", console_server.token)
    page.click("#login button")
    page.click("a[href='#instances']")
    tab_b = open_port(page, "tenant-b-box", pb)  # the user opened B: the browser holds B's pass
    expect(tab_b.locator("body")).to_have_text(SECRET)
    assert tab_b.url == b_url and [ck["domain"] for ck in page.context.cookies()] == [f"{ib['id']}-{pb}.localhost"]
    assert [p for p, _ in b.seen if p != "/favicon.ico"] == ["/"]

    tab_a = open_port(page, "tenant-a-box", pa)  # ... then A's page, whose script goes after B
    assert tab_a.url == f"http://{ia['id']}-{pa}.localhost:{proxy}/"
    out = tab_a.locator("#out")
    expect(out).not_to_have_text("running", timeout=20_000)
    got = json.loads(out.inner_text())
    assert set(got) == {t["name"] for t in targets}
    assert all(SECRET not in v for v in got.values()), got
    assert got["b_host"].startswith("error:")  # cross-origin: unreadable (and refused: no pass went with it)
    assert got["b_host_no_cors"] == "opaque:0:"
    assert got["path_form"].startswith("error:")
    assert got["path_form_on_a_host"].startswith("basic:200:") and "<title>A</title>" in got["path_form_on_a_host"]
    assert got["b_socket"] == "ws error"
    assert [p for p, _ in b.seen if p != "/favicon.ico"] == ["/"], b.seen  # nothing of the attack reached B
    assert [p for p, _ in a.seen if p != "/favicon.ico"] == ["/", f"/proxy/instances/{ib['id']}/{pb}/data"]
    assert all("suanli_proxy" not in ck and "sl_" not in ck for _, ck in a.seen + b.seen)
