"""Migration on the embedded local backend: real processes get the notice, checkpoint,
stop and resume on another node's GPU, so whole-GPU work kept waiting by scattered
shares runs. The same scenario against the fake backend, step by step, is in
``tests/control/test_loop_fake.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.control import jobs
from suanli.control.plane import MigrationSettings
from suanli.inventory import Inventory, NodeDecl
from tests.event_helpers import events_text
from tests.local.test_local_reclaim import WORKLOAD, log_lines, starts
from tests.platform_helpers import ADMIN, Platform, make_platform


@pytest.fixture
def platform(db_url: str, tmp_path: Path) -> Iterator[Platform]:
    """Two local nodes of one GPU each, migration on, a 2-s notice."""
    inv = Inventory(
        nodes=[NodeDecl(name=f"local{i}", gpu_model="H100", gpu_count=1, cpu_cores=16, memory_gib=64) for i in (1, 2)]
    )
    p = make_platform(tmp_path / "data", {}, inv, notice_s=2.0, db_url=db_url)
    p.loop.plane.migration = MigrationSettings(moves=2)
    try:
        yield p
    finally:
        p.close()


def test_a_share_moves_from_its_checkpoint_so_a_whole_gpu_job_runs(platform: Platform) -> None:
    p = platform
    share = {"accelerators": "H100:1"}
    big = [p.submit(name=f"big{i}", resources={**share, "gpu_milli": 800}, run="sleep 300") for i in (1, 2)]
    p.until(lambda: all(p.state(j, "running") for j in big), 20, "the big shares running")
    small = []
    for name in ("a", "b"):  # one at a time: each fits only beside a big share
        small.append(p.submit(name=name, resources={**share, "gpu_milli": 200}, run=WORKLOAD, checkpoint_dir="ckpt"))
        p.until(lambda: starts(p, small[-1]), 20, f"share {name} running")
    for j in big:
        jobs.cancel(p.db, ADMIN, j)
    p.until(lambda: all(p.state(j, "cancelled") for j in big), 20, "the big shares cancelled")
    whole = p.submit(name="whole", resources={"accelerators": "H100:1"}, run="sleep 1")
    moved = p.until(lambda: [j for j in small if p.job(j).notice_for == f"job-{whole}"], 20, "a share noticed")[0]
    left = p.node_name(p.allocations(moved)[0].node_id)
    p.until(lambda: [x for x in log_lines(p, moved) if x.startswith("USR1")], 15, "the notice in the workload")
    p.until(lambda: p.state(whole, "succeeded"), 30, "the whole-GPU job done")
    assert p.node_name(p.allocations(whole, active=False)[0].node_id) == left
    resumed = p.until(lambda: starts(p, moved)[1:], 30, "the moved share resumed")[0]
    assert resumed.startswith("start from=") and f"resume={p.data_dir}/checkpoints/job-{moved}/ckpt" in resumed, resumed
    assert resumed.endswith(f"node={({'local1', 'local2'} - {left}).pop()}"), resumed
    states = [e.to_state for e in p.events("job", moved)]
    assert states[:6] == ["queued", "running", "noticed", "requeued", "queued", "running"], events_text(p.events("job", moved))
