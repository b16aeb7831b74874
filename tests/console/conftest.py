"""Browser tests drive the web console in a real headless Chromium (Debian's package,
through Playwright's Python driver) against a real ``suanli server`` process.

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

from tests.control.control_helpers import ServerProcess, free_port

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
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", None, free_port()).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def page(chromium, server_process: ServerProcess):  # type: ignore[no-untyped-def]
    context = chromium.new_context(base_url=server_process.url)
    p = context.new_page()
    p.set_default_timeout(20_000)
    try:
        yield p
    finally:
        context.close()
