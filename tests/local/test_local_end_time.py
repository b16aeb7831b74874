"""When a local task ended, as the runtimes report it (``TaskStatus.ended_at``): the
process runtime's exit file and sign-of-life file, the engine's ``FinishedAt``."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from suanli.backends.base import TaskSpec, TaskState
from suanli.backends.local.engine import parse_time
from suanli.backends.local.process_runtime import ProcessRuntime


def test_engine_times_parse_to_epoch_seconds() -> None:
    assert parse_time("2026-12-02T06:00:00.123456789Z") == pytest.approx(1796191200.123457, abs=1e-6)
    assert parse_time("2026-12-02T07:00:00.5+01:00") == pytest.approx(1796191200.5)
    assert parse_time("2026-12-02T06:00:00Z") == 1796191200.0
    assert parse_time("2026-12-02T06:00:00.25 +0000 UTC") == pytest.approx(1796191200.25)
    assert parse_time("0001-01-01T00:00:00Z") is None  # Go's zero time: not finished
    assert parse_time("") is None and parse_time("yesterday") is None


def _wait(rt: ProcessRuntime, h, timeout_s: float = 20):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while (st := rt.status(h)).state == TaskState.RUNNING:
        assert time.monotonic() < deadline, "task did not end"
        time.sleep(0.05)
    return st


def test_process_tasks_report_when_they_ended(tmp_path: Path) -> None:
    rt = ProcessRuntime(tmp_path)
    spec = TaskSpec(key="job-1-0", kind="job", workload_id=1, node="n", node_rank=0, run="sleep 0.5; exit 3")
    h = rt.submit(spec, tmp_path / spec.key)
    st = _wait(rt, h)
    assert (st.exit_code, st.ended_at) == (3, (tmp_path / spec.key / "exit_code").stat().st_mtime)
    assert st.ended_at is not None and abs(time.time() - st.ended_at) < 5

    # the whole group SIGKILLed (no exit code written): the last sign of life, at most a beat early
    spec = TaskSpec(key="job-2-0", kind="job", workload_id=2, node="n", node_rank=0, run="sleep 300")
    h = rt.submit(spec, tmp_path / spec.key)
    time.sleep(2.2)
    os.killpg(int(json.loads((tmp_path / spec.key / "handle.json").read_text())["pgid"]), signal.SIGKILL)
    killed = time.time()
    st = _wait(rt, h)
    assert st.state == TaskState.EXITED and st.ended_at is not None
    assert killed - 1.5 <= st.ended_at <= killed, (st.ended_at, killed)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def test_the_sign_of_life_starts_no_process_per_beat(tmp_path: Path) -> None:
    """The wrapper's beat loop rewrites ``alive`` every second without a ``sleep``
    process per beat (a process a second for each running task adds up on a busy host):
    the loop's shell has no child at any of several looks, and ``alive`` keeps moving."""
    rt = ProcessRuntime(tmp_path)
    spec = TaskSpec(key="job-1-0", kind="job", workload_id=1, node="n", node_rank=0, run="sleep 300")
    h = rt.submit(spec, tmp_path / spec.key)
    try:
        wrapper = int(json.loads((tmp_path / spec.key / "handle.json").read_text())["pid"])
        alive = tmp_path / spec.key / "alive"
        deadline = time.monotonic() + 10
        while not alive.exists():
            assert time.monotonic() < deadline, "no sign of life"
            time.sleep(0.05)
        first = alive.stat().st_mtime
        # the wrapper's children: the beat loop (a fork of the wrapper: its command line) and run.sh's shell
        loops = [c for c in _children(wrapper) if "task.sh" in Path(f"/proc/{c}/cmdline").read_text()]
        assert len(loops) == 1, [Path(f"/proc/{c}/cmdline").read_text() for c in _children(wrapper)]
        for _ in range(8):
            assert _children(loops[0]) == [], [Path(f"/proc/{c}/cmdline").read_text() for c in _children(loops[0])]
            time.sleep(0.3)
        assert alive.stat().st_mtime > first
    finally:
        rt.stop(h, grace_s=1)
