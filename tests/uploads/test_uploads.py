"""Jobs ship their code: ``POST /v1/uploads`` (cap, safe archives, content-addressed reuse),
the tenant check at job submission, ``suanli launch`` packing and uploading a workdir, and
``extract_into`` unpacking safely. Real app, real SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from suanli.cli.launch import pack
from suanli.control import uploads
from suanli.errors import Invalid
from tests.control.control_helpers import Server


def targz(*members: tuple[str, str, bytes | str]) -> bytes:
    """(name, kind, data): kind file | dir | sym (data = target) | hard (data = target) | chr."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info)
    return buf.getvalue()


GOOD = targz(("src", "dir", b""), ("src/train.py", "file", b"print('hi')\n"), ("README", "file", b"read me\n"))


def post_upload(server: Server, body: bytes, token: str | None = None, **headers: str) -> object:
    hdrs = {"Authorization": f"Bearer {token or server.token}", "Content-Type": "application/gzip", **headers}
    return server.http.post("/v1/uploads", content=body, headers=hdrs)


def stored(server: Server) -> list[str]:
    """Every file under the uploads directory (temporary parts included)."""
    root = server.data_dir / "uploads"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def member_token(server: Server, name: str, tenant: str) -> str:
    server.post("/v1/tenants", {"name": tenant}, expect=201)
    server.post("/v1/billing/topups", {"tenant": tenant, "amount": "1000"}, expect=201)  # prepaid
    return server.post("/v1/users", {"name": name, "tenant": tenant}, expect=201).json()["token"]


def tenant_id(server: Server, token: str) -> int:
    return server.http.get("/v1/me", headers={"Authorization": f"Bearer {token}"}).json()["tenant_id"]


def test_upload_then_reuse_same_id(server: Server) -> None:
    r = post_upload(server, GOOD)
    assert r.status_code == 201, r.text
    up = r.json()
    assert up == {"id": hashlib.sha256(GOOD).hexdigest(), "size": len(GOOD)}
    tid = tenant_id(server, server.token)
    path = server.data_dir / "uploads" / f"tenant-{tid}" / f"{up['id']}.tar.gz"
    assert path.read_bytes() == GOOD
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    again = post_upload(server, GOOD)
    assert again.status_code == 201 and again.json() == up
    assert stored(server) == [f"tenant-{tid}/{up['id']}.tar.gz"]  # kept once, no leftover parts
    assert server.get(f"/v1/uploads/{up['id']}") == up
    assert server.http.get(f"/v1/uploads/{'0' * 64}", headers=server.headers).json()["error"]["code"] == "not_found"
    assert server.get("/v1/uploads/limit") == {
        "max_bytes": uploads.DEFAULT_MAX_BYTES,
        "max_unpacked_bytes": uploads.DEFAULT_MAX_BYTES * uploads.UNPACK_RATIO,
    }
    assert server.http.post("/v1/uploads", content=GOOD).status_code == 401  # no token


def test_over_the_cap_is_413_and_nothing_is_kept(server: Server) -> None:
    server.ctx.max_upload_bytes = 4096  # what `suanli server --max-upload-mib` sets
    big = targz(("blob", "file", os.urandom(10_000)))
    r = post_upload(server, big)
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == "too_large" and "4096" in err["message"] and str(len(big)) in err["message"]
    # without a Content-Length (chunked): refused once the stream passes the cap
    chunks = (big[i : i + 1000] for i in range(0, len(big), 1000))
    r = server.http.post("/v1/uploads", content=chunks, headers={**server.headers, "Content-Type": "application/gzip"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", r.text
    assert stored(server) == []
    assert server.get("/v1/uploads/limit")["max_bytes"] == 4096
    # unpacking past the cap: a gzip bomb of zeros is refused too
    bomb = targz(("zeros", "file", bytes(4096 * uploads.UNPACK_RATIO + 1)))
    assert len(bomb) < 4096
    r = post_upload(server, bomb)
    assert r.status_code == 413 and "unpacks to more than" in r.json()["error"]["message"], r.text
    assert stored(server) == []


@pytest.mark.parametrize(
    ("members", "named"),
    [
        ((("../x", "file", b"evil"),), "'../x'"),
        ((("ok", "dir", b""), ("ok/../../x", "file", b"evil")), "'ok/../../x'"),
        ((("/etc/x", "file", b"evil"),), "'/etc/x'"),
        ((("link", "sym", "/etc/passwd"),), "'link' is a symlink"),
        ((("a", "file", b"a"), ("hard", "hard", "a")), "'hard' is a hard link"),
        ((("null", "chr", b""),), "'null' is a device"),
    ],
)
def test_unsafe_archives_are_refused_naming_the_member(server: Server, members: tuple, named: str) -> None:
    r = post_upload(server, targz(("fine.py", "file", b"x = 1\n"), *members))
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid" and named in err["message"], err
    assert stored(server) == []


def test_not_an_archive_is_refused(server: Server) -> None:
    for body in (b"just some text", GOOD[: len(GOOD) // 2], b""):
        r = post_upload(server, body)
        assert r.status_code == 422, r.text
    r = server.http.post("/v1/uploads", json={"a": 1}, headers=server.headers)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert stored(server) == []


def test_jobs_use_only_their_tenants_uploads(server: Server) -> None:
    alice = member_token(server, "alice", "lab")
    bob = member_token(server, "bob", "rivals")
    up = post_upload(server, GOOD, token=alice).json()
    task = {"run": "true", "code": up["id"]}
    r = server.post("/v1/jobs", task, token=bob)
    assert r.status_code == 422 and "no upload" in r.json()["error"]["message"] and "this tenant" in r.json()["error"]["message"]
    r = server.post("/v1/jobs", {"run": "true", "code": "f" * 64}, token=alice)
    assert r.status_code == 422 and "no upload" in r.json()["error"]["message"]
    r = server.post("/v1/jobs", {"run": "true", "code": "../../admin-token"}, token=alice)
    assert r.status_code == 422 and "code" in r.json()["error"]["message"]
    assert server.get("/v1/jobs") == []  # nothing created
    job = server.post("/v1/jobs", task, expect=201, token=alice).json()
    assert job["spec"]["code"] == up["id"] and job["spec"]["workdir"] is None


def test_a_server_path_workdir_is_refused(server: Server, tmp_path: Path) -> None:
    r = server.post("/v1/jobs", {"run": "ls", "workdir": str(server.data_dir)})
    assert r.status_code == 422, r.text
    msg = r.json()["error"]["message"]
    assert msg.startswith("workdir:") and "upload" in msg and "suanli launch" in msg
    r = server.post("/v1/jobs", {"run": "ls", "workdir": str(tmp_path / "missing")})
    assert r.status_code == 422
    assert server.get("/v1/jobs") == []


# -- the CLI ------------------------------------------------------------------------------
def test_launch_missing_workdir_is_a_clear_error_and_creates_nothing(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nworkdir: src\nrun: python train.py\n")
    out = cli("launch", str(task), code=2)
    assert "workdir" in out and "does not exist" in out and str(tmp_path / "src") in out
    assert "does not exist" in cli("launch", str(task), "--dry-run", code=2)
    (tmp_path / "src").write_text("a file, not a directory")
    assert "not a directory" in cli("launch", str(task), "--json", code=2)
    assert server.get("/v1/jobs") == [] and stored(server) == []


def make_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 42\n")
    (root / "train.py").write_text("import pkg.mod\nprint(pkg.mod.VALUE)\n")
    (root / "empty").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\0")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / "weights.ckpt").write_bytes(b"big")
    (root / "data" / "raw").mkdir(parents=True)
    (root / "data" / "raw" / "x.bin").write_bytes(b"x")
    (root / "data" / "keep.txt").write_text("kept\n")
    (root / ".suanliignore").write_text("# big things\n*.ckpt\n\ndata/raw/\n")
    (root / "link").symlink_to("/etc/passwd")


def members_of(server: Server, upload_id: str) -> list[str]:
    [path] = (server.data_dir / "uploads").glob(f"tenant-*/{upload_id}.tar.gz")
    with tarfile.open(path, "r:gz") as tar:
        return sorted(m.name for m in tar)


def test_launch_uploads_the_workdir_and_the_job_carries_code(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_tree(tmp_path / "proj")
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nresources: {accelerators: H100:1}\nworkdir: proj\nrun: python train.py\n")
    assert "MAX COST" in cli("launch", str(task), "--dry-run")
    assert stored(server) == [] and server.get("/v1/jobs") == []  # --dry-run uploads nothing

    job = json.loads(cli("launch", str(task), "--json"))
    code = job["spec"]["code"]
    assert len(code) == 64 and job["spec"]["workdir"] is None
    assert members_of(server, code) == [".suanliignore", "data", "data/keep.txt", "empty", "pkg", "pkg/mod.py", "train.py"]
    out = cli("launch", str(task))  # the same tree again: same id, not sent twice
    assert "already uploaded" in out and code[:12] in out
    assert [j["spec"]["code"] for j in server.get("/v1/jobs")] == [code, code]
    assert len(stored(server)) == 1
    (tmp_path / "proj" / "train.py").write_text("print('changed')\n")
    assert "uploaded" in cli("launch", str(task))
    assert len(stored(server)) == 2

    dest = tmp_path / "volume" / "code"  # what the launcher does with it
    uploads.extract_into(server.data_dir, tenant_id(server, server.token), code, dest)
    assert (dest / "pkg" / "mod.py").read_text() == "VALUE = 42\n" and (dest / "empty").is_dir()
    assert not (dest / "link").exists() and not (dest / ".git").exists()


def test_the_job_runs_in_its_uploaded_code(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from suanli.control.launcher import job_volume

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "data.txt").write_text("from my laptop\n")
    task = tmp_path / "task.yaml"
    task.write_text("workdir: proj\nrun: cat data.txt; echo done > out.txt\n")
    job = json.loads(cli("launch", str(task), "--wait", "--json"))
    assert job["state"] == "succeeded", job
    assert cli("jobs", "logs", str(job["id"])) == "from my laptop\n"
    assert not (tmp_path / "proj" / "out.txt").exists()  # a copy ran, not the renter's directory
    assert (job_volume(server.data_dir, job["id"]) / "code" / "out.txt").read_text() == "done\n"


def test_real_http_refuses_over_the_cap_early(server: Server, tmp_path: Path) -> None:
    """Through uvicorn (not the in-process transport): the client gets the 413, not a broken pipe."""
    import threading
    import time

    import uvicorn

    from suanli.client import ApiError, SuanliClient
    from tests.control.control_helpers import free_port

    server.ctx.max_upload_bytes = 256 * 1024
    port = free_port()
    web = uvicorn.Server(uvicorn.Config(server.http.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    try:
        while not web.started:
            time.sleep(0.05)
        big = tmp_path / "big.tar.gz"
        big.write_bytes(targz(("noise", "file", os.urandom(8 * 1024 * 1024))))
        api = SuanliClient(f"http://127.0.0.1:{port}", server.token)
        started = time.monotonic()
        with pytest.raises(ApiError) as err:
            api.upload(big)
        assert err.value.status == 413 and err.value.code == "too_large" and time.monotonic() - started < 5
        small = tmp_path / "small.tar.gz"
        small.write_bytes(GOOD)
        assert api.upload(small)["id"] == hashlib.sha256(GOOD).hexdigest()
        assert len(stored(server)) == 1
    finally:
        web.should_exit = True
        thread.join(10)


def test_launch_over_the_cap_stops_before_sending(server: Server, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server.ctx.max_upload_bytes = 64 * 1024
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "noise.bin").write_bytes(os.urandom(200 * 1024))
    task = tmp_path / "task.yaml"
    task.write_text('workdir: proj\nrun: "true"\n')
    out = cli("launch", str(task), code=2)
    assert "over the server's cap of 64.0 KiB" in out and "noise.bin (200.0 KiB)" in out and ".suanliignore" in out
    assert server.get("/v1/jobs") == [] and stored(server) == []
    (tmp_path / "proj" / ".suanliignore").write_text("*.bin\n")
    job = json.loads(cli("launch", str(task), "--json"))
    assert job["spec"]["code"]


def test_pack_is_deterministic(tmp_path: Path) -> None:
    make_tree(tmp_path / "proj")
    a, b = pack(tmp_path / "proj", tmp_path / "a.tgz", 1 << 20), pack(tmp_path / "proj", tmp_path / "b.tgz", 1 << 20)
    assert a.sha256 == b.sha256 == hashlib.sha256((tmp_path / "a.tgz").read_bytes()).hexdigest()
    assert a.skipped == ["link"] and a.files == 4


def test_client_upload_streams_with_progress(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "code.tar.gz"
    body = targz(("noise", "file", os.urandom(300_000)))
    path.write_bytes(body)
    seen: list[tuple[int, int]] = []
    up = server.client().upload(path, lambda sent, total: seen.append((sent, total)), chunk_bytes=64 * 1024)
    assert up["id"] == hashlib.sha256(body).hexdigest()
    assert len(seen) > 1 and seen[-1] == (len(body), len(body)) and [s for s, _ in seen] == sorted(s for s, _ in seen)
    assert server.client().upload_info(up["id"]) == up and server.client().upload_info("0" * 64) is None


# -- extract_into -------------------------------------------------------------------------
def test_extract_into_writes_the_tree_and_replaces_dest(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    info = uploads.save(data, 7, GOOD)
    assert uploads.exists(data, 7, info.id) and not uploads.exists(data, 8, info.id) and not uploads.exists(data, 7, "../x")
    dest = tmp_path / "vol" / "code"
    dest.mkdir(parents=True)
    (dest / "stale.txt").write_text("from a previous run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (dest / "src").symlink_to(outside)  # left by a previous run, pointing out of the volume
    uploads.extract_into(data, 7, info.id, dest)
    assert (dest / "src" / "train.py").read_text() == "print('hi')\n" and not (dest / "src").is_symlink()
    assert (dest / "README").read_text() == "read me\n"
    assert not (dest / "stale.txt").exists() and list(outside.iterdir()) == []
    assert sorted(p.name for p in dest.parent.iterdir()) == ["code"]  # no staging leftovers
    with pytest.raises(Exception, match="no upload"):
        uploads.extract_into(data, 8, info.id, tmp_path / "other")


@pytest.mark.parametrize(
    "members",
    [
        (("../escape.txt", "file", b"evil"),),
        (("/tmp/abs-escape.txt", "file", b"evil"),),
        (("up", "sym", ".."), ("up/escape.txt", "file", b"evil")),
        (("h", "hard", "/etc/passwd"),),
    ],
)
def test_a_hostile_archive_put_around_the_api_cannot_escape(tmp_path: Path, members: tuple) -> None:
    data = tmp_path / "data"
    data.mkdir()
    body = targz(*members)
    with pytest.raises(Invalid):
        uploads.save(data, 1, body)  # the API refuses it ...
    digest = hashlib.sha256(body).hexdigest()
    path = uploads.archive_path(data, 1, digest)  # ... so write it straight into the store
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    dest = tmp_path / "vol" / "code"
    with pytest.raises(Invalid, match="unsafe archive member"):
        uploads.extract_into(data, 1, digest, dest)
    assert not dest.exists() and not (tmp_path / "vol" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()
    assert not Path("/tmp/abs-escape.txt").exists()


def test_save_checks_sizes_and_takes_streams(tmp_path: Path) -> None:
    with pytest.raises(uploads.TooLarge, match="cap of 100 bytes"):
        uploads.save(tmp_path, 1, GOOD, max_bytes=100)
    with pytest.raises(uploads.TooLarge):
        uploads.save(tmp_path, 1, io.BytesIO(GOOD), max_bytes=100)
    assert uploads.save(tmp_path, 1, io.BytesIO(GOOD)).id == uploads.save(tmp_path, 1, [GOOD[:10], GOOD[10:]]).id
    assert [p.name for p in (tmp_path / "uploads" / "tenant-1").iterdir()] == [f"{hashlib.sha256(GOOD).hexdigest()}.tar.gz"]
