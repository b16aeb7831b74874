"""Issue 12: work that ends while the server is down (kill -9) is billed to when it
ended, not to when the restarted server noticed: the exit file's time (a job that exited),
the wrapper's last sign of life (a job whose whole process group was SIGKILLed)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from suanli.db.models import Allocation
from suanli.db.session import Database
from tests.control.control_helpers import ServerProcess, free_port, wait_until


def _allocation(url: str, job_id: int) -> Allocation:
    db = Database(url)
    try:
        with db.sessions() as s:
            return s.scalars(select(Allocation).where(Allocation.job_id == job_id)).one()
    finally:
        db.dispose()


def test_work_that_ends_during_a_crash_is_billed_to_its_end(db_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = ServerProcess(data, db_url, free_port(), args=("--runtime", "process")).start()
    try:
        c = srv.client()
        exits = c.launch({"resources": {"accelerators": "H100:1"}, "run": "sleep 3"})
        killed = c.launch({"resources": {"accelerators": "A100-80G:1"}, "run": "sleep 300"})
        wait_until(lambda: all(c.job(j["id"])["state"] == "running" for j in (exits, killed)), 30)
        srv.kill9()
        t_down = time.time()
        # while the server is down: one job exits by itself, the other's whole group is SIGKILLed
        task = data / "workloads" / f"job-{killed['id']}-0"
        time.sleep(1.5)
        os.killpg(int(json.loads((task / "handle.json").read_text())["pgid"]), signal.SIGKILL)
        t_kill = time.time()
        exit_file = data / "workloads" / f"job-{exits['id']}-0" / "exit_code"
        wait_until(exit_file.exists, 20)
        exited_at = exit_file.stat().st_mtime
        time.sleep(max(0.0, t_down + 9 - time.time()))  # down for 9 s: long enough to tell apart
        t_up = time.time()
        srv.start()
        c = srv.client()
        wait_until(lambda: c.job(exits["id"])["state"] == "succeeded", 30)
        wait_until(lambda: c.job(killed["id"])["state"] == "failed", 30)

        a = _allocation(db_url, exits["id"])
        assert abs(a.ended_at.timestamp() - exited_at) < 0.05, (a.ended_at, exited_at)  # the exit file's time
        k = _allocation(db_url, killed["id"])
        # its last sign of life: at most one beat (1 s) before the kill
        assert t_kill - 1.5 <= k.ended_at.timestamp() <= t_kill + 0.05, (k.ended_at.timestamp(), t_kill)
        assert max(a.ended_at.timestamp(), k.ended_at.timestamp()) < t_up - 5

        # and the usage the billing thread posts (woken by the ends) is billed to those ends
        def gpu_usage() -> dict[int, int]:
            rows = httpx.get(srv.url + "/v1/billing/usage", headers={"Authorization": f"Bearer {srv.token}"}, timeout=10).json()
            return {r["workload_id"]: r["billed_seconds"] for r in rows if r["kind"] == "gpu" and r["workload_kind"] == "job"}

        billed = wait_until(lambda: (u := gpu_usage()) and exits["id"] in u and killed["id"] in u and u, 30)
        for job, alloc in ((exits, a), (killed, k)):
            ran = alloc.ended_at.timestamp() - alloc.started_at.timestamp()
            assert ran < 5.5 and billed[job["id"]] == 6, (billed, ran)  # one 6-s unit, not the ~15 s to the restart
    finally:
        srv.close()
