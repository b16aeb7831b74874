"""Between tenants and out of volumes: a sealed secret moved into another tenant's row does
not open (the launch fails, saying why, never the value); a ``checkpoint_dir`` outside the
job's volume is refused at submission (422, nothing created), and an older row that holds
one fails its launch without creating it. SQLite and PostgreSQL, a real control loop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from suanli.control import workload_secrets
from suanli.control.secrets import SecretKeyError
from suanli.db.models import Instance, Job
from tests.control.control_helpers import Server, start_server, wait_state


@pytest.fixture
def srv(db_url: str, tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path / "data", db_url, runtime="process", allow_process_runtime=True)
    try:
        yield server
    finally:
        server.close()


def member_of(srv: Server, tenant: str) -> str:
    srv.post("/v1/tenants", {"name": tenant}, expect=201)
    srv.client().topup(tenant, "1000")
    r = srv.post("/v1/users", {"name": f"m-{tenant}", "tenant": tenant}, expect=201)
    return r.json()["token"]


def test_a_ciphertext_moved_to_another_tenants_row_does_not_open(srv: Server) -> None:
    value = "tenant-a-secret-R4e3W2"
    a = srv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1, "secrets": {"TOKEN": value}}, expect=201).json()
    assert a["secrets"] == {"TOKEN": "******"}
    b_token = member_of(srv, "other")
    b = srv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1}, expect=201, token=b_token).json()
    wait_state(srv, "instance", b["id"], ("running",))
    srv.post(f"/v1/instances/{b['id']}/stop", token=b_token)
    wait_state(srv, "instance", b["id"], ("stopped",))
    with srv.ctx.db.transaction() as s:  # an attacker with write access to the database copies A's ciphertext
        stolen = s.get(Instance, a["id"]).secrets
        row = s.get(Instance, b["id"])
        row.secrets = dict(stolen)
        tenant_b = row.tenant_id
    with pytest.raises(SecretKeyError):
        workload_secrets.unseal(srv.ctx.keyring, tenant_b, stolen)
    srv.post(f"/v1/instances/{b['id']}/start", token=b_token)
    failed = wait_state(srv, "instance", b["id"], ("failed",))
    assert "does not open" in failed["reason"] and value not in json.dumps(failed), failed
    assert value not in json.dumps(srv.get("/v1/events"))


@pytest.mark.parametrize("path", ["/tmp/elsewhere", "/workspace/../etc", "ckpt/../../x", "../x", "//workspace/x", "~/ckpt"])
def test_a_checkpoint_dir_outside_the_volume_is_refused_and_nothing_is_made(srv: Server, path: str, tmp_path: Path) -> None:
    r = srv.post("/v1/jobs", {"run": "true", "checkpoint_dir": path})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["fields"] == ["checkpoint_dir"] and ("volume" in err["message"] or "/workspace" in err["message"]), err
    assert srv.get("/v1/jobs") == []
    assert not Path("/tmp/elsewhere").exists() and not (srv.data_dir / "checkpoints").exists()


@pytest.mark.parametrize("path", ["ckpt", "/workspace/ckpt", "a/b"])
def test_a_checkpoint_dir_in_the_volume_is_where_the_job_sees_it(srv: Server, path: str) -> None:
    job = srv.post("/v1/jobs", {"run": 'echo "ck=$SUANLI_CHECKPOINT_DIR"', "checkpoint_dir": path}, expect=201).json()
    done = wait_state(srv, "job", job["id"], ("succeeded", "failed"))
    assert done["state"] == "succeeded", done
    volume = srv.data_dir / "checkpoints" / f"job-{job['id']}"
    inside = path.removeprefix("/workspace/")
    assert (volume / inside).is_dir()
    assert f"ck={volume / inside}" in srv.get(f"/v1/jobs/{job['id']}/logs")["text"]


def test_an_old_row_with_an_absolute_checkpoint_dir_cannot_write_outside(db_url: str, tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", db_url, runtime="process", allow_process_runtime=True, start_loop=False)
    outside = tmp_path / "another-tenants-disk" / "ckpt"
    try:
        job = srv.post("/v1/jobs", {"run": "true", "checkpoint_dir": "ckpt"}, expect=201).json()
        with srv.ctx.db.transaction() as s:  # as a row from before paths were checked
            row = s.get(Job, job["id"])
            row.spec = {**row.spec, "checkpoint_dir": str(outside)}
        assert srv.ctx.loop is not None
        for _ in range(3):
            srv.ctx.loop.tick()
        failed = srv.get(f"/v1/jobs/{job['id']}")
        assert failed["state"] == "failed" and "outside the job's volume" in failed["reason"], failed
        assert not outside.parent.exists()
    finally:
        srv.close()


def test_a_symlink_in_the_volume_does_not_lead_the_server_out(tmp_path: Path) -> None:
    from suanli.control.volume_paths import inside

    volume, target = tmp_path / "vol", tmp_path / "target"
    volume.mkdir()
    target.mkdir()
    (volume / "ckpt").symlink_to(target)
    with pytest.raises(ValueError, match="outside"):
        inside(volume, "ckpt/new")
    assert inside(volume, "fine/dir") == (volume / "fine" / "dir").resolve()
