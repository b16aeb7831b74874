"""A Suanli server configured for Slurm (``suanli server --backend slurm``), and
``suanli nodes add --backend slurm``, against the real daemons."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from suanli.api.app import create_app
from suanli.api.server import build
from suanli.backends.slurm import SlurmBackend, SlurmClient
from suanli.cli import app, remote
from suanli.client import SuanliClient
from tests.slurm.slurm_helpers import wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture
def server(slurm: SlurmClient, tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], SlurmBackend]]:
    tmp_path.chmod(0o777)
    ctx, boot = build(tmp_path / "data", None, slurm_conf=slurm.slurm_conf, notice_s=3, interval_s=0.1, stop_grace_s=2)
    backend = ctx.backends["slurm"]
    assert isinstance(backend, SlurmBackend)
    http = TestClient(create_app(ctx))
    try:
        yield http, {"Authorization": f"Bearer {boot.admin_token}"}, backend
    finally:
        assert ctx.loop is not None
        ctx.loop.stop()
        for h in backend.list_running():
            backend.stop(h, grace_s=0)
        http.close()
        ctx.db.dispose()


def test_server_with_slurm_registers_the_cluster_and_runs_jobs_there(
    slurm: SlurmClient, server: tuple[TestClient, dict[str, str], SlurmBackend]
) -> None:
    http, auth, backend = server
    nodes = http.get("/v1/nodes", headers=auth).json()
    assert sorted(n["name"] for n in nodes) == sorted(n.name for n in slurm.nodes())
    assert {n["backend"] for n in nodes} == {"slurm"} and not any(n["virtual"] for n in nodes)
    task = {"name": "hello", "resources": {"accelerators": "A100:2"}, "run": 'echo "cvd=$CUDA_VISIBLE_DEVICES"; sleep 1'}
    r = http.post("/v1/jobs", json=task, headers=auth)
    assert r.status_code in (200, 201), r.text
    job_id = r.json()["id"]
    done = wait_until(
        lambda: (j := http.get(f"/v1/jobs/{job_id}", headers=auth).json())["state"] in ("succeeded", "failed") and j,
        60,
        "job done",
    )
    assert done["state"] == "succeeded", done
    logs = http.get(f"/v1/jobs/{job_id}/logs", headers=auth).json()
    text = logs["text"] if isinstance(logs, dict) else str(logs)
    cvd = text.split("cvd=")[1].split()[0]
    assert len(cvd.split(",")) == 2
    events = http.get("/v1/events", headers=auth).json()
    assert any(e["kind"] == "job" and e["object_id"] == job_id and e["to_state"] == "running" for e in events)
    assert backend.tag_prefix.startswith("suanli-")  # one prefix per data dir: servers never sweep each other's jobs


def test_cli_nodes_add_backend_slurm(slurm: SlurmClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, boot = build(tmp_path / "data", None, start_loop=False)  # demo inventory, local only
    http = TestClient(create_app(ctx))
    monkeypatch.setattr(remote, "client_factory", lambda: SuanliClient("http://testserver", boot.admin_token, http=http))
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "config.json"))
    runner = CliRunner()
    try:
        out = runner.invoke(app, ["nodes", "add", "--backend", "slurm", "--slurm-conf", str(slurm.slurm_conf), "--json"])
        assert out.exit_code == 0, out.output
        added = json.loads(out.output)
        assert sorted(n["name"] for n in added) == sorted(n.name for n in slurm.nodes())
        assert {n["backend"] for n in added} == {"slurm"}
        again = runner.invoke(app, ["nodes", "add", "--backend", "slurm", "--slurm-conf", str(slurm.slurm_conf)])
        assert again.exit_code == 1 and "already registered" in again.output
        bad = runner.invoke(app, ["nodes", "add"])
        assert bad.exit_code == 2 and "--backend slurm" in bad.output
        bad = runner.invoke(
            app, ["server", "--backend", "slurm", "--slurm-conf", str(tmp_path / "nope.conf")], env={"COLUMNS": "400"}
        )  # Rich wraps the error box at the terminal's width
        assert bad.exit_code == 2 and "nope.conf" in bad.output
    finally:
        http.close()
        ctx.db.dispose()
