"""Issue 15: the API's documentation pages work with no network. Every script and style
sheet of ``/docs`` and ``/redoc`` is served by the server itself, and in a browser whose
requests may reach only the server, Swagger UI renders the operations."""

from __future__ import annotations

import re
from urllib.parse import urlparse

from playwright.sync_api import Page, expect

from tests.control.control_helpers import LiveServer, Server

ASSET = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", re.I)


def test_docs_pages_load_every_asset_from_the_server_itself(server: Server) -> None:
    for page in ("/docs", "/redoc"):
        html = server.http.get(page)
        assert html.status_code == 200, page
        assets = ASSET.findall(html.text)
        assert any(a.endswith(".js") for a in assets), (page, assets)
        for url in assets:
            assert not urlparse(url).netloc, f"{page} loads {url} from elsewhere"
            got = server.http.get(url)
            assert got.status_code == 200 and len(got.content) > 100, (page, url, got.status_code)
    icon = server.http.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_swagger_ui_renders_the_operations_with_no_network(page: Page, console_server: LiveServer) -> None:
    own = urlparse(console_server.url).netloc
    elsewhere: list[str] = []

    def only_the_server(route):  # type: ignore[no-untyped-def]
        if urlparse(route.request.url).netloc == own:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/docs")
    # the schema of ~90 operations is built on the first request and parsed in the page: seconds on a loaded machine
    expect(page.locator(".opblock-summary-path", has_text="/v1/instances").first).to_be_visible(timeout=30_000)
    page.goto("/console/")
    expect(page.locator("#login")).to_be_visible()
    assert not errors and not elsewhere, (errors, elsewhere)
