"""Metering: allocation intervals to usage records, in 6-second units. Pure.

Seed 004 bills per second with a 6-second minimum unit. A usage interval
``[t0, t1)`` is billed ``ceil((t1 - t0) / 6 s)`` units: each interval rounded up,
once. Units are counted from the interval's own start (unit k covers
``[t0 + 6k, t0 + 6k + 6)``), never from the wall clock.

A long interval is rated in fixed periods (default one hour, aligned to the epoch)
so a tenant sees usage while an instance still runs. A period's record holds the
units that *start* in that period, so the records of one interval sum to exactly
its rounded-up total (the counts telescope), however it is split. A record is
*final*, and only then produced, when its period has closed or the interval has
ended, at the rating cutoff; its value never changes afterwards, which is what
lets the store key it by (source, period) and insert it exactly once.

Two instants decide finality. An interval that has ended by ``cutoff_ms`` is final
whole: its end is known. An interval still open (or ending after the cutoff) only has
its *closed* periods final, and "closed" is judged at ``settled_ms`` (default: the
cutoff): the rater passes a settled instant there, so a row whose end was stamped but
not yet committed when the run read it is never taken for one that ran through the
period. So ended work is rated at once, while running work waits for the settle lag.

Times are integer milliseconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNIT_MS = 6_000
DEFAULT_PERIOD_MS = 3_600_000
OPEN = np.iinfo(np.int64).max  # an interval that has not ended


class MeteringError(ValueError):
    pass


@dataclass(frozen=True)
class Pieces:
    """Usage records as parallel arrays: ``index`` points back into the input."""

    index: np.ndarray  # int64, which input interval
    period_start: np.ndarray  # int64 ms
    start: np.ndarray  # int64 ms, the piece of the interval inside the period
    end: np.ndarray  # int64 ms
    units: np.ndarray  # int64, 6-second units starting in the period

    @property
    def billed_seconds(self) -> np.ndarray:
        return self.units * (UNIT_MS // 1000)

    def __len__(self) -> int:
        return int(self.index.size)


def units_before(x: np.ndarray, t0: np.ndarray) -> np.ndarray:
    """How many units of an interval starting at ``t0`` start before ``x``."""
    d = np.maximum(np.asarray(x, dtype=np.int64) - t0, 0)
    return -(-d // UNIT_MS)


def billed_units(t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """Whole-interval units: ceil((t1 - t0) / 6 s), 0 for empty intervals."""
    return units_before(np.asarray(t1, dtype=np.int64), np.asarray(t0, dtype=np.int64))


def split(
    start_ms: np.ndarray,
    end_ms: np.ndarray,
    cutoff_ms: int,
    since_ms: int = 0,
    period_ms: int = DEFAULT_PERIOD_MS,
    settled_ms: int | None = None,
) -> Pieces:
    """The final records, at ``cutoff_ms``, of intervals ``[start, end)`` (``end`` =
    ``OPEN`` while running), for periods starting at or after ``since_ms``: every
    record of an interval ended by ``cutoff_ms``; of the others, the records of
    periods closed by ``settled_ms`` (at most, and by default, ``cutoff_ms``).

    ``since_ms`` must be a period boundary; the store passes the period holding the
    previous completed run's settled instant, before which everything is already rated."""
    if period_ms <= 0 or period_ms % UNIT_MS:
        raise MeteringError(f"the rating period must be a positive multiple of {UNIT_MS} ms")
    if since_ms % period_ms:
        raise MeteringError("since_ms must be a period boundary")
    t0 = np.asarray(start_ms, dtype=np.int64)
    t1 = np.asarray(end_ms, dtype=np.int64)
    if t0.shape != t1.shape or t0.ndim != 1:
        raise MeteringError("start and end must be 1-d arrays of the same length")
    if np.any(t1 < t0):
        bad = int(np.argmax(t1 < t0))
        raise MeteringError(f"interval {bad} ends before it starts")
    first = np.maximum(t0, since_ms) // period_ms * period_ms
    ended = t1 <= cutoff_ms
    # last final period: the one holding the end, if ended by the cutoff; else the last closed one
    last_ended = (np.maximum(t1, 1) - 1) // period_ms * period_ms
    settled = cutoff_ms if settled_ms is None else min(settled_ms, cutoff_ms)
    last_open = settled // period_ms * period_ms - period_ms
    last = np.where(ended, last_ended, last_open)
    count = np.where((last >= first) & (t1 > t0) & (t1 > since_ms), (last - first) // period_ms + 1, 0)
    idx = np.repeat(np.arange(t0.size, dtype=np.int64), count)
    if idx.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return Pieces(z, z, z, z, z)
    offsets = np.arange(idx.size, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    p = first[idx] + offsets * period_ms
    a = np.maximum(p, t0[idx])
    b = np.minimum(p + period_ms, t1[idx])
    units = units_before(b, t0[idx]) - units_before(a, t0[idx])
    keep = units > 0
    return Pieces(idx[keep], p[keep], a[keep], b[keep], units[keep])
