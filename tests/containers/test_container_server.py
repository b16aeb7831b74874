"""The server on containers, driven by the real CLI: the interface contract scripts rely
on, ``suanli ssh`` and adoption of running containers after ``kill -9`` of a real
``suanli server`` process; the unknown image and a job's shipped workdir (against the
same server in the test process, ``live``); and the process runtime's refusal of
strangers by a real server process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from suanli.backends.local.container_runtime import root_label
from suanli.backends.local.engine import detect
from tests.control.control_helpers import LiveServer, ServerProcess, cli_command, free_port, wait_until


def suanli(srv: ServerProcess | LiveServer, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cli_command(*args), capture_output=True, text=True, env=srv.cli_env(), timeout=120)
    if code is not None:
        assert r.returncode == code, (args, r.stdout, r.stderr)
    return r


def container_ids(data_dir: Path) -> dict[str, str]:
    engine = detect("podman")
    assert engine is not None
    done = engine.cli(
        "ps", "--filter", f"label=suanli.root={root_label((data_dir / 'workloads').resolve())}", "--format", "{{.Names}} {{.ID}}"
    )
    return dict(line.split() for line in done.stdout.decode().splitlines() if line.strip())


def test_contract_ssh_and_adoption_after_kill_9(proc: ServerProcess, keypair) -> None:  # type: ignore[no-untyped-def]
    key, _ = keypair("renter")
    suanli(proc, "keys", "add", f"{key}.pub")
    listed = json.loads(suanli(proc, "images", "list", "--json").stdout)
    default = [i["name"] for i in listed if i["default"]]
    assert default == ["python"], listed
    inst = json.loads(
        suanli(proc, "instances", "create", "--gpu", "h100:1", "--disk", "2", "--port", "8888", "--wait", "--json").stdout
    )
    assert inst["state"] == "running" and inst["image"] == "python" and inst["runtime"] == "container", inst
    assert inst["ssh"].startswith("ssh -p ") and list(inst["ports"]) == ["8888"], inst
    assert inst["ports"]["8888"] == f"http://{inst['id']}-8888.localhost:{proc.proxy_port}/"  # an origin of its own
    shown = json.loads(suanli(proc, "instances", "show", str(inst["id"]), "--json").stdout)
    assert shown["ssh"] == inst["ssh"]
    r = wait_until(
        lambda: (
            (x := suanli(proc, "ssh", str(inst["id"]), "-i", str(key), "--", "echo", "ok;", "exit", "4", code=None)).returncode
            != 255
            and x
        ),
        20,
    )
    assert r.returncode == 4 and "ok" in r.stdout, (r.stdout, r.stderr)

    before = container_ids(proc.data_dir)
    assert list(before) == [f"suanli-{root_label((proc.data_dir / 'workloads').resolve())}-instance-{inst['id']}"]
    proc.kill9()
    assert container_ids(proc.data_dir) == before  # the container outlives the server
    proc.start()
    again = json.loads(suanli(proc, "instances", "show", str(inst["id"]), "--json").stdout)
    assert again["state"] == "running" and again["ssh"] == inst["ssh"]
    assert container_ids(proc.data_dir) == before  # adopted, never started a second time
    r = suanli(proc, "instances", "exec", str(inst["id"]), "--", "cat /proc/1/cmdline | tr '\\0' ' '", code=None)
    assert r.returncode == 0 and "catatonit" in r.stdout or "podman-init" in r.stdout, r.stdout
    suanli(proc, "instances", "rm", str(inst["id"]))
    wait_until(lambda: container_ids(proc.data_dir) == {}, 30)


def test_unknown_image_is_refused_with_the_offered_list_and_creates_nothing(live: LiveServer) -> None:
    r = suanli(live, "instances", "create", "--gpu", "h100:1", "--image", "ubuntu:22.04", code=None)
    assert r.returncode != 0 and "ubuntu:22.04" in r.stdout + r.stderr and "python" in r.stdout + r.stderr, r
    assert json.loads(suanli(live, "instances", "list", "--json").stdout) == []
    task = live.data_dir / "t.yaml"
    task.write_text("image: nosuch\nrun: echo hi\n")
    r = suanli(live, "launch", str(task), code=None)
    assert r.returncode != 0 and "nosuch" in r.stdout + r.stderr
    assert json.loads(suanli(live, "jobs", "list", "--json").stdout) == []


def test_process_runtime_is_named_and_refused_to_other_tenants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUANLI_ALLOW_PROCESS_RUNTIME", raising=False)  # the suite's default; a real server has none
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "process"))
    srv.start()
    try:
        env = srv.cli_env()
        c = srv.client()
        c.request("POST", "/v1/tenants", json={"name": "strangers"})
        c.topup("strangers", "1000")  # prepaid: a new tenant rents nothing without a balance
        member = c.request("POST", "/v1/users", json={"name": "m", "tenant": "strangers"})["token"]
        mine = c.create_instance(gpu_model="h100", gpu_count=1)
        assert mine["runtime"] == "process"
        out = subprocess.run(cli_command("instances", "list"), capture_output=True, text=True, env=env).stdout
        assert "process (no isolation)" in out
        from suanli.client import ApiError, SuanliClient

        with pytest.raises(ApiError) as refused:
            SuanliClient(srv.url, member).create_instance(gpu_model="h100", gpu_count=1)
        assert refused.value.status == 403 and refused.value.code == "no_isolation"
        assert "--allow-process-runtime" in refused.value.message
        assert len(c.instances()) == 1  # nothing was created for the stranger
    finally:
        srv.close()


def test_launch_ships_the_workdir_and_the_job_runs_it_in_its_container(live: LiveServer, tmp_path: Path) -> None:
    work = tmp_path / "proj"
    work.mkdir()
    (work / "train.py").write_text("import os, sys\nprint('trained in', os.getcwd(), sys.version_info[:2])\n")
    task = tmp_path / "task.yaml"
    task.write_text("name: t\nimage: python\nworkdir: proj\nresources: {accelerators: 'H100:1'}\nrun: python3 train.py\n")
    job = json.loads(suanli(live, "launch", str(task), "--json").stdout)
    c = live.client()
    done = wait_until(lambda: (j := c.job(job["id"]))["state"] in ("succeeded", "failed") and j, 60)
    logs = c.request("GET", f"/v1/jobs/{job['id']}/logs")["text"]
    assert done["state"] == "succeeded" and done["runtime"] == "container", (done, logs)
    assert "trained in /workspace/code (3, 11)" in logs, logs
    (tmp_path / "gone.yaml").write_text("workdir: nowhere\nrun: python3 train.py\n")
    r = suanli(live, "launch", str(tmp_path / "gone.yaml"), code=None)
    assert r.returncode == 2 and "nowhere" in r.stdout + r.stderr
    assert [j["id"] for j in c.jobs()] == [job["id"]]  # nothing was created
