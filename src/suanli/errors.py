"""Domain errors: what went wrong, as a message for the user and a stable ``code``.

Any layer raises them (billing, control, the advisor's callers); none of them knows
about HTTP. The API maps each class to a status (``suanli.api.errors.http_status``),
so a subclass keeps its parent's status unless the API names it.

Also here: how a pydantic validation error reads to a user (``describe_validation``),
shared by the API's 422 answers and the CLI's local checks of a task file.

This module imports nothing from ``suanli``, so anything may import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class DomainError(Exception):
    """A refused request: ``message`` for people, ``code`` for programs."""

    code = "bad_request"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class NotFound(DomainError):
    code = "not_found"


class Conflict(DomainError):
    code = "conflict"


class Invalid(DomainError):
    code = "invalid"


class Forbidden(DomainError):
    code = "forbidden"


class Unauthorized(DomainError):
    code = "unauthorized"


class PaymentRequired(DomainError):
    """Refused for money: a prepaid balance that does not cover the work."""

    code = "insufficient_funds"


def field_path(loc: tuple | list) -> str:
    """Pydantic's error location as the user wrote it: ``resources.accelerators``."""
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def describe_validation(errors: Sequence[Mapping[str, Any]]) -> str:
    """Pydantic errors as one line, each prefixed by its field path."""
    msgs = []
    for e in errors:
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        msgs.append(f"{field_path(e.get('loc', ()))}: {msg}")
    return "; ".join(msgs)


__all__ = [
    "Conflict",
    "DomainError",
    "Forbidden",
    "Invalid",
    "NotFound",
    "PaymentRequired",
    "Unauthorized",
    "describe_validation",
    "field_path",
]
