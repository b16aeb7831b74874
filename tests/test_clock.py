"""``suanli.clock``: one clock for the control plane and the simulator."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from suanli.clock import SYSTEM, Clock, ManualClock, SystemClock


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(1_700_000_000.0)
    assert clock.now() == clock.now() == 1_700_000_000.0
    assert clock.advance(1.5) == 1_700_000_001.5
    clock.set(1_700_000_000.001)
    assert clock.now_ms() == 1_700_000_000_001  # rounded, not truncated to ...000
    assert clock.utcnow() == datetime.fromtimestamp(1_700_000_000.001, UTC)
    assert clock.utcnow().tzinfo is UTC
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_system_clock_reads_the_wall_clock():
    before = time.time()
    now, ms, dt = SYSTEM.now(), SYSTEM.now_ms(), SYSTEM.utcnow()
    after = time.time()
    assert before <= now <= after
    assert int(before * 1000) <= ms <= int(after * 1000) + 1
    assert dt.tzinfo is UTC and before - 1 <= dt.timestamp() <= after + 1
    assert isinstance(SYSTEM, SystemClock) and isinstance(SYSTEM, Clock) and isinstance(ManualClock(), Clock)


def test_the_old_names_read_the_one_clock(monkeypatch):
    from suanli.billing.store import now_ms
    from suanli.db.clock import utcnow

    fixed = ManualClock(1_800_000_000.25)
    monkeypatch.setattr("suanli.clock.SYSTEM.now", fixed.now)
    monkeypatch.setattr("suanli.clock.SYSTEM.now_ms", fixed.now_ms)
    monkeypatch.setattr("suanli.clock.SYSTEM.utcnow", fixed.utcnow)
    assert now_ms() == 1_800_000_000_250
    assert utcnow() == datetime.fromtimestamp(1_800_000_000.25, UTC)
