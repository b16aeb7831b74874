"""Domain errors carry no HTTP status; the API maps each class (and its subclasses)."""

from __future__ import annotations

from suanli import errors
from suanli.api.errors import STATUS, http_status
from suanli.api.proxy import BadGateway
from suanli.api.routes.uploads import UnsupportedType
from suanli.billing.store import BillingError
from suanli.control.uploads import TooLarge


def test_statuses_come_from_the_api_mapping() -> None:
    assert not any(hasattr(cls, "status") for cls in vars(errors).values() if isinstance(cls, type))
    want = {
        errors.DomainError: 400,
        errors.NotFound: 404,
        errors.Conflict: 409,
        errors.Invalid: 422,
        errors.Forbidden: 403,
        errors.Unauthorized: 401,
        BillingError: 422,  # a subclass answers with its ancestor's
        TooLarge: 413,
        UnsupportedType: 415,
        BadGateway: 502,
    }
    for cls, status in want.items():
        assert http_status(cls("x")) == status, cls
    assert BillingError("x").code == "billing_invalid" and errors.Conflict("x", code="busy").code == "busy"
    assert STATUS[errors.Invalid] == 422
