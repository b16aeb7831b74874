"""Killing a finished task's leftovers never touches another program's group,
even when the group id has been reused."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

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


def test_kill_leftovers_also_kills_what_left_the_task_s_group_but_not_a_later_run() -> None:
    """torchrun starts its workers in sessions of their own: they leave the task's group
    but keep its marker and ``SUANLI_TASK_GROUP``; a later run of the same task (same
    marker, another group) is not touched."""
    env = dict(os.environ, SUANLI_TASK_DIR="/tmp/task-c")
    script = "setsid sleep 30 & sleep 30; wait"
    old = subprocess.Popen(["bash", "-c", f"export SUANLI_TASK_GROUP=$$; {script}"], env=env, start_new_session=True)
    new = subprocess.Popen(["bash", "-c", f"export SUANLI_TASK_GROUP=$$; {script}"], env=env, start_new_session=True)
    try:
        time.sleep(0.3)

        def escaped(leader: subprocess.Popen[bytes]) -> list[int]:
            out = subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True, text=True).stdout.split()
            mark = f"SUANLI_TASK_GROUP={leader.pid}".encode()
            return [
                int(pid)
                for pid in out
                if os.getpgid(int(pid)) != leader.pid and mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            ]

        [gone] = escaped(old)
        [stays] = escaped(new)
        assert process.kill_leftovers(old.pid, "SUANLI_TASK_DIR=/tmp/task-c") == 3  # bash, its sleep, the escaped sleep
        old.wait(5)
        time.sleep(0.1)
        assert process.start_ticks(gone) is None and new.poll() is None and process.start_ticks(stays) is not None
    finally:
        for p in (old, new):
            if p.poll() is None:
                process.kill_leftovers(p.pid, "SUANLI_TASK_DIR=/tmp/task-c")
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
