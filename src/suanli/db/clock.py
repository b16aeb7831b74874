"""The one clock of the control plane, so tests and billing agree on time zones."""

from __future__ import annotations

from datetime import datetime

from suanli.clock import SYSTEM


def utcnow() -> datetime:
    return SYSTEM.utcnow()  # suanli.clock: one clock for live and sim
