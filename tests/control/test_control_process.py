"""Killing a finished task's leftovers never touches another program's group,
even when the group id has been reused."""

from __future__ import annotations

import os
import subprocess
import time

from suanli.backends.local import process


def test_kill_leftovers_only_kills_processes_of_that_task() -> None:
    env = dict(os.environ, SUANLI_TASK_DIR="/tmp/task-a")
    mine = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30; wait"], env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)  # an unrelated group
    try:
        time.sleep(0.3)
        # the other group, as if it had been handed our old group id: nothing of it dies
        assert process.kill_leftovers(other.pid, "SUANLI_TASK_DIR=/tmp/task-a") == 0
        assert process.kill_leftovers(mine.pid, "SUANLI_TASK_DIR=/tmp/task-b") == 0
        assert process.kill_leftovers(mine.pid, "SUANLI_TASK_DIR=/tmp/task-a") == 3  # bash + 2 sleeps
        mine.wait(5)
        assert other.poll() is None
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_process_runtime_task_does_not_inherit_the_server_environment(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Even without isolation, the server's own variables (database URLs, tokens) stay
    out of a task: it gets PATH and the like, and what the platform injects."""
    from suanli.backends.base import TaskSpec, TaskState
    from suanli.backends.local import LocalBackend

    monkeypatch.setenv("SUANLI_DB_PASSWORD", "canary-secret")
    backend = LocalBackend(tmp_path / "w", "process")
    spec = TaskSpec(key="job-1-0", kind="job", workload_id=1, node="n", node_rank=0, run="env > env.txt", env={"MINE": "yes"})
    h = backend.submit(spec)
    deadline = time.monotonic() + 10
    while backend.status(h).state == TaskState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    env = (tmp_path / "w" / "job-1-0" / "work" / "env.txt").read_text()
    assert "MINE=yes" in env and "PATH=" in env and "SUANLI_RUNTIME=process" in env
    assert "canary-secret" not in env
