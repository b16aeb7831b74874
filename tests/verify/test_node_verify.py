"""Verification results per node (``control.verification``, ``/v1/nodes/{name}/verifications``):
judged on the server, kept with history, a failing node cordoned, marks in the listings."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from suanli.control.verification import thresholds_from_env
from suanli.errors import Invalid
from suanli.verify.judge import Thresholds
from tests.control.control_helpers import Server
from tests.event_helpers import events_text
from tests.verify.torch_helpers import require_torch
from tests.verify.verify_helpers import cpu_report, cuda_report


def post(server: Server, node: str, report: object, expect: int = 201, uncordon: bool = False, token: str | None = None) -> dict:
    return server.post(f"/v1/nodes/{node}/verifications", {"report": report, "uncordon": uncordon}, expect, token).json()


def node(server: Server, name: str) -> dict:
    return next(n for n in server.get("/v1/nodes") if n["name"] == name)


def test_a_node_that_delivers_passes_and_shows_its_mark_in_nodes_and_gpus(server: Server, cli: Callable[..., str]) -> None:
    row = post(server, "h100-0", cuda_report("h100_sxm5_x8.json", 8))
    assert (row["status"], row["node_state"], row["reasons"], row["gpu_count"]) == ("passed", "ready", [], 8), row
    assert row["tflops_ratio"] == round(794.5 / 989, 4) and row["memory_ratio"] > 1, row
    mark = node(server, "h100-0")["verified"]
    assert mark["status"] == "passed" and mark["tflops_ratio"] == row["tflops_ratio"], mark
    assert node(server, "h100-1")["verified"] is None
    h100 = next(g for g in server.get("/v1/gpus") if g["model"] == "H100")
    assert h100["verified"]["passed"] == 1 and h100["verified"]["tflops_ratio"] == row["tflops_ratio"], h100
    listing = " ".join(cli("nodes").split())
    assert f"verified {mark['at'][:10]} TFLOPS 80% mem 107%" in listing, listing
    assert "1/1 nodes" in " ".join(cli("gpus").split())


def test_a_node_that_is_not_what_it_is_sold_as_is_cordoned_with_the_reason_then_rerun_and_uncordoned(server: Server) -> None:
    bad = post(server, "h100-0", cuda_report("a100_sxm4_x4.json", 8))
    assert bad["status"] == "failed" and bad["node_state"] == "cordoned", bad
    assert bad["reasons"][0].startswith("verify failed: GPU 0: wrong model: sold as H100 SXM5 80GB, NVML reports"), bad
    assert "compute: 271.2 dense 16-bit TFLOPS is 27% of the 989 peak" in bad["reasons"][0], bad
    assert node(server, "h100-0")["state"] == "cordoned"
    events = server.get("/v1/events", params={"kind": "node"})
    assert [(e["from_state"], e["to_state"]) for e in events] == [("ready", "cordoned")], events_text(events)
    assert events[0]["message"].startswith("verify failed: GPU 0: wrong model"), events_text(events)

    kept = post(server, "h100-0", cuda_report("h100_sxm5_x8.json", 8))  # re-run, passes: stays cordoned without --uncordon
    assert (kept["status"], kept["node_state"]) == ("passed", "cordoned"), kept
    ready = post(server, "h100-0", cuda_report("h100_sxm5_x8.json", 8), uncordon=True)
    assert ready["node_state"] == "ready" and node(server, "h100-0")["state"] == "ready", ready
    history = server.get("/v1/nodes/h100-0/verifications")
    assert [h["status"] for h in history] == ["passed", "passed", "failed"], history
    assert all(h["report"] is None for h in history)
    full = server.get("/v1/nodes/h100-0/verifications", params={"full": "true", "limit": 1})
    assert len(full) == 1 and full[0]["report"]["judged"]["model"] == "H100", full


def test_a_vgpu_fewer_gpus_and_a_short_memory_test_each_fail(server: Server) -> None:
    vgpu = post(server, "rtx4090-0", cuda_report("vgpu_v100d_8c.json", 4))
    assert vgpu["status"] == "failed" and "virtual GPU" in vgpu["reasons"][0], vgpu
    short = post(server, "a100-0", cuda_report("a100_sxm4_x4.json", 7))
    assert short["reasons"] == ["the check saw 7 GPUs, the node is registered with 8"], short
    mem = post(server, "h100-1", cuda_report("h100_sxm5_x8.json", 8, memory_ok=False))
    assert "memory test failed" in mem["reasons"][0] and mem["node_state"] == "cordoned", mem


def test_a_report_from_the_cpu_path_is_kept_as_unmeasured_and_cordons_nothing(server: Server) -> None:
    row = post(server, "rtx4090-1", cpu_report())
    assert (row["status"], row["node_state"], row["device"]) == ("unmeasured", "ready", "cpu"), row
    assert node(server, "rtx4090-1")["verified"]["status"] == "unmeasured"


def _with_gpu_field(path: tuple[str, ...], value: float) -> dict:
    """A good one-GPU report with one of its first GPU's numbers replaced."""
    report = cuda_report("h100_sxm5_x8.json", 1)
    *parents, key = path
    entry = report["gpus"][0]
    for name in parents:
        entry = entry[name]
    entry[key] = value
    return report


NAN_MEMORY = _with_gpu_field(("memory_total_mib",), float("nan"))
INFINITE_TFLOPS = _with_gpu_field(("tflops", "bf16"), float("inf"))

BAD_REPORTS = [
    ([], "report: Input should be a valid dictionary"),
    ({"device": "tpu", "gpus": []}, "report.device: expected 'cuda' or 'cpu', got 'tpu'"),
    ({"device": "cuda", "gpus": []}, "report.gpus: a cuda report lists its GPUs"),
    (
        {"device": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]},
        "report.gpus[0].memory_total_mib: expected a finite number",
    ),
    # NaN would pass every threshold comparison, so a node would verify on it
    (NAN_MEMORY, "report.gpus[0].memory_total_mib: expected a finite number >= 0, got nan"),
    (INFINITE_TFLOPS, "report.gpus[0].tflops.bf16: expected a finite number >= 0, got inf"),
]


def test_a_bad_report_is_refused_and_changes_nothing(server: Server) -> None:
    for report, message in BAD_REPORTS:
        body = json.dumps({"report": report})  # json.dumps writes NaN and Infinity, as some clients do
        headers = {**server.headers, "content-type": "application/json"}
        r = server.http.post("/v1/nodes/h100-0/verifications", content=body, headers=headers)
        assert r.status_code == 422 and message in r.text, (report, r.text)
    assert server.get("/v1/nodes/h100-0/verifications") == [] and node(server, "h100-0")["state"] == "ready"


def test_only_operators_record_and_an_unknown_node_is_not_found(server: Server) -> None:
    member = server.post("/v1/users", {"name": "bob", "role": "member"}, expect=201).json()["token"]
    r = server.post("/v1/nodes/h100-0/verifications", {"report": cpu_report()}, token=member)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
    assert server.post("/v1/nodes/nope/verifications", {"report": cpu_report()}).status_code == 404
    assert server.http.get("/v1/nodes/nope/verifications", headers=server.headers).status_code == 404


def test_nodes_verify_records_a_report_file_and_measures_here_without_a_gpu(
    server: Server, cli: Callable[..., str], tmp_path: Path
) -> None:
    f = tmp_path / "report.json"
    f.write_text(json.dumps(cuda_report("a100_sxm4_x4.json", 8)))
    out = cli("nodes", "verify", "a100-0", "--report", str(f))
    assert "a100-0: verified 2026-" in out and "(node ready)" in out, out
    f.write_text("{not json")
    assert "is not a `suanli verify --json` report" in cli("nodes", "verify", "a100-0", "--report", str(f), code=1)
    require_torch()
    out = cli("nodes", "verify", "rtx4090-0", "--here", "--quick")
    assert "rtx4090-0: unmeasured" in out and "(node ready)" in out, out
    history = " ".join(cli("nodes", "verifications", "a100-0").split())
    assert "verified" in history and "cuda" in history, history


def test_thresholds_come_from_the_environment_and_a_bad_one_is_an_error() -> None:
    assert thresholds_from_env({}) == Thresholds()
    t = thresholds_from_env({"SUANLI_VERIFY_MIN_TFLOPS_RATIO": "0.7", "SUANLI_VERIFY_ALLOW_VGPU": "yes"})
    assert (t.min_tflops_ratio, t.allow_vgpu, t.min_memory_ratio) == (0.7, True, 0.9), t
    with pytest.raises(Invalid, match="min_memory_ratio must be a fraction"):
        thresholds_from_env({"SUANLI_VERIFY_MIN_MEMORY_RATIO": "90"})
