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
from pydantic import BaseModel, Field
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


class ErrorDetail(BaseModel):
    code: str = Field(description="what went wrong, for programs: not_found, invalid, forbidden, exists, ...")
    message: str = Field(description="what went wrong, for people: names the field or the object")
    fields: list[str] | None = Field(default=None, description="422 only: the fields at fault (resources.cpus)")


class ErrorOut(BaseModel):
    """The body of every 4xx and 5xx."""

    error: ErrorDetail


#: what each documented status means, for the schema
MEANING = {
    400: "refused: the request cannot be carried out as asked (the message says why)",
    401: "no valid token (Authorization: Bearer TOKEN)",
    402: "the tenant's balance or budget does not cover the work",
    403: "the token's user may not do this",
    404: "no such object, or not one this user may see",
    409: "conflicts with the object's state, or it exists already",
    413: "the body is larger than the server accepts",
    415: "the body's Content-Type is not one this route accepts",
    422: "a field is invalid (out of bounds, wrong type, unknown): `fields` names it",
    429: "too many requests: wait as long as the Retry-After header says",
}


def documented(*statuses: int) -> dict[int | str, dict]:
    """OpenAPI ``responses`` entries of these statuses, each with the error body's schema;
    429 also documents its Retry-After header."""
    out: dict[int | str, dict] = {}
    for status in statuses:
        entry: dict = {"model": ErrorOut, "description": MEANING[status]}
        if status == 429:
            entry["headers"] = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
        out[status] = entry
    return out


#: every route's error answers, set once on the app (``api.app``) so a route added later
#: is covered: authentication (401), roles (403), lookups (404), state (409), validation
#: (422), refusals of the domain (400) and the rate limit (429). Routes that can also
#: answer 402, 413 or 415 add those on their router.
DEFAULT_RESPONSES = documented(400, 401, 403, 404, 409, 422, 429)


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
