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
