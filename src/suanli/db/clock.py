"""The one clock of the control plane, so tests and billing agree on time zones."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
