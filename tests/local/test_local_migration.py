"""Migration on the embedded local backend: real processes get the notice, checkpoint,
stop and resume on another node's GPU, so whole-GPU work kept waiting by scattered
shares runs; and ``suanli server --migration-moves`` turns it on in the server's worker
process. The same scenario against the fake backend, step by step, is in
``tests/control/test_loop_migration.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from suanli.control import jobs
from suanli.control.plane import MigrationSettings
from suanli.inventory import Inventory, NodeDecl
from tests.control.control_helpers import ServerProcess, free_port, wait_until
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


def test_the_server_flag_turns_migration_on_in_its_worker(tmp_path: Path) -> None:
    """Through ``suanli server``: the flag reaches the worker process that runs the loop.
    One four-GPU node of the demo inventory is left schedulable and fragmented by shares."""
    srv = ServerProcess(
        tmp_path / "data", None, free_port(), args=("--runtime", "process", "--migration-moves", "2", "--notice", "1")
    )
    srv.start()
    try:
        c = srv.client()
        for n in c.nodes():
            if n["name"] != "rtx4090-0":
                c.set_node_state(n["name"], "cordoned")
        gpu = {"accelerators": "RTX4090:1"}
        big = [c.launch({"resources": {**gpu, "gpu_milli": 800}, "run": "sleep 300"})["id"] for _ in range(4)]
        wait_until(lambda: all(c.job(j)["state"] == "running" for j in big), 30)
        small = []
        for _ in range(4):  # one at a time: each fits only beside a big share
            run = "trap 'exit 0' TERM; while true; do sleep 0.1; done"
            small.append(c.launch({"resources": {**gpu, "gpu_milli": 200}, "run": run, "checkpoint_dir": "ckpt"})["id"])
            wait_until(lambda: c.job(small[-1])["state"] == "running", 30)
        for j in big:
            c.cancel_job(j)
        wait_until(lambda: all(c.job(j)["state"] == "cancelled" for j in big), 30)
        whole = c.launch({"resources": gpu, "run": "sleep 1"})["id"]
        wait_until(lambda: c.job(whole)["state"] in ("running", "succeeded"), 60)
        moved = [j for j in small if any("migration for job-" in (e["message"] or "") for e in c.events("job", j))]
        assert len(moved) == 1, [c.events("job", j) for j in small]
        wait_until(lambda: c.job(moved[0])["state"] == "running", 30)

        def metric(name: str) -> float | None:  # the loop's counters as /metrics exports them
            found = re.search(rf"^{name} (\S+)$", httpx.get(srv.url + "/metrics").text, re.MULTILINE)
            return float(found.group(1)) if found else None

        names = ("migrations", "notices", "reclaimed", "failed_over")
        # the loop writes its counters at most once a second: wait for the row to catch up
        wait_until(lambda: [metric(f"suanli_control_{n}") for n in names] == [1.0, 1.0, 1.0, 0.0], 10)
    finally:
        srv.close()
