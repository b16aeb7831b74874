"""Every 4xx/5xx as JSON ``{"error": {"code": ..., "message": ...}}``.

Validation errors name the field path the way a user wrote it
(``resources.accelerators``), not FastAPI's internal ``body.resources...``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from suanli.control.errors import ControlError, describe_validation, field_path


def error_body(code: str, message: str, **extra: object) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


def install(app: FastAPI) -> None:
    @app.exception_handler(ControlError)
    async def _control(_: Request, exc: ControlError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = list(exc.errors())
        fields = [field_path(e.get("loc", ())) for e in errs]
        return JSONResponse(error_body("invalid", describe_validation(errs), fields=fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
