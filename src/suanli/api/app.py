"""Build the FastAPI app for a server context."""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy import text

from suanli import __version__
from suanli.api import audit, console, docs, errors, metrics, tls
from suanli.api.context import ServerContext
from suanli.api.routes import advise, billing, dashboard, images, instances, jobs, keys, nodes, uploads, users
from suanli.api.routes import alerts as alert_routes
from suanli.api.routes import audit as audit_routes


def create_app(ctx: ServerContext) -> FastAPI:
    app = FastAPI(
        title="Suanli",
        version=__version__,
        description="Rent GPUs as instances or jobs.",
        responses=errors.DEFAULT_RESPONSES,  # every route's error answers (api.errors)
        docs_url=None,  # api.docs serves them without a CDN
        redoc_url=None,
    )
    app.state.ctx = ctx
    errors.install(app)
    metrics.install(app, ctx, lambda: ctx.loop.stats if ctx.loop else None)
    if ctx.audit:
        audit.install(app, ctx.db)

    @app.get("/healthz", tags=["system"])
    def healthz() -> dict:
        with ctx.db.reads() as s:  # on SQLite: not queued behind the control loop's writes
            s.execute(text("SELECT 1"))
        loop = ctx.loop
        return {"ok": True, "loop_ticks": loop.stats.ticks if loop else None}

    for module in (users, nodes, instances, jobs, advise, images, keys, uploads, audit_routes, alert_routes, dashboard):
        app.include_router(module.router)
    billing.install(app)  # its thread is one of the server's (api.background)
    console.install(app)
    docs.install(app)
    if ctx.tls:
        tls.install_hsts(app)
    # The port proxy is not here: it serves renters' own pages, which must not share the
    # console's origin (its token in localStorage); see ``proxy_app.create_proxy_app``.
    return app
