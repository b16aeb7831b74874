"""The API's documentation pages, served with no network: Swagger UI at ``/docs`` and
ReDoc at ``/redoc`` from the assets the ``fastapi-offline`` package ships, where FastAPI's
own pages load them from a CDN (a console on a closed network showed a blank page:
"SwaggerUIBundle is not defined"). Also the site's icon, which browsers ask for at
``/favicon.ico``."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from suanli.api.console import STATIC

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs-assets"
ICON = STATIC / "favicon.svg"
ICON_URL = "/console/favicon.svg"


def install(app: FastAPI) -> None:
    """Add the pages to an app made with ``docs_url=None, redoc_url=None``."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    openapi_url = str(app.openapi_url)
    oauth2_redirect_url = str(app.swagger_ui_oauth2_redirect_url)

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            oauth2_redirect_url=oauth2_redirect_url,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=ICON_URL,
        )

    @app.get(oauth2_redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=ICON_URL,
            with_google_fonts=False,
        )

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        return FileResponse(ICON, media_type="image/svg+xml")
