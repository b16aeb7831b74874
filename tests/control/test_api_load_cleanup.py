"""bench/api_load.py cleans up the instances its server left running, and nothing else:
not another program's process group that merely names the run's directory."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location("api_load", Path(__file__).parents[2] / "bench" / "api_load.py")
assert _spec is not None and _spec.loader is not None
api_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api_load)


def _group(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if d.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
        except (OSError, ValueError):
            continue
    return out


def test_cleanup_kills_the_runs_tasks_and_spares_a_group_that_names_its_directory(tmp_path: Path) -> None:
    run = tmp_path / "suanli-bench-x"
    workloads = (run / "data" / "workloads").resolve()
    (workloads / "instance-1").mkdir(parents=True)
    (run / "server.log").write_text("")
    # an instance as the local backend starts it: its own session, the marker in its environment
    task = subprocess.Popen(
        ["bash", "-c", "sleep 30 & wait"],
        start_new_session=True,
        env={**os.environ, "SUANLI_TASK_DIR": str(workloads / "instance-1")},
    )
    # someone's shell job on the same box that tails the run's log next to other work
    other = subprocess.Popen(["bash", "-c", f"tail -f {run}/server.log & sleep 30; wait"], start_new_session=True)
    try:
        time.sleep(0.5)
        assert len(_group(other.pid)) == 3  # bash, tail, sleep
        assert api_load.kill_run_tasks(workloads) == 2  # the task's bash and its sleep
        assert task.wait(5) == -9
        assert other.poll() is None and len(_group(other.pid)) == 3  # the old cleanup SIGKILLed this whole group
    finally:
        for p in (task, other):
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
