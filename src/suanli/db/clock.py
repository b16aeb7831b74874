"""The one clock of the control plane, so tests and billing agree on time zones."""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
