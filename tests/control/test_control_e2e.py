"""End to end: a real ``suanli server`` process on the embedded SQLite database
with the demo inventory, driven by the real ``suanli`` CLI in subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from tests.control.control_helpers import ServerProcess, free_port, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_server_cli_launch_example_job(tmp_path: Path) -> None:
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

        out = tmp_path / "out"
        job = srv.cli_json("launch", str(EXAMPLES / "hello-distributed.yaml"), "--env", f"OUT_DIR={out}", "--json")
        assert job["state"] == "queued" and isinstance(job["id"], int)
        api = srv.client()  # poll over HTTP: each CLI process pays the full import time
        wait_until(lambda: api.job(job["id"])["state"] in ("succeeded", "failed"), 60, 0.3)
        [listed] = srv.cli_json("jobs", "list", "--json")
        assert listed["state"] == "succeeded" and listed["exit_code"] == 0, srv.cli("jobs", "logs", str(job["id"])).stdout

        ranks = {r: json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)}
        port = ranks[0]["env"]["MASTER_PORT"]
        assert port and ranks[1]["env"]["MASTER_PORT"] == port
        for rank, rec in ranks.items():
            env, suanli = rec["env"], rec["suanli"]
            assert env["NNODES"] == "2" and env["NPROC_PER_NODE"] == "2"
            assert env["NODE_RANK"] == str(rank) and env["MASTER_ADDR"] == "127.0.0.1"
            assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
            assert suanli["SUANLI_JOB_ID"] == str(job["id"]) and suanli["SUANLI_GPU_MODEL"] == "H100"
            assert suanli["SUANLI_VIRTUAL_GPUS"] == "1" and suanli["SUANLI_NUM_NODES"] == "2"
        assert ranks[0]["suanli"]["SUANLI_NODE_NAME"] != ranks[1]["suanli"]["SUANLI_NODE_NAME"]

        logs = srv.cli("jobs", "logs", str(job["id"])).stdout
        assert "rank 0 done" in logs and "rank 1 done" in logs and "Python 3" in logs

        # an instance through the CLI too
        inst = srv.cli_json("instances", "create", "--gpu", "rtx4090:1", "--wait", "--json")
        assert inst["state"] == "running"
        assert srv.cli("instances", "exec", str(inst["id"]), "echo $SUANLI_GPU_MODEL").stdout == "RTX4090\n"
        api.delete_instance(inst["id"])  # (rm, list and bad input: in-process CLI tests)
        wait_until(lambda: api.instances() == [], 30)
    finally:
        srv.stop()
