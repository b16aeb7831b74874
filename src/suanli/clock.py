"""The one notion of "now" for the control plane and the simulator.

Code that needs the time takes a ``Clock`` instead of calling ``time.time()`` so
the same code runs against the wall clock in production (``SystemClock``) and
against event time in the replay or in a test (``ManualClock``, set or advanced
by whoever drives it). ``now()`` is seconds since the Unix epoch as a float; the
helpers give the same instant as an aware UTC ``datetime`` (what the database
stores) and as integer milliseconds (what billing stores).

This module imports nothing from ``suanli``, so anything may import it.
``suanli.db.clock.utcnow`` and ``suanli.billing.store.now_ms`` read ``SYSTEM``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of the current time. Implement ``now``; the helpers derive from it."""

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def utcnow(self) -> datetime:
        """``now()`` as an aware datetime in UTC."""
        return datetime.fromtimestamp(self.now(), UTC)

    def now_ms(self) -> int:
        """``now()`` in whole milliseconds (rounded: a manual time given in
        milliseconds, like 1.001 s, reads back exactly)."""
        return round(self.now() * 1000)


class SystemClock(Clock):
    """The wall clock."""

    def now(self) -> float:
        return time.time()

    def utcnow(self) -> datetime:
        return datetime.now(UTC)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000  # floor, as int(time.time() * 1000) is


class ManualClock(Clock):
    """A clock that only moves when told: ``set`` it to an instant or ``advance`` it.
    The replay sets it to each event's time before applying the event."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def set(self, at: float) -> None:
        """Jump to ``at`` (seconds since the epoch; backwards too, for tests). Kept
        as given (a NumPy float stays one), so a replay reads back exactly the
        event time it set."""
        self._now = at

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0); returns the new time."""
        if seconds < 0:
            raise ValueError("a clock advances by seconds >= 0; use set() to go back")
        self._now += seconds
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"


#: The process's wall clock.
SYSTEM = SystemClock()


__all__ = ["SYSTEM", "Clock", "ManualClock", "SystemClock"]
