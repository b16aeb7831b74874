"""Every 4xx/5xx as JSON ``{"error": {"code": ..., "message": ...}}``.

Domain errors (``suanli.errors``) carry no HTTP status: ``STATUS`` maps each class to
one here, and a subclass answers with its nearest listed ancestor's (base: 400). An
API-layer error names its own with ``@http_error(status)``.

Validation errors name the field path the way a user wrote it
(``resources.accelerators``), not FastAPI's internal ``body.resources...``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from suanli.control.throttle import Throttled
from suanli.control.uploads import TooLarge
from suanli.errors import (
    Conflict,
    DomainError,
    Forbidden,
    Invalid,
    NotFound,
    PaymentRequired,
    Unauthorized,
    describe_validation,
    field_path,
)

E = TypeVar("E", bound=type[DomainError])

#: HTTP status per domain error class; subclasses inherit their ancestor's
STATUS: dict[type[DomainError], int] = {
    DomainError: 400,
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    Forbidden: 403,
    Unauthorized: 401,
    PaymentRequired: 402,
    TooLarge: 413,  # over the server's upload cap
    Throttled: 429,  # too many failed attempts (bad tokens, sign-ins)
}


def http_error(status: int) -> Callable[[E], E]:
    """Class decorator: answer this API-layer error with ``status``."""

    def mark(cls: E) -> E:
        STATUS[cls] = status
        return cls

    return mark


def http_status(exc: DomainError) -> int:
    """The status of ``exc``: its class's, else its nearest ancestor's in ``STATUS``."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 400


def error_body(code: str, message: str, **extra: object) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


def install(app: FastAPI) -> None:
    @app.exception_handler(DomainError)
    async def _domain(_: Request, exc: DomainError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, Throttled) else None
        return JSONResponse(error_body(exc.code, exc.message), status_code=http_status(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = list(exc.errors())
        fields = [field_path(e.get("loc", ())) for e in errs]
        return JSONResponse(error_body("invalid", describe_validation(errs), fields=fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
