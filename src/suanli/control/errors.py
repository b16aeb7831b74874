"""Domain errors with a stable ``code``; the API maps them to JSON 4xx responses."""

from __future__ import annotations


class ControlError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class NotFound(ControlError):
    status = 404
    code = "not_found"


class Conflict(ControlError):
    status = 409
    code = "conflict"


class Invalid(ControlError):
    status = 422
    code = "invalid"


class Forbidden(ControlError):
    status = 403
    code = "forbidden"


class Unauthorized(ControlError):
    status = 401
    code = "unauthorized"


def field_path(loc: tuple | list) -> str:
    """Pydantic's error location as the user wrote it: ``resources.accelerators``."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def describe_validation(errors: list[dict]) -> str:
    """Pydantic errors as one line, each prefixed by its field path."""
    msgs = []
    for e in errors:
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        msgs.append(f"{field_path(e.get('loc', ()))}: {msg}")
    return "; ".join(msgs)
