"""The one exception the advisor raises for bad input.

Every bad value (unknown model, unknown precision, negative count...) becomes an
``AdvisorError`` whose message names the value, so the CLI and the API can show it
verbatim and exit non-zero instead of printing a traceback.
"""

from __future__ import annotations


class AdvisorError(ValueError):
    """Input the advisor cannot answer for; the message names the bad value."""


def require_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    """Reject negative (or zero) numbers with a message that names the argument."""
    if value is None:
        raise AdvisorError(f"{name} is required")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise AdvisorError(f"{name} must be {bound}, got {value!r}")


def require_fraction(name: str, value: float, *, allow_zero: bool = True) -> None:
    """Reject values outside [0, 1] (or (0, 1] when zero is meaningless)."""
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        bound = "[0, 1]" if allow_zero else "(0, 1]"
        raise AdvisorError(f"{name} must be in {bound}, got {value!r}")
