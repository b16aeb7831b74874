"""A local task's end reaches the control loop at once (``backends.local.exits``), not at
its next status poll: real processes, a real loop on a real SQLite database."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from suanli.api.server import build
from suanli.backends.local.exits import ExitWatcher
from suanli.control import jobs
from suanli.control.auth import Principal
from suanli.control.loop import ControlLoop
from suanli.control.task import Task
from suanli.db.models import Job

ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")


def test_the_watcher_tells_when_a_process_ends_and_only_then() -> None:
    ended = threading.Event()
    watcher = ExitWatcher()
    assert not watcher.watch(os.getpid()), "nobody listens yet: nothing is watched"
    watcher.on_exit = ended.set
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert watcher.watch(child.pid)
        assert not ended.wait(0.5), "told of an end while the process runs"
        child.kill()
        assert ended.wait(10), "the end of a watched process was not told"
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while any(t.name == "suanli-exit-watcher" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "suanli-exit-watcher" for t in threading.enumerate()), "the idle watcher kept its thread"
    ended.clear()
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert watcher.watch(gone.pid) and ended.is_set(), "a process that ended before it was watched is told at once"


def test_a_job_ends_long_before_the_next_status_poll(tmp_path: Path) -> None:
    """The loop polls statuses every two minutes here; the job's end is still recorded
    within seconds, because the backend says when it ended."""
    ctx, _ = build(tmp_path / "data", None, start_loop=False, runtime="process", allow_process_runtime=True)
    loop = ControlLoop(ctx.db, ctx.backends, tmp_path / "data", interval_s=60.0, poll_interval_s=120.0, heartbeat_timeout_s=None)
    loop.start()
    try:
        job = jobs.submit(ctx.db, ADMIN, Task.model_validate({"resources": {"accelerators": "H100:1"}, "run": "sleep 1"}))
        loop.wake()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with ctx.db.transaction() as s:
                row = s.get(Job, job.id)
                assert row is not None
                if row.state in ("succeeded", "failed"):
                    break
            time.sleep(0.05)
        assert row.state == "succeeded", row.reason
        assert row.started_at is not None and row.finished_at is not None
        assert (row.finished_at - row.started_at).total_seconds() < 20
    finally:
        loop.stop()
