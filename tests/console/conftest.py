"""Browser tests drive the web console in a real headless Chromium (Debian's package,
through Playwright's Python driver) against a real server on loopback ports: the app,
control loop, billing and port proxy that ``suanli server`` runs, in the test process
(``LiveServer``: the browser sees the same HTTP; a server process per test cost seconds
of start-up each). The console refreshes its live part every second here instead of
every 3 s (``console_helpers.REFRESH_MS``).

Where Chromium or Playwright is missing they skip with the reason, unless the run
requires them (``SUANLI_BROWSER=require``, set by ``.ci/run``): then it is a failure.
``scripts/test`` installs Debian's chromium when it can.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.console.console_helpers import new_context
from tests.control.control_helpers import LiveServer

#: Flags for a closed network: no background connections, no sandbox (tests run as root).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("SUANLI_BROWSER") == "require":
        pytest.fail(f"browser required by this run but unusable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    exe = os.environ.get("SUANLI_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        _unavailable("no chromium on PATH (Debian: apt-get install chromium; or set SUANLI_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def console_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server on the process runtime with the demo inventory, of this test alone."""
    srv = LiveServer(tmp_path / "data").start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def page(chromium, console_server: LiveServer):  # type: ignore[no-untyped-def]
    context = new_context(chromium, console_server.url)
    p = context.new_page()
    # the page's timeout bounds actions (click, fill); `expect` assertions have their own,
    # 5 s unless set, and they wait on the platform's work (a job queued, run, reconciled,
    # then shown by the next refresh): a five-run check under load once saw a job still
    # "running" when 5 s ran out. Both get the 20 s a control-plane test waits for a state.
    p.set_default_timeout(20_000)
    expect.set_options(timeout=20_000)
    try:
        yield p
    finally:
        context.close()
