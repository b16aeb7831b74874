"""SSH into instances with plain OpenSSH: the owner's registered keys open it, nobody
else's; ``scp``, ``sftp`` and ``suanli ssh ID -- CMD`` work; keys added later apply to a
running instance."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from tests.containers.test_container_lifecycle import create
from tests.control.control_helpers import Server, wait_until

OPTS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "ConnectTimeout=5",
    "-o",
    "LogLevel=ERROR",
]


def ssh(inst: dict, key: Path, command: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(inst["ssh"]) + ["-i", str(key), *OPTS, command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def ssh_ready(inst: dict, key: Path) -> subprocess.CompletedProcess[str]:
    """sshd starts with the container: the first connection may come before it listens."""
    return wait_until(lambda: (r := ssh(inst, key, "true")).returncode != 255 and r, 20)


def user(srv: Server, name: str, tenant: str | None = None) -> str:
    if tenant and tenant not in {t["name"] for t in srv.get("/v1/tenants")}:
        srv.post("/v1/tenants", {"name": tenant}, expect=201)
        srv.post("/v1/billing/topups", {"tenant": tenant, "amount": "1000"}, expect=201)  # prepaid
    return srv.post("/v1/users", {"name": name, "role": "member", "tenant": tenant}, expect=201).json()["token"]


def add_key(srv: Server, token: str, public: str) -> None:
    srv.post("/v1/keys", {"public_key": public}, expect=201, token=token)


def test_owner_key_opens_the_instance_and_no_other_key_does(csrv: Server, keypair) -> None:  # type: ignore[no-untyped-def]
    alice = user(csrv, "alice", "lab")
    bob = user(csrv, "bob", "lab")  # same tenant, another user
    eve = user(csrv, "eve", "rival")  # another tenant
    (ka, pa), (kb, pb), (ke, pe) = keypair("alice"), keypair("bob"), keypair("eve")
    add_key(csrv, alice, pa)
    add_key(csrv, bob, pb)
    add_key(csrv, eve, pe)
    inst = create(csrv, token=alice, image="python")
    assert inst["ssh"].startswith("ssh -p ") and inst["ssh"].endswith("@127.0.0.1"), inst["ssh"]
    ready = ssh_ready(inst, ka)
    assert ready.returncode == 0, ready.stderr
    r = ssh(inst, ka, "hostname; echo gpus=$CUDA_VISIBLE_DEVICES; test -d /workspace && echo ws; exit 5")
    assert r.returncode == 5 and f"instance-{inst['id']}" in r.stdout and "gpus=0" in r.stdout and "ws" in r.stdout, r
    for other in (kb, ke):
        denied = ssh(inst, other, "true")
        assert denied.returncode == 255 and "Permission denied" in denied.stderr, denied


def test_scp_and_sftp_move_files_in_and_out(csrv: Server, keypair, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key, pub = keypair("me")
    add_key(csrv, csrv.token, pub)
    inst = create(csrv, image="python")
    ssh_ready(inst, key)
    port = shlex.split(inst["ssh"])[2]
    local = tmp_path / "up.txt"
    local.write_text("payload\n")
    up = subprocess.run(
        ["scp", "-P", port, "-i", str(key), *OPTS, str(local), "root@127.0.0.1:/workspace/up.txt"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert up.returncode == 0, up.stderr
    assert ssh(inst, key, "cat /workspace/up.txt").stdout == "payload\n"
    batch = tmp_path / "batch"
    batch.write_text(f"get /workspace/up.txt {tmp_path / 'down.txt'}\nput {local} /workspace/sftp.txt\n")
    sftp = subprocess.run(
        ["sftp", "-P", port, "-i", str(key), *OPTS, "-b", str(batch), "root@127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sftp.returncode == 0, sftp.stderr
    assert (tmp_path / "down.txt").read_text() == "payload\n"
    assert ssh(inst, key, "cat /workspace/sftp.txt").stdout == "payload\n"


def test_a_key_added_later_opens_a_running_instance_and_a_removed_one_stops(csrv: Server, keypair) -> None:  # type: ignore[no-untyped-def]
    first, pub1 = keypair("first")
    add_key(csrv, csrv.token, pub1)
    inst = create(csrv, image="python")
    ssh_ready(inst, first)
    late, pub2 = keypair("late")
    assert ssh(inst, late, "true").returncode == 255
    add_key(csrv, csrv.token, pub2)
    assert ssh(inst, late, "echo in").stdout == "in\n"
    kid = next(k["id"] for k in csrv.get("/v1/keys") if k["public_key"].split()[1] == pub1.split()[1])
    csrv.http.delete(f"/v1/keys/{kid}", headers=csrv.headers)
    assert ssh(inst, first, "true").returncode == 255
