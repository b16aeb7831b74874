"""Metering properties: billed seconds are allocated seconds rounded up per 6-second
unit, per interval, however the intervals are split into periods or runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.billing.metering import OPEN, UNIT_MS, MeteringError, billed_units, split

PERIOD = 3_600_000
intervals = st.lists(st.tuples(st.integers(0, 10 * PERIOD), st.integers(0, 3 * PERIOD)), min_size=0, max_size=40)


def _arrays(ivs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    t0 = np.array([a for a, _ in ivs], dtype=np.int64)
    return t0, t0 + np.array([d for _, d in ivs], dtype=np.int64)


@settings(max_examples=200, deadline=None)
@given(intervals, st.sampled_from([6_000, 60_000, PERIOD, 86_400_000]))
def test_billed_seconds_equal_allocated_rounded_up(ivs: list[tuple[int, int]], period: int) -> None:
    t0, t1 = _arrays(ivs)
    p = split(t0, t1, cutoff_ms=100 * PERIOD, period_ms=period)
    per = np.bincount(p.index, weights=p.billed_seconds, minlength=t0.size).astype(np.int64)
    expect = [((b - a) + UNIT_MS - 1) // UNIT_MS * 6 for a, b in zip(t0.tolist(), t1.tolist())]
    assert per.tolist() == expect
    assert (p.units > 0).all() and (p.start < p.end).all()
    assert ((p.period_start <= p.start) & (p.end <= p.period_start + period)).all()


@settings(max_examples=150, deadline=None)
@given(intervals, st.lists(st.integers(0, 14 * PERIOD), min_size=1, max_size=5))
def test_incremental_runs_equal_one_run(ivs: list[tuple[int, int]], cutoffs: list[int]) -> None:
    """Runs at increasing cutoffs (each from the previous cutoff's period, keys deduplicated
    as the database does) bill exactly what one final run bills — open intervals included."""
    t0, t1 = _arrays(ivs)
    t1 = np.where(t1 > 8 * PERIOD, OPEN, t1)  # some still running at the end
    final = 15 * PERIOD
    seen: dict[tuple[int, int], int] = {}
    watermark = 0
    for c in sorted(cutoffs) + [final]:
        p = split(t0, t1, cutoff_ms=c, since_ms=watermark // PERIOD * PERIOD, period_ms=PERIOD)
        for i, ps, u in zip(p.index.tolist(), p.period_start.tolist(), p.units.tolist()):
            assert seen.setdefault((i, ps), u) == u  # a final record never changes
        watermark = max(watermark, c)
    once = split(t0, t1, cutoff_ms=final, period_ms=PERIOD)
    assert seen == {(i, ps): u for i, ps, u in zip(once.index.tolist(), once.period_start.tolist(), once.units.tolist())}


def test_six_second_examples() -> None:
    t0 = np.array([0, 0, 0, 0, 5_000], dtype=np.int64)
    t1 = np.array([0, 1, 6_000, 6_001, 3_605_000], dtype=np.int64)
    assert billed_units(t0, t1).tolist() == [0, 1, 1, 2, 600]
    p = split(t0, t1, cutoff_ms=10**9)
    assert p.billed_seconds.sum() == 6 + 6 + 12 + 3600


def test_open_interval_bills_closed_periods_only() -> None:
    p = split(np.array([1_000]), np.array([OPEN]), cutoff_ms=2 * PERIOD + 5)
    assert p.period_start.tolist() == [0, PERIOD]
    assert p.billed_seconds.tolist() == [3594 + 6, 3600]  # unit starting at 3,595 s belongs to period 0


def test_bad_input_is_refused() -> None:
    with pytest.raises(MeteringError, match="ends before"):
        split(np.array([10]), np.array([5]), cutoff_ms=100)
    with pytest.raises(MeteringError, match="multiple"):
        split(np.array([0]), np.array([5]), cutoff_ms=100, period_ms=1000)
