"""End to end: a real ``suanli server`` process on the embedded SQLite database
with the demo inventory, driven by the real ``suanli`` CLI in subprocesses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.control.control_helpers import ServerProcess, free_port, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_server_cli_start_and_an_instance(tmp_path: Path) -> None:
    # as ./scripts/run does: no --data-dir, no --db -> ./.suanli with SQLite
    data = tmp_path / ".suanli"
    srv = ServerProcess(data, None, free_port(), cwd=tmp_path)
    srv.start()
    try:
        printed = (data / "server.log").read_text()
        assert f"admin token: {srv.token}" in printed and f"http://127.0.0.1:{srv.port}" in printed
        assert (data / "suanli.db").exists()

        gpus = srv.cli_json("gpus", "--json")
        assert {g["model"] for g in gpus} == {"H100", "A100-80G", "RTX4090", "Ascend-910B"}
        assert all(g["virtual"] and g["free"] == g["total"] for g in gpus)

        api = srv.client()
        inst = srv.cli_json("instances", "create", "--gpu", "rtx4090:1", "--wait", "--json")
        assert inst["state"] == "running"
        assert srv.cli("instances", "exec", str(inst["id"]), "echo $SUANLI_GPU_MODEL").stdout == "RTX4090\n"
        api.delete_instance(inst["id"])  # (rm, list and bad input: in-process CLI tests)
        wait_until(lambda: api.instances() == [], 30)
    finally:
        srv.stop()


@pytest.mark.torch
def test_server_cli_launch_the_distributed_example(tmp_path: Path) -> None:
    """examples/hello-distributed.yaml as a renter launches it: 2 nodes x 2 H100 (declared),
    torchrun on each node from the per-node variables, 4 real workers (gloo on CPU)."""
    data = tmp_path / ".suanli"
    srv = ServerProcess(data, None, free_port(), cwd=tmp_path)
    srv.start()
    try:
        # the process runtime passes on the server's PATH, which need not hold this venv's torchrun
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        job = srv.cli_json("launch", str(EXAMPLES / "hello-distributed.yaml"), "--env", f"PATH={path}", "--json")
        assert job["state"] == "queued" and isinstance(job["id"], int)
        api = srv.client()  # poll over HTTP: each CLI process pays the full import time
        wait_until(lambda: api.job(job["id"])["state"] in ("succeeded", "failed"), 120, 0.3)
        logs = srv.cli("jobs", "logs", str(job["id"])).stdout
        [listed] = srv.cli_json("jobs", "list", "--json")
        assert listed["state"] == "succeeded" and listed["exit_code"] == 0, logs

        lines = (data / "checkpoints" / f"job-{job['id']}" / "ckpt" / "runs.jsonl").read_text().splitlines()
        runs = [json.loads(x) for x in lines]
        starts = sorted((r for r in runs if r["event"] == "start"), key=lambda r: r["rank"])
        assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in starts] == [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)], (
            lines
        )
        assert {(r["world_size"], r["nnodes"], r["nproc_per_node"], r["allreduce"], r["backend"]) for r in starts} == {
            (4, 2, 2, 10.0, "gloo")
        }, lines
        assert len({r["master"] for r in starts}) == 1 and starts[0]["master"].startswith("127.0.0.1:"), lines
        assert starts[0]["node"] != starts[2]["node"], lines
        done = [r for r in runs if r["event"] == "done"]
        assert len(done) == 4 and {r["step"] for r in done} == {5} and len({r["params"] for r in done}) == 1, lines
        assert "Python 3" in logs and "rank 0 done at step 5" in logs and "rank 3 done at step 5" in logs, logs
    finally:
        srv.stop()
