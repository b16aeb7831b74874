"""The metrics collector on a real server (host-process runtime, SQLite and PostgreSQL):
samples stored per workload, downsampled into five-minute buckets, pruned by retention."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from suanli.control.metrics import MetricsSettings, history, latest, rollup
from suanli.db.models import WorkloadMetric
from tests.control.control_helpers import Server, start_server, wait_state


@pytest.fixture
def psrv(db_url: str, tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", db_url, runtime="process")
    try:
        yield srv
    finally:
        srv.close()


def test_a_running_instance_is_sampled_and_its_virtual_gpu_is_not_measured(psrv: Server) -> None:
    r = psrv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1, "disk_gib": 1}, expect=201).json()
    inst = wait_state(psrv, "instance", r["id"], ("running",), 30)
    assert psrv.ctx.metrics is not None
    got = psrv.ctx.metrics.collect_once()
    assert [(u.kind, u.workload_id) for u in got] == [("instance", inst["id"])], got
    (row,) = latest(psrv.ctx.db, [("instance", inst["id"])]).values()
    assert row.memory_mib > 0 and row.cpu_percent >= 0, row.__dict__
    assert (row.gpu_util_percent, row.gpu_memory_mib, row.power_w) == (None, None, None), row.__dict__
    assert row.gpu_note == "not measured: virtual GPU", row.__dict__


def _raw(db, ts: float, cpu: float, gpu: float | None = None, wid: int = 1) -> None:  # type: ignore[no-untyped-def]
    with db.transaction() as s:
        s.add(
            WorkloadMetric(
                kind="instance", workload_id=wid, tenant_id=1, ts=ts, cpu_percent=cpu, memory_mib=100.0, gpu_util_percent=gpu
            )
        )


def test_raw_samples_become_five_minute_buckets_and_old_buckets_are_deleted(db_url: str, tmp_path: Path) -> None:
    from suanli.db.session import Database

    db = Database(db_url)
    settings = MetricsSettings(raw_keep_s=3600, bucket_s=300, retention_days=1)
    now = 1_800_000_000.0  # a multiple of 300
    for i in range(4):  # one bucket two hours ago: 4 samples, 15 s apart
        _raw(db, now - 7200 + 15 * i, cpu=10.0 * i, gpu=None if i else 50.0)
    _raw(db, now - 60, cpu=99.0)  # recent: stays raw
    _raw(db, now - 3 * 86400, cpu=1.0, wid=2)  # past the retention
    folded, gone = rollup(db, settings, now)
    assert (folded, gone) == (5, 1), (folded, gone)  # the old raw row of workload 2 is folded, then pruned
    with db.sessions() as s:
        rows = [
            (r.workload_id, r.resolution_s, r.ts, r.samples, r.cpu_percent, r.gpu_util_percent)
            for r in s.scalars(select(WorkloadMetric).order_by(WorkloadMetric.ts))
        ]
    assert rows == [(1, 300, now - 7200, 4, 15.0, 50.0), (1, 0, now - 60, 1, 99.0, None)], rows
    assert rollup(db, settings, now) == (0, 0)  # idempotent
    assert [r.resolution_s for r in history(db, "instance", 1, now - 86400)] == [300, 0]
    assert [r.resolution_s for r in history(db, "instance", 1, now - 120)] == [0]
    db.dispose()
