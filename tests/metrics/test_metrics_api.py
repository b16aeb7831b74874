"""Metrics where users see them: the instance and job JSON (``metrics``, ``cost_so_far``),
the history endpoint, ``suanli instances show`` / ``jobs show``, and ``/metrics`` for
Prometheus with DCGM-exporter's names for GPUs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from suanli.db.models import WorkloadMetric
from tests.control.control_helpers import Server, start_server, wait_state
from tests.metrics.recorded import FakeH100Nvml
from tests.sqlite_helpers import migrated_sqlite_url


@pytest.fixture
def psrv(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "data").mkdir()
    srv = start_server(tmp_path / "data", migrated_sqlite_url(tmp_path / "data" / "suanli.db"), runtime="process")
    try:
        yield srv
    finally:
        srv.close()


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of one metric in a ``/metrics`` answer, parsed by prometheus-client."""
    return [
        (dict(smp.labels), smp.value) for fam in text_string_to_metric_families(text) for smp in fam.samples if smp.name == name
    ]


def _cli(srv: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> str:
    from suanli.cli import app, remote

    monkeypatch.setattr(remote, "client_factory", lambda: srv.client())
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "config.json"))
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def test_instance_json_cli_history_and_prometheus_show_the_latest_sample(
    psrv: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    r = psrv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1, "disk_gib": 1}, expect=201).json()
    assert r["metrics"]["cpu_percent"] is None and "cost_so_far" in r, r  # no sample yet: nulls, never invented
    inst = wait_state(psrv, "instance", r["id"], ("running",), 30)
    assert psrv.ctx.metrics is not None
    psrv.ctx.metrics.collect_once()
    shown = json.loads(_cli(psrv, monkeypatch, tmp_path, "instances", "show", str(inst["id"]), "--json"))
    m = shown["metrics"]
    assert isinstance(m["cpu_percent"], float) and m["memory_mib"] > 0, m
    assert m["gpu_util_percent"] is None and m["gpu_note"] == "not measured: virtual GPU", m
    assert isinstance(shown["cost_so_far"], float) and shown["cost_so_far"] == shown["cost"]["so_far"], shown
    text = _cli(psrv, monkeypatch, tmp_path, "instances", "show", str(inst["id"]))
    assert "usage: CPU" in text and "GPU not measured: virtual GPU" in text, text
    hist = psrv.get(f"/v1/instances/{inst['id']}/metrics", params={"since": time.time() - 60})
    assert len(hist) == 1 and hist[0]["resolution_s"] == 0, hist
    table = _cli(psrv, monkeypatch, tmp_path, "instances", "metrics", str(inst["id"]), "--since", "10m")
    assert "sample" in table and "not measured" in table, table
    assert json.loads(_cli(psrv, monkeypatch, tmp_path, "instances", "metrics", str(inst["id"]), "--json")) == hist
    assert psrv.http.get(f"/v1/instances/{inst['id']}/metrics", params={"since": -1}, headers=psrv.headers).status_code == 422
    assert psrv.http.get("/v1/instances/999/metrics", headers=psrv.headers).status_code == 404
    prom = psrv.http.get("/metrics", headers=psrv.headers).text
    labels = {"workload_kind": "instance", "workload_id": str(inst["id"]), "tenant": "default"}
    assert [lab for lab, _ in series(prom, "suanli_workload_cpu_percent")] == [labels], prom[-3000:]
    assert series(prom, "suanli_workload_gpu_not_measured") == [({**labels, "reason": "not measured: virtual GPU"}, 1.0)]
    assert series(prom, "DCGM_FI_DEV_GPU_UTIL") == []  # a virtual GPU has no DCGM series


def test_a_real_gpu_sample_is_exported_under_dcgm_names(psrv: Server) -> None:
    """A sample as the collector stores it from NVML (figures of ``FakeH100Nvml``, the FAKE
    physical GPU), for a running instance."""
    r = psrv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1, "disk_gib": 1}, expect=201).json()
    inst = wait_state(psrv, "instance", r["id"], ("running",), 30)
    gpu = {
        "node": "node-a",
        "index": 0,
        "uuid": FakeH100Nvml.UUID.decode(),
        "model": FakeH100Nvml.NAME.decode(),
        "util_percent": 87.0,
        "memory_used_mib": 40960.0,
        "power_w": 352.817,
        "scope": "device",
    }
    with psrv.ctx.db.transaction() as s:
        s.add(
            WorkloadMetric(
                kind="instance",
                workload_id=inst["id"],
                tenant_id=1,
                ts=time.time(),
                cpu_percent=3.0,
                memory_mib=512.0,
                gpu_util_percent=87.0,
                gpu_memory_mib=40960.0,
                power_w=352.817,
                gpus=[gpu],
            )
        )
    prom = psrv.http.get("/metrics", headers=psrv.headers).text
    labels = {
        "gpu": "0",
        "UUID": gpu["uuid"],
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-a",
        "workload_kind": "instance",
        "workload_id": str(inst["id"]),
        "tenant": "default",
    }
    dcgm = [line for line in prom.splitlines() if "DCGM" in line]
    assert series(prom, "DCGM_FI_DEV_GPU_UTIL") == [(labels, 87.0)], dcgm
    assert series(prom, "DCGM_FI_DEV_FB_USED") == [(labels, 40960.0)], dcgm
    assert series(prom, "DCGM_FI_DEV_POWER_USAGE") == [(labels, 352.817)], dcgm
    got = psrv.get(f"/v1/instances/{inst['id']}")["metrics"]
    assert (got["gpu_util_percent"], got["gpu_memory_mib"], got["power_w"]) == (87.0, 40960.0, 352.817), got


def test_job_json_and_jobs_show_carry_its_usage(psrv: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    job = psrv.post("/v1/jobs", {"resources": {"accelerators": "RTX4090:1"}, "run": "sleep 60"}, expect=201).json()
    wait_state(psrv, "job", job["id"], ("running",), 30)
    assert psrv.ctx.metrics is not None
    psrv.ctx.metrics.collect_once()
    shown = json.loads(_cli(psrv, monkeypatch, tmp_path, "jobs", "show", str(job["id"]), "--json"))
    assert shown["metrics"]["memory_mib"] > 0 and shown["metrics"]["gpu_util_percent"] is None, shown["metrics"]
    assert "cost_so_far" in shown, shown
    text = _cli(psrv, monkeypatch, tmp_path, "jobs", "show", str(job["id"]))
    assert "usage: CPU" in text, text
    hist = psrv.get(f"/v1/jobs/{job['id']}/metrics")
    assert len(hist) == 1, hist
    assert json.loads(_cli(psrv, monkeypatch, tmp_path, "jobs", "metrics", str(job["id"]), "--json")) == hist
    psrv.post(f"/v1/jobs/{job['id']}/cancel", expect=200)
