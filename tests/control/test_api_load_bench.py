"""bench/api_load.py cleans up the instances its server left running, and nothing else:
not another program's process group that merely names the run's directory; its clients
count what they send."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.async_helpers import run_async

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


@pytest.mark.parametrize("sender", ["aiohttp", "httpx"])
def test_each_sender_counts_every_request_and_its_errors(sender: str) -> None:
    """The load's clients, against the bench's own bare endpoint (a real uvicorn process):
    both ops of a phase counted, an error status counted as one, no request lost."""
    port = api_load.free_port()
    hello = subprocess.Popen(
        [sys.executable, str(Path(api_load.__file__)), "--serve-hello", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        api_load.wait_answering(url + "/hello", hello, None, "the bare endpoint")
        ops = [("hello", "GET", "/hello", None), ("missing", "POST", "/nope", {"a": 1})]
        out = run_async(api_load.drive(url, [None, "token"], 0.5, ops, sender))
        by_op = out["by_op"]
        assert by_op["hello"]["count"] > 0 and by_op["missing"]["count"] in (by_op["hello"]["count"], by_op["hello"]["count"] - 1)
        assert out["requests"] == by_op["hello"]["count"] + by_op["missing"]["count"]
        assert out["errors"] == {404: by_op["missing"]["count"]}
        assert sum(s["n"] for s in out["by_second"]) == out["requests"]
    finally:
        api_load.stop(hello)
