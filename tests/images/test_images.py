"""The image catalog (API and CLI, on SQLite and PostgreSQL) and the local image
recipes (a real ``tiny`` build with Podman; the ``python`` image checked when present)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest
from sqlalchemy import func, select

from suanli.backends.local import imagebuild
from suanli.control import images
from suanli.db.models import Event, Image, Instance
from suanli.db.session import Database
from suanli.errors import Invalid

PODMAN = shutil.which("podman")
RUN_FLAGS = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
needs_podman = pytest.mark.skipif(PODMAN is None, reason="podman is not installed (scripts/images installs it)")


def _images(srv, token=None) -> list[dict]:  # type: ignore[no-untyped-def]
    r = srv.http.get("/v1/images", headers={"Authorization": f"Bearer {token or srv.token}"})
    assert r.status_code == 200, r.text
    return r.json()


def _delete(srv, name: str, token=None):  # type: ignore[no-untyped-def]
    return srv.http.delete(f"/v1/images/{name}", headers={"Authorization": f"Bearer {token or srv.token}"})


def _member(srv) -> str:  # type: ignore[no-untyped-def]
    r = srv.post("/v1/users", {"name": "renter", "role": "member"}, expect=201)
    return r.json()["token"]


def _instance_count(srv) -> int:  # type: ignore[no-untyped-def]
    with srv.ctx.db.sessions() as s:
        return s.scalar(select(func.count()).select_from(Instance))


def test_server_start_offers_the_builtin_images(server, cli) -> None:  # type: ignore[no-untyped-def]
    rows = json.loads(cli("images", "list", "--json"))
    by_name = {r["name"]: r for r in rows}
    assert {"python", "tiny"} <= set(by_name)
    assert [r["name"] for r in rows if r["default"]] == ["python"]
    py = by_name["python"]
    assert py["ref"] == "localhost/suanli/python:3.11"
    assert py["contents"] == {"python": "3.11", "cuda": None, "jupyterlab": False, "sshd": True}
    assert by_name["tiny"]["contents"]["sshd"] is False
    for r in rows:
        assert set(r) >= {"name", "ref", "description", "default", "contents", "present"}
        assert r["description"]
        assert r["present"] is None if PODMAN is None else isinstance(r["present"], bool)
    if PODMAN:  # present is the engine's own answer
        assert by_name["tiny"]["present"] == imagebuild.image_exists(by_name["tiny"]["ref"], PODMAN)
    table = cli("images", "list")
    assert "python" in table and "tiny" in table and "yes" in table


def test_operator_adds_switches_default_and_removes(server, cli) -> None:  # type: ignore[no-untyped-def]
    out = cli(
        "images",
        "add",
        "cuda-12.4",
        "--ref",
        "localhost/lab/cuda:12.4",
        "--description",
        "CUDA 12.4 devel",
        "--python",
        "3.11",
        "--cuda",
        "12.4",
        "--sshd",
        "--jupyterlab",
        "--default",
        "--json",
    )
    added = json.loads(out)
    assert added["default"] is True and added["present"] in (False, None)
    assert added["contents"] == {"python": "3.11", "cuda": "12.4", "jupyterlab": True, "sshd": True}
    rows = _images(server)
    assert [r["name"] for r in rows if r["default"]] == ["cuda-12.4"]  # the old default was unset
    assert rows[0]["name"] == "cuda-12.4"  # default first

    # the default follows: a request without an image gets it
    with server.ctx.db.sessions() as s:
        assert images.resolve(s, None).name == "cuda-12.4"
        assert images.resolve(s, "tiny").ref == "localhost/suanli/tiny:1"

    assert "python is the default image" in cli("images", "default", "python")
    assert [r["name"] for r in _images(server) if r["default"]] == ["python"]

    # a duplicate, a bad name, unknown contents: refused, nothing changes
    assert "exists" in cli("images", "add", "cuda-12.4", "--ref", "x/y:1", code=1)
    r = server.post("/v1/images", {"name": "cuda-12.4", "ref": "x/y:1"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "exists"
    for bad in (
        {"name": "Ubuntu", "ref": "x/y:1"},
        {"name": "-x", "ref": "x/y:1"},
        {"name": "ok", "ref": "x/y:1", "contents": {"rust": "1.80"}},
        {"name": "ok", "ref": "has space"},
        {"name": "ok", "ref": ""},
    ):
        r = server.post("/v1/images", bad)
        assert r.status_code == 422, (bad, r.text)
    assert len(_images(server)) == len(rows)

    assert "removed image cuda-12.4" in cli("images", "rm", "cuda-12.4")
    assert "cuda-12.4" not in {r["name"] for r in _images(server)}
    assert "no image" in cli("images", "rm", "cuda-12.4", code=1)
    with server.ctx.db.sessions() as s:  # each change is in the event log with its actor
        kinds = [e.to_state for e in s.scalars(select(Event).where(Event.kind == "image").order_by(Event.id))]
        assert kinds == ["added", "default", "removed"]


def test_member_lists_but_cannot_change_the_catalog(server, cli) -> None:  # type: ignore[no-untyped-def]
    token = _member(server)
    before = _images(server)
    assert _images(server, token) == before
    r = server.post("/v1/images", {"name": "mine", "ref": "x/y:1"}, token=token)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert _delete(server, "tiny", token).status_code == 403
    r = server.http.patch("/v1/images/tiny", json={"default": True}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403
    assert "forbidden" in cli("images", "add", "mine", "--ref", "x/y:1", token=token, code=1)
    assert "forbidden" in cli("images", "rm", "tiny", token=token, code=1)
    assert json.loads(cli("images", "list", "--json", token=token)) == json.loads(cli("images", "list", "--json"))
    assert _images(server) == before


def test_unknown_image_is_refused_with_the_offered_ones_and_nothing_is_created(server) -> None:  # type: ignore[no-untyped-def]
    r = server.post("/v1/instances", {"gpu_milli": 100, "image": "ubuntu:22.04"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "unknown_image"
    assert err["message"].startswith("image 'ubuntu:22.04' is not offered here; offered: python (default), ")
    assert "tiny" in err["message"]
    assert _instance_count(server) == 0
    # a known one, and none at all (the default), are accepted and recorded by name
    r = server.post("/v1/instances", {"gpu_milli": 100, "image": "tiny"}, expect=201)
    assert r.json()["image"] == "tiny"
    r = server.post("/v1/instances", {"gpu_milli": 100}, expect=201)
    assert r.json()["image"] == "python"


def test_an_image_in_use_cannot_be_removed(server) -> None:  # type: ignore[no-untyped-def]
    server.post("/v1/instances", {"gpu_milli": 100, "image": "tiny"}, expect=201)
    r = _delete(server, "tiny")
    assert r.status_code == 409 and r.json()["error"]["code"] == "in_use"
    assert "tiny" in {i["name"] for i in _images(server)}
    assert _delete(server, "python").status_code == 200  # nobody uses it


def test_an_empty_catalog_says_an_operator_must_add_one(server, cli) -> None:  # type: ignore[no-untyped-def]
    for row in _images(server):
        assert _delete(server, row["name"]).status_code == 200
    assert json.loads(cli("images", "list", "--json")) == []
    r = server.post("/v1/instances", {"gpu_milli": 100})
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_images"
    assert "operator must add one" in r.json()["error"]["message"]
    assert _instance_count(server) == 0
    # the first image offered becomes the default, so requests naming none work again
    added = json.loads(cli("images", "add", "busybox", "--ref", "localhost/suanli/tiny:1", "--json"))
    assert added["default"] is True
    with server.ctx.db.sessions() as s:
        assert images.resolve(s, None).name == "busybox"
        with pytest.raises(Invalid, match=r"^image 'python' is not offered here; offered: busybox \(default\)$"):
            images.resolve(s, "python")


def test_seed_defaults_fills_only_an_empty_catalog(db_url: str) -> None:
    db = Database(db_url)
    try:
        db.migrate()
        assert images.seed_defaults(db, lambda ref: False) == ["python", "tiny"]  # jupyter only when built
        rows = images.list_images(db)
        assert [(r.name, r.is_default) for r in rows] == [("python", True), ("tiny", False)]
        assert images.seed_defaults(db, lambda ref: True) == []  # an existing catalog is left alone
        with db.transaction() as s:
            for r in s.scalars(select(Image)):
                s.delete(r)
        assert images.seed_defaults(db, lambda ref: True) == ["python", "tiny", "verify", "jupyter"]
    finally:
        db.dispose()


def test_contents_are_normalized() -> None:
    assert images.normalize_contents(None) == {"python": None, "cuda": None, "jupyterlab": False, "sshd": False}
    assert images.normalize_contents({"cuda": " 12.4 ", "sshd": True})["cuda"] == "12.4"
    for bad in ({"sshd": "yes"}, {"python": 3.11}, {"python": ""}, {"gpu": True}):
        with pytest.raises(Invalid):
            images.normalize_contents(bad)


# -- real builds --------------------------------------------------------------------------


def _podman_run(ref: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PODMAN, "run", "--rm", *RUN_FLAGS, ref, *cmd], capture_output=True, text=True, timeout=120)


@needs_podman
def test_tiny_builds_where_no_registry_answers_and_runs() -> None:
    """``pull_or_build`` tries the configured registry, which answers nothing here, gives
    up within seconds and builds from Debian's busybox; the image runs under runc."""
    ref = f"localhost/suanli-test/tiny:{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    start = time.monotonic()
    try:
        result = imagebuild.pull_or_build("tiny", PODMAN, lines.append, registry="127.0.0.1:9/suanli", ref=ref)
        assert result.how == "built" and result.ref == ref
        assert time.monotonic() - start < 60
        assert any("no answer from 127.0.0.1:9" in line for line in lines)
        assert any(line.startswith(f"built {ref} in ") for line in lines)
        assert imagebuild.image_exists(ref, PODMAN)
        assert ref in (imagebuild.local_refs(PODMAN) or set())
        out = _podman_run(ref, "sh", "-c", "echo ok")
        assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
        out = _podman_run(ref, "sh", "-c", "pwd; id -u; grep ^root: /etc/passwd; test -d /tmp -a -d /workspace && echo dirs")
        assert out.stdout.split("\n")[:4] == ["/workspace", "0", "root:x:0:0:root:/root:/bin/sh", "dirs"], out
        # present now: a second call neither pulls nor builds
        again = imagebuild.pull_or_build("tiny", PODMAN, lines.append, registry="127.0.0.1:9/suanli", ref=ref)
        assert again.how == "present"
    finally:
        subprocess.run([PODMAN, "rmi", "-f", ref], capture_output=True)


@needs_podman
def test_the_recipes_own_tiny_runs() -> None:
    """The built-in ``localhost/suanli/tiny:1`` (built once by scripts/images, or here)."""
    imagebuild.build("tiny", PODMAN)
    out = _podman_run("localhost/suanli/tiny:1", "sh", "-c", "echo ok")
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_build_cli_refuses_an_unknown_recipe(cli) -> None:  # type: ignore[no-untyped-def]
    assert "no recipe nosuch" in cli("images", "build", "nosuch", "--no-register", code=2)


@needs_podman
def test_python_image_when_present() -> None:
    """The python image is slow to build (about a minute): checked only where it exists."""
    ref = imagebuild.RECIPES["python"].ref
    if not imagebuild.image_exists(ref, PODMAN):
        pytest.skip(f"{ref} is not built here (scripts/images builds it)")
    script = (
        "python3 --version; python3 -m venv /tmp/v && /tmp/v/bin/python -c 'print(42)'; "
        "ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l; ssh-keygen -A >/dev/null && /usr/sbin/sshd -t && echo sshd-ok; "
        "test -x /usr/lib/openssh/sftp-server && echo sftp-ok; pwd"
    )
    out = _podman_run(ref, "bash", "-c", script)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("Python 3.11")
    assert lines[1:6] == ["42", "0", "sshd-ok", "sftp-ok", "/workspace"]  # no host keys baked into the image
