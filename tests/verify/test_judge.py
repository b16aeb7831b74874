"""The verdict on one GPU (``suanli.verify.judge``): pure, no torch, no NVML."""

from __future__ import annotations

import pytest

from suanli.verify.datasheet import catalog_model, datasheet
from suanli.verify.judge import Measured, ThresholdError, Thresholds, judge, node_reason

H100 = datasheet("H100")
MIB_80G = 81559  # what NVML reports for an H100 80GB HBM3 (recordings/h100_sxm5_x8.json)


def measured(**changes: object) -> Measured:
    """An H100 SXM that delivers: [MLE]'s published 794.5 BF16 TFLOPS (microbench_refs.md),
    its NVML memory total verified, 2,900 GB/s copy."""
    base: dict = dict(
        nvml_model="H100 SXM5 80GB",
        nvml_name="NVIDIA H100 80GB HBM3",
        memory_total_mib=MIB_80G,
        virtualization="none",
        mig_mode="disabled",
        memory_test_ok=True,
        memory_verified_bytes=MIB_80G * 2**20,
        tflops={"bf16": 794.5, "fp16": 780.0, "fp8": 1402.6},
        bandwidth_gbs=2900.0,
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
    )
    base.update(changes)
    return Measured(**base)


def test_a_gpu_that_delivers_its_datasheet_passes_with_its_ratios() -> None:
    assert H100 is not None
    v = judge("H100 SXM5 80GB", H100, measured())
    assert v.ok and not v.reasons, v
    assert v.tflops_ratio == pytest.approx(794.5 / 989, abs=1e-4), v
    assert v.tflops_ratios["fp8"] == pytest.approx(1402.6 / 1979, abs=1e-4), v
    assert v.memory_ratio == pytest.approx(MIB_80G * 2**20 / 80e9, abs=1e-4), v
    assert v.bandwidth_ratio == pytest.approx(2900 / 3350, abs=1e-4), v


def test_a_different_model_than_the_node_is_sold_as_fails() -> None:
    a100 = datasheet("A100")
    v = judge("A100 80GB SXM4", a100, measured(nvml_model="A10", nvml_name="NVIDIA A10", tflops={"bf16": 110.0}))
    assert not v.ok and any(r.startswith("wrong model: sold as A100 80GB SXM4") for r in v.reasons), v.reasons


def test_an_unknown_nvml_name_is_a_wrong_model_too() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(nvml_model=None, nvml_name="GRID V100D-8C"))
    assert not v.ok and "a model the catalog lacks" in v.reasons[0], v.reasons


def test_a_vgpu_fails_unless_allowed_and_passthrough_is_fine() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(virtualization="vgpu"))
    assert not v.ok and any("virtual GPU" in r for r in v.reasons), v.reasons
    assert judge("H100 SXM5 80GB", H100, measured(virtualization="vgpu"), Thresholds(allow_vgpu=True)).ok
    v = judge("H100 SXM5 80GB", H100, measured(virtualization="passthrough"))
    assert v.ok and not v.notes, v


def test_memory_below_ninety_percent_of_the_datasheet_fails() -> None:
    small = 70e9  # an "80 GB" card with 70 GB usable
    v = judge("H100 SXM5 80GB", H100, measured(memory_total_mib=small / 2**20, memory_verified_bytes=small))
    assert not v.ok and any(r.startswith("memory: 70.0 GB usable is 88%") for r in v.reasons), v.reasons
    assert judge("H100 SXM5 80GB", H100, measured(memory_verified_bytes=small), Thresholds(min_memory_ratio=0.85)).ok


def test_a_failed_memory_test_fails_whatever_nvml_says() -> None:
    """A hook that fakes the memory total: NVML says 80 GB, the allocation stops at 20 GB."""
    v = judge("H100 SXM5 80GB", H100, measured(memory_test_ok=False, memory_verified_bytes=20e9))
    assert not v.ok, v
    assert any(r.startswith("memory test failed: 19,073 MiB verified of 81,559 MiB") for r in v.reasons), v.reasons
    assert any(r.startswith("memory: 20.0 GB usable is 25%") for r in v.reasons), v.reasons


def test_nvml_and_cuda_disagreeing_on_the_memory_total_fails() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(cuda_memory_total_mib=40_960.0))
    assert v.reasons == ["memory total differs: NVML reports 81,559 MiB, CUDA 40,960 MiB (one of them is not telling the truth)"]
    assert judge("H100 SXM5 80GB", H100, measured(cuda_memory_total_mib=81_559.0)).ok


def test_compute_below_half_of_the_dense_peak_fails_and_the_threshold_is_configurable() -> None:
    slow = measured(tflops={"bf16": 400.0, "fp16": 390.0})  # 40 % of 989
    v = judge("H100 SXM5 80GB", H100, slow)
    assert not v.ok and v.reasons == ["compute: 400.0 dense 16-bit TFLOPS is 40% of the 989 peak, below 50%"], v.reasons
    assert judge("H100 SXM5 80GB", H100, slow, Thresholds(min_tflops_ratio=0.4)).ok


def test_no_sixteen_bit_measurement_is_a_failure_not_a_pass() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(tflops={}))
    assert v.reasons == ["compute: no 16-bit matmul was measured"] and v.tflops_ratio is None, v


def test_several_failures_give_several_reasons_and_one_node_line() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(virtualization="vgpu", tflops={"bf16": 100.0}))
    assert len(v.reasons) == 2, v.reasons
    line = node_reason({0: v.reasons, 1: []})
    assert line.startswith("verify failed: GPU 0: virtual GPU") and "GPU 1" not in line, line
    assert node_reason({0: []}) == ""


def test_links_mig_and_slow_bandwidth_are_notes_not_failures() -> None:
    v = judge("H100 SXM5 80GB", H100, measured(pcie_gen=3, pcie_width=8, mig_mode="enabled", bandwidth_gbs=1000.0))
    assert v.ok, v.reasons
    assert len(v.notes) == 4 and any("x8" in n for n in v.notes) and any("MIG" in n for n in v.notes), v.notes


def test_a_model_the_catalog_lacks_is_noted_and_judged_on_what_can_be() -> None:
    v = judge(None, None, measured(nvml_model=None, nvml_name="NVIDIA Future GPU", virtualization="vgpu"))
    assert v.tflops_ratio is None and v.memory_ratio is None, v
    assert v.reasons == [v.reasons[0]] and "virtual GPU" in v.reasons[0] and "not in the catalog" in v.notes[0], v


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "0.9"])
def test_thresholds_outside_zero_to_one_are_refused(bad: object) -> None:
    with pytest.raises(ThresholdError, match="min_tflops_ratio must be a fraction in"):
        Thresholds(min_tflops_ratio=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nvml", "row"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM4"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM4"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA H200", "H200 SXM 141GB"),
        ("NVIDIA L40S", "L40S"),
        ("GRID V100D-8C", None),
        ("NVIDIA", None),
    ],
)
def test_nvml_product_names_map_to_catalog_rows(nvml: str, row: str | None) -> None:
    assert catalog_model(nvml) == row


def test_the_datasheet_comes_from_the_catalog_csv() -> None:
    a100 = datasheet("a100-80g")
    assert a100 is not None and (a100.model, a100.memory_gb, a100.bandwidth_gbs, a100.tflops_16bit) == (
        "A100 80GB SXM4",
        80.0,
        2039.0,
        312.0,
    )
    assert a100.tflops_fp8 is None and datasheet("no such gpu") is None
