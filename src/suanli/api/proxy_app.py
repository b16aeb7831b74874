"""The port proxy as an app of its own (``create_proxy_app``): the HTTP half
(``proxy``) and the WebSocket half (``proxy_ws``, which builds on the HTTP half's
admission) mounted together, so neither module imports the other back."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from suanli.api import errors, proxy, proxy_ws, tls
from suanli.control.access import load_secret


def create_proxy_app(ctx: Any) -> FastAPI:
    """The proxy alone (``ctx``: the ServerContext), to serve on a listener of its own:
    proxied pages then share no origin (localStorage, the console's token) with the
    console and the API, nor with each other (one host name per port)."""
    app = FastAPI(title="Suanli port proxy", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ctx = ctx
    app.state.secret = load_secret(ctx.data_dir)
    errors.install(app)
    app.include_router(proxy.router)
    app.include_router(proxy_ws.router)
    if getattr(ctx, "tls", False):
        tls.install_hsts(app)
    return app
