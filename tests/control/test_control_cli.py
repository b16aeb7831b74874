"""The CLI in-process against the real app (its httpx client bound to the ASGI
app through FastAPI's TestClient), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from suanli.cli import app
from suanli.control.launcher import job_volume
from tests.control.control_helpers import Server, wait_until

runner = CliRunner()


def test_gpus_and_nodes_json(cli) -> None:  # type: ignore[no-untyped-def]
    gpus = json.loads(cli("gpus", "--json"))
    h100 = next(g for g in gpus if g["model"] == "H100")
    assert {"model", "total", "free", "virtual"} <= set(h100) and h100["total"] == 16 and h100["virtual"] is True
    assert "virtual" in cli("gpus")
    nodes = json.loads(cli("nodes", "--json"))
    assert len(nodes) == 6
    assert "rtx4090-0" in cli("nodes", "list")


def test_nodes_add_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "nodes:\n  - {name: mi300x-0, gpu_model: MI300X, gpu_count: 8, gpu_memory_gib: 192, cpu_cores: 128, memory_gib: 2048}\n"
    )
    added = json.loads(cli("nodes", "add", str(inv), "--json"))
    assert added[0]["name"] == "mi300x-0"
    out = cli("nodes", "add", str(inv), code=1)
    assert "exists" in out
    gpus = {g["model"]: g for g in json.loads(cli("gpus", "--json"))}
    assert gpus["MI300X"]["total"] == 8


def test_instances_commands(cli) -> None:  # type: ignore[no-untyped-def]
    inst = json.loads(cli("instances", "create", "--gpu", "rtx4090:1", "--disk", "10", "--wait", "--json"))
    assert inst["state"] == "running"
    iid = str(inst["id"])
    listed = json.loads(cli("instances", "list", "--json"))
    assert [i["id"] for i in listed] == [inst["id"]]
    assert cli("instances", "exec", iid, "echo", "hello") == "hello\n"
    cli("instances", "exec", iid, "exit 4", code=4)
    assert "ready on" in cli("instances", "logs", iid)
    assert json.loads(cli("instances", "stop", iid, "--json"))["state"] == "stopped"
    assert json.loads(cli("instances", "start", iid, "--wait", "--json"))["state"] == "running"
    cli("instances", "rm", iid)
    wait_until(lambda: json.loads(cli("instances", "list", "--json")) == [])
    assert "invalid" in cli("instances", "create", "--gpu", "nope:1", code=1)


def test_launch_jobs_list_logs_cancel(cli, server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = tmp_path / "task.yaml"
    task.write_text(
        "name: hello\nresources:\n  accelerators: h100:1\nworkdir: .\nrun: echo hello from node $NODE_RANK > out.txt; cat out.txt\n"
    )
    job = json.loads(cli("launch", str(task), "--json"))
    assert {"id", "state"} <= set(job) and job["state"] == "queued"
    wait_until(lambda: json.loads(cli("jobs", "list", "--json"))[0]["state"] == "succeeded")
    [listed] = json.loads(cli("jobs", "list", "--json"))
    assert listed["exit_code"] == 0 and listed["id"] == job["id"]
    assert cli("jobs", "logs", str(job["id"])) == "hello from node 0\n"
    # it ran in its own copy of the uploaded workdir, in the job's volume; the renter's directory is untouched
    assert (job_volume(server.data_dir, job["id"]) / "code" / "out.txt").read_text() == "hello from node 0\n"
    assert not (tmp_path / "out.txt").exists()

    sleeper = tmp_path / "sleep.yaml"
    sleeper.write_text("resources: {accelerators: 'H100:1'}\nrun: sleep 300\n")
    job = json.loads(cli("launch", str(sleeper), "--json"))
    wait_until(lambda: json.loads(cli("jobs", "show", str(job["id"]), "--json"))["state"] == "running")
    assert json.loads(cli("jobs", "cancel", str(job["id"]), "--json"))["state"] == "cancelled"

    waited = tmp_path / "fail.yaml"
    waited.write_text("run: echo bye; exit 5\n")
    out = cli("launch", str(waited), "--wait", code=5)
    assert "bye" in out


def test_launch_invalid_task_names_field(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  accelerators: H100:many\nrun: echo ok\n")
    assert "resources.accelerators" in cli("launch", str(bad), code=1)
    bad.write_text("resources:\n  acelerators: H100:1\nrun: echo ok\n")
    assert "resources.acelerators" in cli("launch", str(bad), code=1)
    bad.write_text("resources:\n  accelerators: X9:1\nrun: echo ok\n")
    assert "unknown GPU model 'X9'" in cli("launch", str(bad), code=1)
    assert json.loads(cli("jobs", "list", "--json")) == []


def test_login_saves_config_and_env_overrides(server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from suanli import client as client_mod

    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "cfg" / "config.json"))
    monkeypatch.delenv("SUANLI_URL", raising=False)
    monkeypatch.delenv("SUANLI_TOKEN", raising=False)
    real_init = client_mod.SuanliClient.__init__

    def bound(self, url="http://testserver", token=None, http=None, timeout=60.0):  # type: ignore[no-untyped-def]
        real_init(self, url, token, http=server.http)

    monkeypatch.setattr(client_mod.SuanliClient, "__init__", bound)
    result = runner.invoke(app, ["login", "--url", "http://testserver", "--token", server.token])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "cfg" / "config.json").read_text())
    assert saved == {"url": "http://testserver", "token": server.token}
    assert (tmp_path / "cfg" / "config.json").stat().st_mode & 0o777 == 0o600
    assert client_mod.load_settings().token == server.token
    monkeypatch.setenv("SUANLI_TOKEN", "sl_other")
    monkeypatch.setenv("SUANLI_URL", "http://elsewhere:1")
    s = client_mod.load_settings()
    assert (s.url, s.token) == ("http://elsewhere:1", "sl_other")
    bad = runner.invoke(app, ["login", "--url", "http://testserver", "--token", "sl_wrong"])
    assert bad.exit_code == 1 and "unauthorized" in bad.output


def test_cli_and_server_agree_on_the_default_port() -> None:
    from suanli.api.server import DEFAULT_PORT
    from suanli.cli.server import DEFAULT_PORT as CLI_PORT
    from suanli.client import DEFAULT_URL

    assert CLI_PORT == DEFAULT_PORT and DEFAULT_URL.endswith(f":{DEFAULT_PORT}")
