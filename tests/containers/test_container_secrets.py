"""Secrets in containers (real Podman): the workload and its exec see them, and no file
of the task directory (``env.sh``, ``sshd_config``, ``handle.json``) holds them. They reach
the container through ``run -e NAME`` and the engine client's environment, never argv."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from tests.control.control_helpers import ServerProcess, cli_command, wait_until
from tests.security.test_secrets import leaks, not_private


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_container_workloads_see_secrets_no_file_holds_them(proc: ServerProcess, tmp_path: Path) -> None:
    c = proc.client()
    value, disk = "ctr-secret-J8h7G6", "ctr-disk-P0o9I8"
    job = c.launch(
        {
            "name": "csec",
            "image": "tiny",
            "resources": {"accelerators": "H100:1"},
            "secrets": {"HF_TOKEN": value},
            "run": 'printf %s "$HF_TOKEN" | sha256sum; echo "canary=${SEC_CANARY:-absent}"',
        }
    )
    done = wait_until(lambda: (j := c.job(job["id"]))["state"] in ("succeeded", "failed") and j, 90)
    logs = c.job_logs(job["id"])
    assert done["state"] == "succeeded" and done["runtime"] == "container", (done, logs)
    assert sha(value) in logs, logs
    inst = c.create_instance(gpu_model="h100", gpu_count=1, image="python", secrets={"DISK_TOKEN": disk})
    wait_until(lambda: c.instance(inst["id"])["state"] == "running", 90)
    seen = c.exec(inst["id"], 'printf %s "$DISK_TOKEN" | sha256sum')["output"]
    assert sha(disk) in seen, seen
    # an SSH login shell (no inherited environment) gets it from the container's own file
    login = c.exec(inst["id"], "env -u DISK_TOKEN sh -c '. /etc/profile.d/00-suanli.sh; printf %s \"$DISK_TOKEN\" | sha256sum'")
    assert sha(disk) in login["output"], login
    tdir = proc.data_dir / "workloads" / f"instance-{inst['id']}"
    assert (tdir / "env.sh").exists() and disk not in (tdir / "sshd_config").read_text() + (tdir / "env.sh").read_text()
    assert leaks(proc.data_dir, [value, disk]) == []
    listing = subprocess.run(cli_command("instances", "list", "--json"), env=proc.cli_env(), capture_output=True, text=True)
    assert disk not in listing.stdout and json.loads(listing.stdout)[0]["secrets"] == {"DISK_TOKEN": "******"}
    assert not_private(proc.data_dir / "workloads") == []
