"""Build the FastAPI app for a server context."""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute

from suanli import __version__
from suanli.api import audit, console, docs, errors, health, metrics, threads, tls
from suanli.api.context import ServerContext
from suanli.api.routes import advise, billing, dashboard, images, instances, jobs, keys, nodes, uploads, users
from suanli.api.routes import alerts as alert_routes
from suanli.api.routes import audit as audit_routes
from suanli.control import loop_report


def _fastapi() -> FastAPI:
    return FastAPI(
        title="Suanli",
        version=__version__,
        description="Rent GPUs as instances or jobs.",
        responses=errors.DEFAULT_RESPONSES,  # every route's error answers (api.errors)
        docs_url=None,  # api.docs serves them without a CDN
        redoc_url=None,
        lifespan=threads.lifespan,
    )


def create_app(ctx: ServerContext) -> FastAPI:
    app = _fastapi()
    app.state.ctx = ctx
    errors.install(app)
    metrics.install(app, ctx, lambda: loop_report.counters(ctx.db))
    if ctx.audit:
        audit.install(app, ctx.db)

    health.install(app, ctx.db)
    app.router.routes.extend(api_routes())
    app.router.routes.extend(page_routes())
    if ctx.tls:
        tls.install_hsts(app)
    # The port proxy is not here: it serves renters' own pages, which must not share the
    # console's origin (its token in localStorage); see ``proxy_app.create_proxy_app``.
    return app


@cache
def api_routes() -> tuple[BaseRoute, ...]:
    """The API's routes, included once per process and shared by every app it makes.
    FastAPI works out an included route's parameters and response model (pydantic
    schemas) on the first request that reaches its router, once per app: about 30 ms a
    router. A server makes one app; the test suite makes hundreds in one process. Sharing
    is sound because every app is made with the same settings (``responses``, response
    class, no dependency overrides) and a route reaches its server only through
    ``request.app.state.ctx`` (``api.deps.context``)."""
    shared = APIRouter(responses=errors.DEFAULT_RESPONSES)
    for module in (users, nodes, instances, jobs, advise, images, keys, uploads, audit_routes, alert_routes, dashboard, billing):
        shared.include_router(module.router)
    return tuple(shared.routes)


@cache
def page_routes() -> tuple[BaseRoute, ...]:
    """The console's and the documentation's routes and files, made once per process as
    ``api_routes`` are: they hold nothing of a server, and a route an app adds itself
    costs about 5 ms (a response model for each of the default error answers)."""
    template = _fastapi()
    own = len(template.router.routes)  # its OpenAPI route: each app has its own
    console.install(template)
    docs.install(template)
    return tuple(template.router.routes[own:])
