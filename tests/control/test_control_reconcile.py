"""Restarts are safe: after ``kill -9`` of the server, running work is adopted
(never started twice), work that died meanwhile is marked failed, allocations
match what really runs; launches left in flight are adopted or failed; tasks no
row owns are stopped."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from sqlalchemy import select

from suanli.backends.base import TaskSpec
from suanli.backends.local.process import kill_leftovers
from suanli.control.capacity import snapshot, take
from suanli.control.launcher import task_key
from suanli.control.scheduling import plan_gang, to_request
from suanli.db.models import Allocation, Event, Gpu, Job
from suanli.db.session import Database
from suanli.scheduler import Scheduler, make_policy
from tests.control.control_helpers import ServerProcess, free_port, start_server, wait_until
from tests.sqlite_helpers import migrated_sqlite_url


def _active_gpu_milli(url: str) -> int:
    db = Database(url)
    try:
        with db.sessions() as s:
            rows = list(s.scalars(select(Allocation).where(Allocation.ended_at.is_(None))))
            used = sum(s.scalars(select(Gpu.used_milli)))
        total = sum(a.milli_per_gpu * len(a.gpu_indices) for a in rows)
        assert total == used, (total, used)  # counters agree with allocation rows
        return total
    finally:
        db.dispose()


def test_kill9_and_restart_adopts_or_fails_never_twice(db_url: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    marks = tmp_path / "marks"
    marks.mkdir()
    srv = ServerProcess(data, db_url, free_port()).start()
    c = srv.client()
    try:
        # job 1 records each start, then waits for a go file: it must start exactly once
        run1 = f'echo "start $SUANLI_JOB_ID $NODE_RANK" >> {marks}/starts; while [ ! -f {marks}/go ]; do sleep 0.1; done; echo finished'
        j1 = c.launch({"resources": {"accelerators": "H100:2"}, "run": run1})
        j2 = c.launch({"resources": {"accelerators": "A100-80G:1"}, "run": "sleep 300"})
        inst = c.create_instance(gpu_model="RTX4090", gpu_count=1)
        wait_until(lambda: all(c.job(j)["state"] == "running" for j in (j1["id"], j2["id"])), 30)
        wait_until(lambda: c.instance(inst["id"])["state"] == "running", 30)
        wait_until(lambda: (marks / "starts").exists(), 10)
        assert _active_gpu_milli(db_url) == 4000

        srv.kill9()
        # while the server is down, job 2's processes die
        h2 = c_handle(data, f"job-{j2['id']}-0")
        os.killpg(h2, signal.SIGKILL)
        time.sleep(0.3)

        srv.start()
        c = srv.client()
        wait_until(lambda: c.job(j2["id"])["state"] == "failed", 30)
        assert c.job(j1["id"])["state"] == "running"
        assert c.instance(inst["id"])["state"] == "running"
        assert _active_gpu_milli(db_url) == 3000  # job 2's GPU was given back
        # the adopted job finishes normally; its exit code comes from the wrapper
        (marks / "go").touch()
        wait_until(lambda: c.job(j1["id"])["state"] in ("succeeded", "failed"), 30)
        assert c.job(j1["id"])["state"] == "succeeded" and c.job(j1["id"])["exit_code"] == 0
        assert (marks / "starts").read_text().splitlines() == [f"start {j1['id']} 0"]
        assert "finished" in c.job_logs(j1["id"])
        # the adopted instance still works and stops cleanly
        assert c.exec(inst["id"], "echo alive")["output"] == "alive\n"
        c.stop_instance(inst["id"])
        wait_until(lambda: c.instance(inst["id"])["state"] == "stopped", 30)
        assert _active_gpu_milli(db_url) == 0
    finally:
        srv.stop()
        for key in os.listdir(data / "workloads"):  # only this test's processes, even after a PID wrap
            try:
                h = json.loads((data / "workloads" / key / "handle.json").read_text())
                kill_leftovers(int(h["pgid"]), f"SUANLI_TASK_DIR={h['dir']}")
            except (FileNotFoundError, KeyError):
                pass


def c_handle(data: Path, key: str) -> int:
    return int(json.loads((data / "workloads" / key / "handle.json").read_text())["pgid"])


def _claim_for_dead_server(srv, task: dict) -> int:  # type: ignore[no-untyped-def]
    """Queue a job and give it an allocation claimed by an owner that no longer exists."""
    job_id = srv.post("/v1/jobs", task, expect=201).json()["id"]
    db = srv.ctx.db
    with db.transaction() as s:
        snap = snapshot(s, ["local"])
        job = s.get(Job, job_id)
        allocs, _ = plan_gang(Scheduler(make_policy("best_fit"), snap.state), to_request(job), job.num_nodes)
        job.launch_owner = "dead-server"
        take(s, job, allocs, snap)
    return job_id


def test_in_flight_launches_are_adopted_or_failed(db_url: str, tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", db_url, start_loop=False)
    try:
        lost = _claim_for_dead_server(srv, {"resources": {"accelerators": "H100:1"}, "run": "echo never"})
        started = _claim_for_dead_server(srv, {"resources": {"accelerators": "H100:1"}, "run": "sleep 300"})
        backend = srv.ctx.backends["local"]
        # the dead server got as far as starting this one before it died
        backend.submit(
            TaskSpec(key=task_key("job", started), kind="job", workload_id=started, node="h100-0", node_rank=0, run="sleep 300")
        )
        # and a task from nowhere: no row owns it
        stray = backend.submit(
            TaskSpec(key="job-999-0", kind="job", workload_id=999, node="h100-0", node_rank=0, run="sleep 300")
        )
        srv.ctx.loop.recover()
        assert srv.get(f"/v1/jobs/{lost}")["state"] == "failed"
        assert "not started again" in srv.get(f"/v1/jobs/{lost}")["reason"]
        assert srv.get(f"/v1/jobs/{lost}/logs")["text"] == ""
        job = srv.get(f"/v1/jobs/{started}")
        assert job["state"] == "running" and len(job["allocations"]) == 1
        assert backend.status(stray).state.value == "exited"
        with srv.ctx.db.sessions() as s:
            active = list(s.scalars(select(Allocation).where(Allocation.ended_at.is_(None))))
            assert [a.job_id for a in active] == [started]
            msgs = [e.message for e in s.scalars(select(Event).where(Event.kind == "job", Event.object_id == started))]
            assert "adopted after a server restart" in msgs
    finally:
        srv.close()


def test_counter_drift_is_repaired(db_url: str, tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", db_url, start_loop=False)
    try:
        with srv.ctx.db.transaction() as s:
            s.execute(Gpu.__table__.update().where(Gpu.index == 0).values(used_milli=700))
        from suanli.control.reconcile import repair_counters

        assert repair_counters(srv.ctx.db) > 0
        assert all(g["free"] == g["total"] for g in srv.get("/v1/gpus"))
    finally:
        srv.close()


def test_shutdown_gives_back_claims_it_will_not_launch(db_url: str, tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", db_url, start_loop=False)
    try:
        job = srv.post("/v1/jobs", {"resources": {"accelerators": "H100:1"}, "run": "true"}, expect=201).json()
        loop = srv.ctx.loop
        loop._halt.set()  # as stop() does, before the tick that claimed it launches
        loop.tick()
        row = srv.get(f"/v1/jobs/{job['id']}")
        assert row["state"] == "queued" and row["allocations"] == []
        assert _active_gpu_milli(db_url) == 0
    finally:
        srv.close()


def test_a_failing_phase_is_logged_and_does_not_stop_the_tick(tmp_path: Path, monkeypatch) -> None:
    srv = start_server(tmp_path / "data", migrated_sqlite_url(tmp_path / "s.db"), start_loop=False)
    try:
        calls: list[int] = []

        def broken(force: bool = False) -> None:
            calls.append(1)
            raise RuntimeError("health sync broke")

        monkeypatch.setattr(srv.ctx.loop, "sync_health", broken)
        job = srv.post("/v1/jobs", {"run": "true"}, expect=201).json()
        srv.ctx.loop.tick()
        srv.ctx.loop.tick()
        assert calls == [1, 1] and srv.get(f"/v1/jobs/{job['id']}")["state"] in ("running", "succeeded")
    finally:
        srv.close()
