"""SSH keys per user and ``suanli ssh``: through the real app (FastAPI's TestClient) and the
CLI in-process, on SQLite and PostgreSQL, with keys made by the real ``ssh-keygen``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from suanli.backends.base import Handle, SupportsSsh, TaskStatus
from suanli.cli.ssh import known_hosts_file, run, ssh_argv
from suanli.client import ApiError
from suanli.control import keys
from suanli.control.auth import Principal
from suanli.db.models import Instance, SshKey, User
from suanli.errors import Conflict, Invalid, NotFound
from tests.control.control_helpers import Server

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")


# -- helpers -----------------------------------------------------------------------------
def keygen(tmp_path: Path, name: str, *args: str, comment: str = "") -> Path:
    """A real key pair from ssh-keygen; returns the private key's path (the public one is +.pub)."""
    path = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-N", "", "-C", comment or f"{name}@test", "-f", str(path), *(args or ("-t", "ed25519"))],
        check=True,
        capture_output=True,
    )
    return path


def ssh_keygen_fingerprint(path: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(path), "-E", "sha256"], check=True, capture_output=True, text=True).stdout
    return out.split()[1]


def call(srv: Server, method: str, path: str, token: str | None = None, **kw: Any) -> tuple[int, Any]:
    r = srv.http.request(method, path, headers={"Authorization": f"Bearer {token or srv.token}"}, **kw)
    return r.status_code, (r.json() if r.content else None)


def user(srv: Server, name: str, tenant: str | None = None) -> dict:
    if tenant and tenant not in {t["name"] for t in srv.get("/v1/tenants")}:
        assert call(srv, "POST", "/v1/tenants", json={"name": tenant})[0] == 201
        assert call(srv, "POST", "/v1/billing/topups", json={"tenant": tenant, "amount": "1000"})[0] == 201  # prepaid
    code, body = call(srv, "POST", "/v1/users", json={"name": name, "role": "member", "tenant": tenant})
    assert code == 201, body
    return body


def key_rows(srv: Server) -> list[SshKey]:
    with srv.ctx.db.sessions() as s:
        return list(s.query(SshKey).order_by(SshKey.id))


def principal(srv: Server, user_id: int) -> Principal:
    with srv.ctx.db.sessions() as s:
        u = s.get(User, user_id)
        return Principal(u.id, u.tenant_id, u.name, u.role)


def place_instance(
    srv: Server,
    user_id: int,
    state: str = "running",
    backend: str = "local",
    runtime: str = "container",
    data: dict | None = None,
) -> int:
    """An instance row as the launcher leaves it (no loop runs in this suite to move it)."""
    with srv.ctx.db.transaction() as s:
        u = s.get(User, user_id)
        row = Instance(
            tenant_id=u.tenant_id,
            user_id=u.id,
            name="t",
            state=state,
            desired="running",
            image="suanli-tiny",
            gpu_count=1,
            runtime=runtime,
            handles=[Handle(backend, "instance-x", data or {"runtime": runtime}).to_json()] if state == "running" else None,
        )
        s.add(row)
        s.flush()
        return row.id


class ContainerBackendStandIn:
    """Stands in for the container backend: records the authorized_keys text each running
    instance is given (the real one writes it into the container)."""

    def __init__(self, name: str = "containers", fail_for: set[str] | None = None) -> None:
        self.name = name
        self.pushed: dict[str, list[str]] = {}
        self.fail_for = fail_for or set()

    def set_authorized_keys(self, handle: Handle, text: str) -> None:
        if handle.key in self.fail_for:
            raise RuntimeError("container gone")
        self.pushed.setdefault(handle.key, []).append(text)

    def list_running(self) -> list[Handle]:
        return []

    def status(self, handle: Handle) -> TaskStatus:  # pragma: no cover - unused here
        raise NotImplementedError


class NoSshBackend:
    name = "nossh"

    def list_running(self) -> list[Handle]:
        return []


# -- API -----------------------------------------------------------------------------
def test_api_add_list_remove(server: Server, tmp_path: Path) -> None:
    priv = keygen(tmp_path, "id_ed25519", comment="alice@laptop")
    text = priv.with_name("id_ed25519.pub").read_text()
    code, key = call(server, "POST", "/v1/keys", json={"public_key": text})
    assert code == 201, key
    assert {"id", "name", "fingerprint", "type", "created_at"} <= set(key)
    assert key["type"] == "ssh-ed25519" and key["name"] == "alice@laptop"
    assert key["fingerprint"] == ssh_keygen_fingerprint(priv.with_name("id_ed25519.pub"))
    assert key["public_key"] == " ".join(text.split())  # normalised, same key
    assert [k["id"] for k in call(server, "GET", "/v1/keys")[1]] == [key["id"]]

    ecdsa = keygen(tmp_path, "id_ecdsa", "-t", "ecdsa", "-b", "384")
    rsa = keygen(tmp_path, "id_rsa", "-t", "rsa", "-b", "3072")
    code, k2 = call(server, "POST", "/v1/keys", json={"public_key": ecdsa.with_name("id_ecdsa.pub").read_text(), "name": "work"})
    assert code == 201 and k2["type"] == "ecdsa-sha2-nistp384" and k2["name"] == "work"
    code, k3 = call(server, "POST", "/v1/keys", json={"public_key": rsa.with_name("id_rsa.pub").read_text()})
    assert code == 201 and k3["type"] == "ssh-rsa"
    assert k3["fingerprint"] == ssh_keygen_fingerprint(rsa.with_name("id_rsa.pub"))

    assert call(server, "DELETE", f"/v1/keys/{key['id']}")[0] == 200
    # by fingerprint, which holds '/' and '+' (URL-encoded), through the client
    assert server.client().remove_key(k2["fingerprint"])["id"] == k2["id"]
    assert [k["id"] for k in server.client().keys()] == [k3["id"]]
    code, err = call(server, "DELETE", f"/v1/keys/{key['id']}")
    assert code == 404 and err["error"]["code"] == "not_found"


def test_private_key_refused_and_nothing_stored(server: Server, tmp_path: Path) -> None:
    openssh = keygen(tmp_path, "id_ed25519").read_text()
    pem = keygen(tmp_path, "id_rsa_pem", "-t", "rsa", "-b", "2048", "-m", "PEM").read_text()
    pkcs8 = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        .decode()
    )
    for text in (openssh, pem, pkcs8, "ssh-ed25519 AAAA x\n" + openssh):
        code, err = call(server, "POST", "/v1/keys", json={"public_key": text})
        assert code == 422, err
        assert err["error"]["code"] == "private_key"
        assert "PRIVATE key" in err["error"]["message"] and "nothing was stored" in err["error"]["message"]
    assert key_rows(server) == []


def test_garbage_and_weak_keys_refused(server: Server, tmp_path: Path) -> None:
    good = keygen(tmp_path, "k").with_name("k.pub").read_text().strip()
    kind, b64, _ = good.split(" ", 2)
    weak = keygen(tmp_path, "weak", "-t", "rsa", "-b", "1024").with_name("weak.pub").read_text()
    cases = {
        "hello world": "not an OpenSSH public key line",
        "": "empty",
        f"{kind} !!notbase64!!": "not a valid ssh-ed25519 key",
        f"ssh-rsa {b64} mismatched-type": "not a valid ssh-rsa key",
        f'command="cat /etc/shadow" {good}': "without options",
        f"{good}\n{good}": "one key at a time",
        f"ssh-dss {b64}": "is not accepted",
        weak: "1024 bits",
        "x" * 20000: "at most",
    }
    for text, reason in cases.items():
        code, err = call(server, "POST", "/v1/keys", json={"public_key": text} if text else {"public_key": " "})
        assert code == 422, (text[:40], err)
        assert reason in err["error"]["message"], (text[:40], err)
    assert key_rows(server) == []
    # unknown fields are refused too, not ignored
    assert call(server, "POST", "/v1/keys", json={"public_key": good, "options": "x"})[0] == 422


def test_duplicate_refused(server: Server, tmp_path: Path) -> None:
    pub = keygen(tmp_path, "k").with_name("k.pub").read_text()
    assert call(server, "POST", "/v1/keys", json={"public_key": pub})[0] == 201
    kind, b64, _ = pub.split(" ", 2)
    code, err = call(server, "POST", "/v1/keys", json={"public_key": f"{kind} {b64} another-comment", "name": "again"})
    assert code == 409 and err["error"]["code"] == "exists"
    assert len(key_rows(server)) == 1


def test_other_users_keys_invisible_and_not_removable(server: Server, tmp_path: Path) -> None:
    bob = user(server, "bob")  # same tenant as the admin
    carol = user(server, "carol", tenant="acme")  # another tenant
    admin_key = call(server, "POST", "/v1/keys", json={"public_key": keygen(tmp_path, "a").with_name("a.pub").read_text()})[1]
    bob_key = call(
        server, "POST", "/v1/keys", token=bob["token"], json={"public_key": keygen(tmp_path, "b").with_name("b.pub").read_text()}
    )[1]
    assert [k["id"] for k in call(server, "GET", "/v1/keys", token=bob["token"])[1]] == [bob_key["id"]]
    assert call(server, "GET", "/v1/keys", token=carol["token"])[1] == []
    assert [k["id"] for k in call(server, "GET", "/v1/keys")[1]] == [admin_key["id"]]  # admin too: own keys only
    for token in (carol["token"], bob["token"]):
        assert call(server, "DELETE", f"/v1/keys/{admin_key['id']}", token=token)[0] == 404
        with pytest.raises(ApiError) as exc:
            server.client(token).remove_key(admin_key["fingerprint"])
        assert exc.value.status == 404
    code, _ = call(server, "DELETE", f"/v1/keys/{bob_key['id']}")  # nor may the admin remove bob's
    assert code == 404
    assert len(key_rows(server)) == 2


def test_authorized_keys_holds_exactly_the_users_keys(server: Server, tmp_path: Path) -> None:
    bob = user(server, "bob", tenant="acme")
    mine = [keygen(tmp_path, f"m{i}", comment=f"me {i}\tx").with_name(f"m{i}.pub").read_text() for i in range(2)]
    for text in mine:
        call(server, "POST", "/v1/keys", json={"public_key": "  " + text.replace(" ", "  ", 1) + "\r\n"})
    call(
        server, "POST", "/v1/keys", token=bob["token"], json={"public_key": keygen(tmp_path, "b").with_name("b.pub").read_text()}
    )
    me = server.get("/v1/me")["id"]
    with server.ctx.db.sessions() as s:
        text = keys.authorized_keys(s, me)
        assert keys.authorized_keys(s, 10_000) == ""
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 2
    for line, original in zip(lines, mine):
        kind, b64, _ = original.split(" ", 2)
        assert line.split(" ", 2)[:2] == [kind, b64]
    assert lines[0].endswith(" me 0 x")  # whitespace (a tab) in the comment normalised


def test_cli_add_list_rm(cli, server: Server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    priv = keygen(tmp_path, "id_ed25519", comment="me@box")
    pub = priv.with_name("id_ed25519.pub")
    key = json.loads(cli("keys", "add", str(pub), "--name", "laptop", "--json"))
    assert key["name"] == "laptop" and key["fingerprint"] == ssh_keygen_fingerprint(pub)
    assert "exists" in cli("keys", "add", str(pub), code=1)
    assert [k["id"] for k in json.loads(cli("keys", "list", "--json"))] == [key["id"]]
    assert key["fingerprint"] in cli("keys", "list")

    # the private key given by mistake: refused before sending, pointing at the .pub
    out = cli("keys", "add", str(priv), code=1)
    assert "PRIVATE key" in out and "nothing was sent or stored" in out and str(pub) in out
    lone = keygen(tmp_path, "lone")
    lone.with_name("lone.pub").unlink()
    assert "ssh-keygen -y -f" in cli("keys", "add", str(lone), code=1)
    assert "no such file" in cli("keys", "add", str(tmp_path / "missing.pub"), code=1)
    assert "name" in cli("keys", "add", str(pub), "--name", "x" * 101, code=1)  # the API's 422, one line
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key\n")
    assert "not an OpenSSH public key line" in cli("keys", "add", str(junk), code=1)
    assert len(key_rows(server)) == 1

    assert "removed key" in cli("keys", "rm", str(key["id"]))
    assert json.loads(cli("keys", "list", "--json")) == []
    assert "not_found" in cli("keys", "rm", str(key["id"]), code=1)


# -- pushing keys to running instances ------------------------------------------------------
def test_push_keys_reaches_the_users_running_instances_only(server: Server, tmp_path: Path) -> None:
    stand_in = ContainerBackendStandIn(fail_for={"broken"})
    server.ctx.backends["containers"] = stand_in  # type: ignore[assignment]
    server.ctx.backends["nossh"] = NoSshBackend()  # type: ignore[assignment]
    assert isinstance(stand_in, SupportsSsh) and not isinstance(NoSshBackend(), SupportsSsh)
    me = server.get("/v1/me")["id"]
    bob = user(server, "bob", tenant="acme")
    mine = place_instance(server, me, backend="containers")
    place_instance(server, me, state="stopped", backend="containers")
    place_instance(server, me, backend="nossh")
    theirs = place_instance(server, bob["id"], backend="containers")
    with server.ctx.db.transaction() as s:  # rename handle keys so the stand-in tells them apart
        for iid, key in ((mine, "mine"), (theirs, "theirs")):
            row = s.get(Instance, iid)
            row.handles = [Handle("containers", key, {}).to_json()]
        s.add(
            Instance(
                tenant_id=1,
                user_id=me,
                state="running",
                desired="running",
                gpu_count=1,
                handles=[Handle("containers", "broken", {}).to_json()],
            )
        )

    a = call(server, "POST", "/v1/keys", json={"public_key": keygen(tmp_path, "a").with_name("a.pub").read_text()})[1]
    assert list(stand_in.pushed) == ["mine"] and stand_in.pushed["mine"][-1].startswith("ssh-ed25519 ")
    b = call(server, "POST", "/v1/keys", json={"public_key": keygen(tmp_path, "b").with_name("b.pub").read_text()})[1]
    assert stand_in.pushed["mine"][-1].count("\n") == 2
    call(server, "DELETE", f"/v1/keys/{a['id']}")
    last = stand_in.pushed["mine"][-1]
    with server.ctx.db.sessions() as s:
        assert last == keys.authorized_keys(s, me) and b["public_key"] in last and a["public_key"] not in last
    assert "theirs" not in stand_in.pushed  # bob's instance never gets the admin's keys
    call(
        server, "POST", "/v1/keys", token=bob["token"], json={"public_key": keygen(tmp_path, "c").with_name("c.pub").read_text()}
    )
    assert len(stand_in.pushed["theirs"]) == 1 and len(stand_in.pushed["mine"]) == 3
    assert keys.push_keys(server.ctx.db, server.ctx.backends, me) == 1  # the broken one logged, not raised


def test_service_layer_hook_and_errors(server: Server, tmp_path: Path) -> None:
    me = principal(server, server.get("/v1/me")["id"])
    seen: list[int] = []
    pub = keygen(tmp_path, "k").with_name("k.pub").read_text()
    row = keys.add(server.ctx.db, me, pub, on_change=seen.append)
    assert seen == [me.user_id]
    with pytest.raises(Conflict):
        keys.add(server.ctx.db, me, pub, on_change=seen.append)
    with pytest.raises(Invalid):
        keys.add(server.ctx.db, me, "nonsense", on_change=seen.append)
    with pytest.raises(NotFound):
        keys.remove(server.ctx.db, me, "mykey", on_change=seen.append)
    assert seen == [me.user_id]  # refused changes call no hook
    keys.remove(server.ctx.db, me, row.fingerprint, on_change=seen.append)
    assert seen == [me.user_id] * 2 and keys.list_(server.ctx.db, me) == []


# -- suanli ssh ------------------------------------------------------------------------
def test_ssh_argv() -> None:
    argv = ssh_argv("ssh -p 40124 root@127.0.0.1", "/k/id", "/c/kh", ["nvidia-smi", "-L"], host_alias="suanli-instance-7")
    assert argv == [
        "ssh",
        "-i",
        "/k/id",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        "UserKnownHostsFile=/c/kh",
        "-o",
        "HostKeyAlias=suanli-instance-7",
        "-p",
        "40124",
        "root@127.0.0.1",
        "--",
        "nvidia-smi",
        "-L",
    ]
    assert ssh_argv("ssh -p 2222 'inst-7@127.0.0.1'", None, "/c/kh", []) == [
        "ssh",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        "UserKnownHostsFile=/c/kh",
        "-p",
        "2222",
        "inst-7@127.0.0.1",
    ]
    with pytest.raises(ValueError):
        ssh_argv("rm -rf /", None, "/c/kh", [])


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")
def test_ssh_argv_as_openssh_reads_it(tmp_path: Path) -> None:
    """``ssh -G`` prints the configuration ssh would use: the real client reads our argv as meant."""
    (tmp_path / "id").write_text("")  # ssh -G lists only identity files that exist
    argv = ssh_argv("ssh -p 40124 root@127.0.0.1", str(tmp_path / "id"), tmp_path / "kh", ["ls"], host_alias="suanli-instance-7")
    out = subprocess.run(
        [argv[0], "-G", *argv[1:]], capture_output=True, text=True, check=True, env={"HOME": str(tmp_path)}
    ).stdout
    conf: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        conf.setdefault(k.lower(), []).append(v)
    assert conf["hostname"] == ["127.0.0.1"] and conf["port"] == ["40124"] and conf["user"][0] == "root"
    assert conf["identityfile"][0] == str(tmp_path / "id") and conf["identitiesonly"] == ["yes"]
    assert conf["userknownhostsfile"] == [str(tmp_path / "kh")] and conf["hostkeyalias"] == ["suanli-instance-7"]
    assert conf["stricthostkeychecking"] == ["accept-new"]


def test_run_returns_the_commands_exit_code() -> None:
    assert run(["sh", "-c", "exit 7"]) == 7
    assert run(["sh", "-c", "kill -TERM $$"]) == 128 + 15


def test_known_hosts_file_per_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "cfg" / "config.json"))
    a, b = known_hosts_file("http://127.0.0.1:8470"), known_hosts_file("https://gpu.example.org/")
    assert a.parent == b.parent == tmp_path / "cfg" / "known_hosts" and a != b and a.parent.is_dir()


def test_ssh_refuses_an_instance_not_running(cli, server: Server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inst = server.client().create_instance(gpu_model="rtx4090", gpu_count=1, disk_gib=1)
    out = cli("ssh", str(inst["id"]), "--", "true", code=1)
    assert f"instance {inst['id']} is pending" in out and "needs a running instance" in out
    server.client().stop_instance(inst["id"])
    out = cli("ssh", str(inst["id"]), code=1)
    assert "is stopped" in out and f"suanli instances start {inst['id']}" in out
    assert "not_found" in cli("ssh", "9999", code=1)


def test_ssh_refuses_an_instance_without_sshd(cli, server: Server) -> None:  # type: ignore[no-untyped-def]
    me = server.get("/v1/me")["id"]
    proc = place_instance(server, me, runtime="process")
    assert server.client().instance(proc)["ssh"] is None
    out = cli("ssh", str(proc), code=1)
    assert "no isolation" in out and "has no SSH" in out and f"suanli instances exec {proc}" in out


def test_ssh_runs_openssh_with_the_instance_line_and_exits_with_its_code(
    cli, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The whole command, up to the ssh program: a stand-in ``ssh`` first on PATH records its
    argv and exits 7, as ssh does with the remote command's code (real ssh: the lead's e2e test)."""
    from suanli.db.models import Image

    with server.ctx.db.transaction() as s:
        s.add(Image(name="sshd-test", ref="localhost/sshd-test:1", contents={"sshd": True}))
    me = server.get("/v1/me")["id"]
    iid = place_instance(server, me, data={"runtime": "container", "ports": {"22": 40124}})
    with server.ctx.db.transaction() as s:
        s.get(Instance, iid).image = "sshd-test"
    assert server.client().instance(iid)["ssh"] == "ssh -p 40124 root@127.0.0.1"
    bin_dir, record = tmp_path / "bin", tmp_path / "argv.json"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(
        f'#!/bin/sh\npython3 -c \'import json,sys; json.dump(sys.argv[1:], open("{record}", "w"))\' "$@"\nexit 7\n'
    )
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")

    assert "no SSH key registered" in cli("ssh", str(iid), "--", "true", code=1)  # none would be accepted
    priv = keygen(tmp_path, "id_ed25519")
    cli("keys", "add", str(priv) + ".pub")
    assert "-i takes the private key" in cli("ssh", str(iid), "-i", str(priv) + ".pub", code=1)
    cli("ssh", str(iid), "-i", str(priv), "--", "exit", "7", code=7)
    argv = json.loads(record.read_text())
    kh = tmp_path / "known_hosts" / "testserver"  # SUANLI_CONFIG is tmp_path/config.json (cli fixture)
    assert argv == [
        "-i",
        str(priv),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        f"UserKnownHostsFile={kh}",
        "-o",
        f"HostKeyAlias=suanli-instance-{iid}",
        "-p",
        "40124",
        "root@127.0.0.1",
        "--",
        "exit",
        "7",
    ]
