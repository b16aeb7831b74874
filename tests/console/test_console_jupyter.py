"""JupyterLab as a renter uses it: opened from the console's port link in a real Chromium,
on its port's own origin (``ID-8888.localhost``), a notebook's kernel runs code over the
proxied WebSocket, and nothing the page asks for is refused by the proxy's origin rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.console.console_helpers import container_live_server, new_context
from tests.containers.test_container_ports import via_loopback
from tests.control.control_helpers import LiveServer, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.containers]


@pytest.fixture
def jupyter_server(tmp_path: Path) -> Iterator[LiveServer]:
    with container_live_server(tmp_path, "jupyter") as srv:
        yield srv


def test_jupyterlab_from_the_console_runs_a_notebook(chromium, jupyter_server: LiveServer) -> None:  # type: ignore[no-untyped-def]
    srv = jupyter_server
    inst = srv.client().create_instance(name="lab-box", gpu_milli=500, image="jupyter", ports=[8888])
    url = f"http://{inst['id']}-8888.localhost:{srv.proxy_port}/"
    context = new_context(chromium, srv.url)
    page = context.new_page()
    page.set_default_timeout(90_000)
    refused: list[tuple[int, str]] = []
    try:
        page.goto("/")
        page.fill("#login input[name=token]", srv.token)
        page.click("#login button")
        page.click("a[href='#instances']")
        box = page.locator("#live tbody tr", has_text="lab-box")
        expect(box.locator(".state")).to_have_text("running", timeout=90_000)
        link = box.locator("a[data-port='8888']")
        expect(link).to_have_attribute("href", url)
        # JupyterLab needs a few seconds after the instance runs: ask it through the proxy
        # (bearer header, 127.0.0.1 with the port's Host) until it answers, then open the link
        base, host = via_loopback(url)
        wait_until(lambda: _answers(base + "lab", {**host, "Authorization": f"Bearer {srv.token}"}), 90, 0.25)
        lab = None
        for _ in range(30):  # and should a page still come too early: reopen until it answers
            with context.expect_page() as opened:
                link.click()
            lab = opened.value
            lab.wait_for_load_state()
            if lab.locator(".jp-LauncherCard").first.is_visible() or lab.url.startswith(url + "lab"):
                break
            lab.close()
            page.wait_for_timeout(2000)
        assert lab is not None
        lab.on("response", lambda r: r.status in (401, 403) and refused.append((r.status, r.url)))
        if not lab.url.startswith(url + "lab"):
            lab.goto(url + "lab")
        lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
        expect(lab.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=90_000)  # its socket is up
        code = "import os; print(6 * 7, os.getcwd())"
        cell = lab.locator(".jp-Notebook .jp-Cell .cm-content").first
        cell.click()
        cell.fill(code)
        expect(cell).to_have_text(code)
        cell.press("Shift+Enter")
        expect(lab.locator(".jp-OutputArea-output").first).to_have_text("42 /workspace", timeout=90_000)
        assert refused == []
        names = {(ck["name"], ck["domain"], ck["path"]) for ck in context.cookies()}
        assert ("suanli_proxy", f"{inst['id']}-8888.localhost", "/") in names  # host-only, the port's alone
        assert all(ck["domain"] == f"{inst['id']}-8888.localhost" for ck in context.cookies())
    finally:
        context.close()


def _answers(url: str, headers: dict[str, str]) -> bool:
    try:
        return httpx.get(url, headers=headers, timeout=5).status_code == 200
    except httpx.TransportError:
        return False
