"""Task secrets, probed as an attacker would: each probe that finds a value fails the test.

A real ``suanli server`` process (process runtime, SQLite in its data directory) runs a real
job and a real instance with secrets; the workloads must see them, and the values must be in
no ``sqlite3 .dump``, no file under the data directory, no API or CLI listing. The server's
own environment (a canary) must not reach a workload.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from suanli.control.workload_secrets import MASK
from tests.control.control_helpers import ServerProcess, cli_command, free_port, wait_until

#: Files a test's ServerProcess writes into the data directory itself (its log, the CLI's config).
TEST_ARTIFACTS = {"server.log", "cli.json"}


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def dump(db: Path) -> str:
    return subprocess.run(["sqlite3", str(db), ".dump"], capture_output=True, text=True, check=True).stdout


def leaks(data_dir: Path, values: list[str]) -> list[str]:
    """Every file under ``data_dir`` holding one of ``values`` in plain text. An instance
    disk's filesystem image (``disks/*.ext4``, sparse, the rented size) is read through its
    mount point instead, where its files are."""
    found = []
    for path in data_dir.rglob("*"):
        if path.is_file() and not path.is_symlink() and not (path.parent.name == "disks" and path.suffix == ".ext4"):
            raw = path.read_bytes()
            found += [f"{path}: {v[:4]}..." for v in values if v.encode() in raw]
    return found


def not_private(data_dir: Path) -> list[str]:
    """Every file or directory under ``data_dir`` (itself included) group or others may use."""
    bad = []
    for path in [data_dir, *data_dir.rglob("*")]:
        if path.is_symlink() or path.name in TEST_ARTIFACTS:
            continue
        m = stat.S_IMODE(path.lstat().st_mode)
        if m & 0o077:
            bad.append(f"{path.relative_to(data_dir.parent)} {m:04o}")
    return bad


def cli(srv: ServerProcess, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(cli_command(*args), env={**srv.cli_env(), **(env or {})}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def finished(srv: ServerProcess, job_id: int) -> dict:
    c = srv.client()
    return wait_until(lambda: (j := c.job(job_id))["state"] in ("succeeded", "failed") and j, 60)


@pytest.fixture
def srv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SEC_CANARY", "canary-7f3a-server-env")  # in the server's environment only
    monkeypatch.delenv("SUANLI_SECRET_KEY_FILE", raising=False)
    server = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "process")).start()
    try:
        yield server
    finally:
        server.close()


RUN = (
    'printf %s "$HF_TOKEN" | sha256sum; printf %s "$EXTRA" | sha256sum; printf %s "$FROM_SHELL" | sha256sum; '
    'echo "canary=${SEC_CANARY:-absent}"; echo "names=$SUANLI_SECRET_NAMES"; echo out > result.txt'
)


def launch(srv: ServerProcess, tmp_path: Path, token: str, extra: str, shell: str) -> dict:
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: sec\nresources: {accelerators: 'H100:1'}\n"
        f"envs: {{EPOCHS: 1}}\nsecrets: {{HF_TOKEN: {token}}}\ncheckpoint_dir: ckpt\nrun: {json.dumps(RUN)}\n"
    )
    out = cli(
        srv, "launch", str(task), "--secret", f"EXTRA={extra}", "--secret", "FROM_SHELL", "--json", env={"FROM_SHELL": shell}
    )
    return json.loads(out.stdout)


def test_a_secret_reaches_its_workload_and_nowhere_else(srv: ServerProcess, tmp_path: Path) -> None:
    token, extra, shell, disk = "hf_tok-A1b2C3d4E5", "extra-9Z8y7X", "shell-Q5w4E3", "disk-K7j6H5g4"
    values = [token, extra, shell, disk]
    job = launch(srv, tmp_path, token, extra, shell)
    assert job["secrets"] == {"EXTRA": MASK, "FROM_SHELL": MASK, "HF_TOKEN": MASK}
    assert "secrets" not in job["spec"]
    done = finished(srv, job["id"])
    c = srv.client()
    logs = c.job_logs(job["id"])
    assert done["state"] == "succeeded", (done, logs)
    # the workload sees every secret (shown here by its digest: the value itself would be in the log)
    for v in (token, extra, shell):
        assert sha(v) in logs, logs
    assert "canary=absent" in logs, "the server's environment reached the task"
    assert "names=EXTRA FROM_SHELL HF_TOKEN" in logs

    inst = json.loads(
        cli(srv, "instances", "create", "--gpu", "h100", "--secret", f"DISK_TOKEN={disk}", "--wait", "--json").stdout
    )
    assert inst["state"] == "running" and inst["secrets"] == {"DISK_TOKEN": MASK}, inst
    seen = c.exec(inst["id"], 'printf %s "$DISK_TOKEN" | sha256sum; echo "canary=${SEC_CANARY:-absent}"')
    assert sha(disk) in seen["output"] and "canary=absent" in seen["output"], seen

    # probes: the database, every file under the data directory, every listing
    db_dump = dump(srv.data_dir / "suanli.db")
    assert not [v for v in values if v in db_dump], "a secret is in sqlite3 .dump"
    assert '"HF_TOKEN": "v1.' in db_dump or '"HF_TOKEN":"v1.' in db_dump  # sealed, not dropped
    assert leaks(srv.data_dir, values) == []
    listings = [
        json.dumps(c.request("GET", path))
        for path in ("/v1/jobs", f"/v1/jobs/{job['id']}", "/v1/instances", f"/v1/instances/{inst['id']}", "/v1/events")
    ]
    listings += [
        cli(srv, *args).stdout
        for args in (
            ("jobs", "list", "--json"),
            ("jobs", "list"),
            ("jobs", "show", str(job["id"]), "--json"),
            ("instances", "list", "--json"),
            ("instances", "list"),
            ("instances", "show", str(inst["id"]), "--json"),
        )
    ]
    assert not [v for v in values for text in listings if v in text], "a secret is in a listing"
    assert not [v for v in values if v in (srv.data_dir / "server.log").read_text()], "a secret is in the server's log"

    # the data directory and everything in it are the server's user's alone
    assert not_private(srv.data_dir) == []


def test_rotation_with_a_running_server(srv: ServerProcess, tmp_path: Path) -> None:
    c = srv.client()
    key_file = srv.data_dir / "secret-key"
    old_id = json.loads(key_file.read_text())["active"]
    inst = json.loads(cli(srv, "instances", "create", "--gpu", "h100", "--secret", "TOKEN=before-rot", "--wait", "--json").stdout)
    assert inst["state"] == "running", inst
    c.stop_instance(inst["id"])
    wait_until(lambda: c.instance(inst["id"])["state"] == "stopped", 30)

    done = subprocess.run(
        cli_command("server", "rotate-key", "--data-dir", str(srv.data_dir)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    ring = json.loads(key_file.read_text())
    new_id = ring["active"]
    assert new_id != old_id and set(ring["keys"]) == {old_id, new_id}
    assert f"active key {new_id} (was {old_id}); 1 secret(s) resealed" in done.stdout
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert f'"v1.{old_id}.' not in dump(srv.data_dir / "suanli.db")

    # the running server took the new keyring without a restart: the resealed instance starts ...
    c.start_instance(inst["id"])
    wait_until(lambda: c.instance(inst["id"])["state"] == "running", 30)
    assert sha("before-rot") in c.exec(inst["id"], 'printf %s "$TOKEN" | sha256sum')["output"]
    # ... and new secrets are sealed under the new key
    job = launch(srv, tmp_path, "after-rot", "x-after", "y-after")
    assert f'"v1.{new_id}.' in dump(srv.data_dir / "suanli.db")
    assert finished(srv, job["id"])["state"] == "succeeded"
    assert sha("after-rot") in c.job_logs(job["id"])


def test_a_key_file_others_can_read_stops_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "secret-key").write_text("{}")
    os.chmod(data / "secret-key", 0o644)
    done = subprocess.run(
        cli_command("server", "--data-dir", str(data), "--port", str(free_port()), "--runtime", "process"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "chmod 600" in done.stdout + done.stderr, (done.stdout, done.stderr)
    assert not (data / "suanli.db").exists()  # refused before anything was made


def test_an_operators_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    own = tmp_path / "byok.key"
    own.write_text(base64.b64encode(os.urandom(32)).decode())
    own.chmod(0o600)
    monkeypatch.setenv("SUANLI_SECRET_KEY_FILE", str(own))
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "process")).start()
    try:
        job = launch(srv, tmp_path, "byok-value", "e", "s")
        assert finished(srv, job["id"])["state"] == "succeeded"
        assert sha("byok-value") in srv.client().job_logs(job["id"])
        assert not (srv.data_dir / "secret-key").exists()
        assert "byok.key" in (srv.data_dir / "server.log").read_text()
    finally:
        srv.close()
