"""kill -9 during a real rating process on PostgreSQL, then a re-run: every charge
is posted exactly once and the ledger balances."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from sqlalchemy import func, select

from suanli.billing import rater, store
from suanli.billing.tables import LedgerEntry, Usage
from tests.billing.billing_helpers import HOUR, allocate, world

pytestmark = pytest.mark.postgres
CUTOFF = 30 * HOUR


def _seed(w, n: int) -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 24 * HOUR, n)
    durs = rng.integers(1_000, 3 * HOUR, n)
    for k in range(n):
        allocate(
            w,
            int(starts[k]),
            int(starts[k] + durs[k]),
            gpus=int(rng.integers(1, 9)),
            priority=["on-demand", "spot"][k % 2],
            job=bool(k % 3 == 0),
        )


def test_kill_dash_nine_mid_run_then_rerun_posts_each_charge_once(pg_url: str) -> None:
    w = world(pg_url, disk_gib=50)
    _seed(w, 600)
    expected = rater.collect(w.db, 0, CUTOFF, 3_600_000)  # the pure answer for these rows
    want_n, want_amount = len(expected), int(expected.cols["amount"].sum())
    assert want_n > 600
    cmd = [
        sys.executable,
        "-m",
        "suanli.billing",
        "rate",
        "--db",
        pg_url,
        "--cutoff-ms",
        str(CUTOFF),
        "--batch",
        "20",
        "--pause-after-batch",
        "0.05",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with w.db.sessions() as s:
                done = s.scalar(select(func.count()).select_from(Usage))
            if done >= want_n // 3:
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    with w.db.sessions() as s:
        partial = s.scalar(select(func.count()).select_from(Usage))
    assert 0 < partial < want_n, "the kill must land mid-run"
    out = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    again = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=120)  # and once more: nothing new
    assert '"inserted": 0' in again.stdout
    with w.db.sessions() as s:
        n = s.scalar(select(func.count()).select_from(Usage))
        usage = int(s.scalar(select(func.sum(Usage.amount))))
        charged = -store.balance(s, w.tenant_id)
        entries = s.scalar(select(func.count()).select_from(LedgerEntry))
        assert n == want_n and usage == want_amount
        assert charged == want_amount  # the ledger charged every record once
        assert store.trial_balance(s) == 0 and entries > 1
