"""Factories of the console suite."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.control.control_helpers import LiveServer

#: The console's refresh period in the tests, ms (``REFRESH_MS`` in console.js: 3 s): a
#: change on the server shows within a second. Each refresh replaces the live part's
#: elements; at 0.2 s a click under load kept landing on a replaced one (Playwright retried
#: "element was detached" for 20 s), so not shorter.
REFRESH_MS = 1000


def sign_in(page, token: str) -> None:  # type: ignore[no-untyped-def]
    page.goto("/")
    page.fill("#login input[name=token]", token)
    page.click("#login button")


def row(page, text: str):  # type: ignore[no-untyped-def]
    """The live table's row that shows ``text``."""
    return page.locator("#live tbody tr", has_text=text)


def new_context(chromium, base_url: str, locale: str = "en-US"):  # type: ignore[no-untyped-def]
    """A browser context (a fresh profile, its language ``locale``) on ``base_url`` whose
    console pages refresh every ``REFRESH_MS`` (set on the console's origin only:
    instances' pages get nothing)."""
    context = chromium.new_context(base_url=base_url, locale=locale)
    origin = json.dumps(base_url.rstrip("/"))
    context.add_init_script(f"if (location.origin === {origin}) localStorage.setItem('suanli.refresh_ms', '{REFRESH_MS}');")
    return context


@contextmanager
def container_live_server(tmp_path: Path, image: str) -> Iterator[LiveServer]:
    """A server whose local backend runs real Podman containers, with ``image`` built here
    when missing (minutes), or a skip with the reason."""
    from suanli.backends.local import imagebuild
    from suanli.backends.local.engine import detect

    if detect("podman") is None:
        if os.environ.get("SUANLI_CONTAINERS") == "require":
            pytest.fail("SUANLI_CONTAINERS=require: no Podman answers on this machine")
        pytest.skip("no Podman answers on this machine (scripts/images installs it)")
    imagebuild.pull_or_build(image, "podman", progress=lambda line: None)
    srv = LiveServer(tmp_path / "data", options={"runtime": "container", "allow_process_runtime": False}).start()
    try:
        yield srv
    finally:
        srv.close()
