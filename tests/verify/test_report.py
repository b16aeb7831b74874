"""One GPU's entry in the report (``suanli.verify.run.gpu_entry``): identity from a recording,
numbers standing in for the GPU's measurements, the verdict against the catalog.

The measured figures are published ones ([MLE]'s H100 SXM BF16 matmul, 794.5 TFLOPS,
shared/reference/microbench_refs.md), not measured here: no GPU was lent to this
session. They stand in for the physical GPU only.
"""

from __future__ import annotations

from pathlib import Path

from suanli.verify.identity import RecordedNvml, read_identity
from suanli.verify.judge import Thresholds
from suanli.verify.measure import MemoryTest
from suanli.verify.run import Options, gpu_entry
from tests.verify.test_cli_verify import GPU_KEYS

RECORDINGS = Path(__file__).parent / "recordings"


def measured(ok: bool = True, verified: int = 77_481 * 2**20, bf16: float = 794.5) -> dict:
    mem = MemoryTest(ok, 77_481 * 2**20, verified, verified, 12.0, None if ok else "out of memory")
    return {"memory": mem, "tflops": {"bf16": bf16}, "bandwidth_gbs": 2900.0, "h2d": 55.0, "d2h": 55.0, "p2p": {}, "errors": {}}


def test_an_h100_entry_carries_the_contract_keys_identity_and_ratios() -> None:
    node = read_identity(RecordedNvml.load(RECORDINGS / "h100_sxm5_x8.json"), source="recording")
    g = gpu_entry(node.gpus[0], node, measured(), Options(expect="H100 SXM5 80GB"))
    assert GPU_KEYS <= set(g), sorted(g)
    assert (g["name"], g["virtualization"], g["memory_total_mib"], g["memory_test_ok"]) == (
        "NVIDIA H100 80GB HBM3",
        "none",
        81559.0,
        True,
    ), g
    assert g["ok"] and g["reasons"] == [] and g["catalog"]["model"] == "H100 SXM5 80GB", g
    assert g["tflops_ratio"] == round(794.5 / 989, 4) and g["bandwidth_gbs"] == 2900.0, g
    assert (g["driver_version"], g["cuda_version"], g["identity_source"]) == ("565.57.01", "12.7", "recording"), g


def test_an_a100_sold_as_h100_and_a_short_memory_test_fail_with_reasons() -> None:
    node = read_identity(RecordedNvml.load(RECORDINGS / "a100_sxm4_x4.json"))
    g = gpu_entry(node.gpus[0], node, measured(ok=False, verified=20 * 2**30, bf16=271.2), Options(expect="H100 SXM5 80GB"))
    assert not g["ok"], g
    text = " | ".join(g["reasons"])
    assert "wrong model: sold as H100 SXM5 80GB, NVML reports 'NVIDIA A100-SXM4-80GB'" in text, text
    assert "memory test failed" in text and "compute: 271.2 dense 16-bit TFLOPS is 27%" in text, text


def test_a_vgpu_slice_sold_as_a_v100_fails_as_virtual_wrong_model_and_small() -> None:
    node = read_identity(RecordedNvml.load(RECORDINGS / "vgpu_v100d_8c.json"))
    mem = MemoryTest(True, int(8192 * 2**20 * 0.95), 8192 * 2**20, 8192 * 2**20, 1.0)
    g = gpu_entry(node.gpus[0], node, {**measured(), "memory": mem, "tflops": {"fp16": 100.0}}, Options(expect="V100 PCIe 32GB"))
    assert g["virtualization"] == "vgpu" and not g["ok"], g
    assert [r.split(":")[0] for r in g["reasons"]] == ["wrong model", "virtual GPU", "memory"], g["reasons"]
    relaxed = Options(expect="V100 PCIe 32GB", thresholds=Thresholds(allow_vgpu=True))
    assert "virtual GPU" not in " ".join(gpu_entry(node.gpus[0], node, {**measured(), "memory": mem}, relaxed)["reasons"])


def test_measure_device_feeds_gpu_entry_the_same_way_on_cpu() -> None:
    """The seam between measuring and reporting, with real numbers: ``measure_device`` on
    CPU tensors (standing in for the GPU) under a recorded H100's identity. The CPU's
    figures are of course far below an H100's, so the verdict says so."""
    from tests.verify.torch_helpers import require_torch

    torch = require_torch()
    from suanli.verify.run import measure_device

    node = read_identity(RecordedNvml.load(RECORDINGS / "h100_sxm5_x8.json"))
    m = measure_device(torch, torch.device("cpu"), 8 * 2**20, Options(quick=True), lambda s: None)
    assert m["memory"].ok and set(m["tflops"]) == {"fp32", "bf16"} and m["bandwidth_gbs"] > 0, m
    assert (m["h2d"], m["d2h"], m["p2p"], m["cuda_memory_total_mib"], m["errors"]) == (None, None, {}, None, {}), m
    g = gpu_entry(node.gpus[0], node, m, Options(expect="H100 SXM5 80GB"))
    assert GPU_KEYS <= set(g) and g["tflops"]["bf16"] == m["tflops"]["bf16"], g
    assert not g["ok"] and any(r.startswith("compute: ") for r in g["reasons"]), g["reasons"]


def test_nvml_gpus_are_matched_to_cuda_devices_by_uuid() -> None:
    """CUDA_VISIBLE_DEVICES=1 (or a container with one GPU): CUDA's device 0 is NVML's GPU 1."""
    from suanli.verify.run import match_cuda_devices

    nvml = read_identity(RecordedNvml.load(RECORDINGS / "h100_sxm5_x8.json")).gpus
    both = match_cuda_devices(nvml, [g.uuid for g in nvml])
    assert [g.uuid for g in both[0]] == [g.uuid for g in nvml] and both[1] is None, both
    one, note = match_cuda_devices(nvml, [nvml[1].uuid])
    assert [(g.index, g.uuid) for g in one] == [(0, nvml[1].uuid)], one
    assert note == "NVML lists 2 GPUs, CUDA sees 1: measured the 1 both see", note
    unknown, _ = match_cuda_devices(nvml, [None, "GPU-not-in-nvml"])
    assert [(g.index, g.uuid) for g in unknown] == [(0, nvml[0].uuid)], unknown
