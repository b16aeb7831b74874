"""The web console: static pages that use the public API with the renter's token.

Nothing here has privileges of its own. The browser keeps the token (localStorage) and
calls ``/v1/...`` like the CLI does, so the console can never do more than the token
may, and every rule (roles, quotas, budgets, validation) is the API's.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    app.mount("/console", StaticFiles(directory=STATIC, html=True), name="console")

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/console/")
