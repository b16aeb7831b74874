"""The verdict on one GPU: does it deliver what the catalog row it is sold as promises?

Pure: the inputs are plain values (the catalog's figures, NVML's identity, the measured
numbers), the output a ``Verdict`` with one sentence per failure. A GPU fails when

- NVML names another model than the node is registered as (an "A100" that is an A10),
- it is a virtual GPU (NVML's virtualization mode ``vgpu``: a time-sliced slice of a
  card, not the card),
- its usable memory (allocated and pattern-checked) is below ``min_memory_ratio`` of
  the datasheet's (default 90 %), or the memory test failed,
- its best dense 16-bit matmul is below ``min_tflops_ratio`` of the dense peak
  (default 50 %; well-tuned GEMMs reach 80-87 % on A100/H100,
  ``shared/reference/microbench_refs.md``).

Bandwidth, PCIe link and MIG mode are reported as notes, not failures: a node is sold
by model, memory and compute, and a PCIe link trained at a lower width is worth
telling the operator without cordoning the node.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


class ThresholdError(ValueError):
    """A threshold outside (0, 1]."""


@dataclass(frozen=True)
class Thresholds:
    min_memory_ratio: float = 0.90
    min_tflops_ratio: float = 0.50
    allow_vgpu: bool = False

    def __post_init__(self) -> None:
        for name in ("min_memory_ratio", "min_tflops_ratio"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value <= 1):
                raise ThresholdError(f"{name} must be a fraction in (0, 1], got {value!r}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Datasheet:
    """A catalog row's promises (dense peaks, decimal GB and GB/s, as the datasheets state them)."""

    model: str
    memory_gb: float
    bandwidth_gbs: float
    tflops_16bit: float  # dense BF16 (FP16 where the part has no BF16)
    tflops_fp8: float | None
    interconnect: str = ""


@dataclass(frozen=True)
class Measured:
    """What one GPU said and did: identity from NVML, numbers from the kernels."""

    nvml_model: str | None  # the catalog row NVML's product name means; None: not in the catalog
    nvml_name: str
    memory_total_mib: float
    virtualization: str  # none | passthrough | vgpu | host_vgpu | host_vsga | unknown
    mig_mode: str | None  # enabled | disabled | None (not supported)
    memory_test_ok: bool
    memory_verified_bytes: float  # allocated, written and read back intact
    tflops: dict[str, float] = field(default_factory=dict)  # dtype -> measured dense TFLOPS
    bandwidth_gbs: float | None = None  # device memory copy (read + write bytes per second)
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    cuda_memory_total_mib: float | None = None  # what the CUDA runtime reports (cudaMemGetInfo); None: not asked


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: list[str]  # why it failed, one sentence each; empty when ok
    notes: list[str]  # worth knowing, not a failure
    memory_ratio: float | None
    tflops_ratio: float | None
    tflops_ratios: dict[str, float]
    bandwidth_ratio: float | None

    def as_dict(self) -> dict:
        return asdict(self)


SIXTEEN_BIT = ("bf16", "fp16")


def ratio(measured: float | None, promised: float | None) -> float | None:
    if measured is None or not promised:
        return None
    return round(measured / promised, 4)


def judge(registered_as: str | None, sheet: Datasheet | None, m: Measured, limits: Thresholds = Thresholds()) -> Verdict:
    """The verdict on one GPU registered as ``registered_as`` (catalog row ``sheet``)."""
    reasons: list[str] = []
    notes: list[str] = []
    if sheet is None:
        what = f"registered model {registered_as!r}" if registered_as else f"NVML's {m.nvml_name!r}"
        notes.append(f"{what} is not in the catalog: nothing to compare with")
    elif m.nvml_model != sheet.model:
        seen = m.nvml_model or "a model the catalog lacks"
        reasons.append(f"wrong model: sold as {sheet.model}, NVML reports {m.nvml_name!r} ({seen})")
    if m.virtualization == "vgpu" and not limits.allow_vgpu:
        reasons.append(f"virtual GPU: NVML virtualization mode is vGPU ({m.nvml_name!r} is a slice of a card, not the card)")
    elif m.virtualization not in ("none", "passthrough"):
        notes.append(f"virtualization mode {m.virtualization}")
    if m.mig_mode == "enabled":
        notes.append("MIG mode is enabled: workloads see MIG instances, not the whole GPU")

    if m.cuda_memory_total_mib is not None and abs(m.cuda_memory_total_mib - m.memory_total_mib) > 0.01 * m.memory_total_mib:
        reasons.append(
            f"memory total differs: NVML reports {m.memory_total_mib:,.0f} MiB, CUDA {m.cuda_memory_total_mib:,.0f} MiB "
            "(one of them is not telling the truth)"
        )
    memory_ratio = ratio(m.memory_verified_bytes / 1e9, sheet.memory_gb if sheet else None)
    if not m.memory_test_ok:
        reasons.append(
            f"memory test failed: {m.memory_verified_bytes / 2**20:,.0f} MiB verified of "
            f"{m.memory_total_mib:,.0f} MiB that NVML reports"
        )
    if memory_ratio is not None and sheet is not None and memory_ratio < limits.min_memory_ratio:
        reasons.append(
            f"memory: {m.memory_verified_bytes / 1e9:.1f} GB usable is {memory_ratio:.0%} of the "
            f"{sheet.memory_gb:g} GB datasheet, below {limits.min_memory_ratio:.0%}"
        )

    peaks = {"bf16": sheet.tflops_16bit, "fp16": sheet.tflops_16bit, "fp8": sheet.tflops_fp8} if sheet else {}
    ratios = {d: r for d, v in m.tflops.items() if (r := ratio(v, peaks.get(d))) is not None}
    best16 = max((ratios[d] for d in SIXTEEN_BIT if d in ratios), default=None)
    if sheet is not None and best16 is None:
        reasons.append("compute: no 16-bit matmul was measured")
    elif best16 is not None and sheet is not None and best16 < limits.min_tflops_ratio:
        best = max(m.tflops[d] for d in SIXTEEN_BIT if d in m.tflops)
        reasons.append(
            f"compute: {best:.1f} dense 16-bit TFLOPS is {best16:.0%} of the {sheet.tflops_16bit:g} peak, "
            f"below {limits.min_tflops_ratio:.0%}"
        )

    bw_ratio = ratio(m.bandwidth_gbs, sheet.bandwidth_gbs if sheet else None)
    if bw_ratio is not None and bw_ratio < 0.5:
        notes.append(f"device memory copy reaches {bw_ratio:.0%} of the datasheet bandwidth")
    if m.pcie_gen and m.pcie_gen_max and m.pcie_gen < m.pcie_gen_max:
        notes.append(f"PCIe link at gen {m.pcie_gen}, the card can do gen {m.pcie_gen_max} (idle GPUs may downshift)")
    if m.pcie_width and m.pcie_width_max and m.pcie_width < m.pcie_width_max:
        notes.append(f"PCIe link x{m.pcie_width}, the card can do x{m.pcie_width_max}")
    return Verdict(not reasons, reasons, notes, memory_ratio, best16, ratios, bw_ratio)


def node_reason(failures: dict[int, list[str]]) -> str:
    """One line for a node's cordon reason: ``verify failed: GPU 0: wrong model ...; GPU 3: ...``."""
    parts = [f"GPU {i}: {'; '.join(r)}" for i, r in sorted(failures.items()) if r]
    return "verify failed: " + " | ".join(parts) if parts else ""


class ReportError(ValueError):
    """A report that is not a ``suanli verify --json`` report; the message says what is wrong."""


def _number(entry: dict, key: str, where: str) -> float:
    value = entry.get(key)
    # JSON parsers here accept NaN and Infinity, and NaN passes every threshold comparison
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ReportError(f"{where}.{key}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _optional_number(entry: dict, key: str, where: str) -> float | None:
    """``_number``, or None where the report leaves the field out (or null)."""
    return None if entry.get(key) is None else _number(entry, key, where)


def measured_from_entry(entry: object, where: str = "gpus[0]", nvml_model: str | None = None) -> Measured:
    """A ``gpus`` entry of a report as ``Measured``, checked field by field, so a server
    judges a node's numbers with its own thresholds and the model it sold the node as."""
    if not isinstance(entry, dict):
        raise ReportError(f"{where}: expected an object")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ReportError(f"{where}.name: expected the NVML product name")
    total = _number(entry, "memory_total_mib", where)
    ok = entry.get("memory_test_ok")
    if not isinstance(ok, bool):
        raise ReportError(f"{where}.memory_test_ok: expected true or false")
    test = entry.get("memory_test")
    if not isinstance(test, dict):
        test = {}
    verified = total * 2**20 if ok else (_optional_number(test, "verified_bytes", f"{where}.memory_test") or 0.0)
    tflops = entry.get("tflops")
    if not isinstance(tflops, dict):
        raise ReportError(f"{where}.tflops: expected {{dtype: TFLOPS}}")
    measured = {str(d): _number(tflops, d, f"{where}.tflops") for d in tflops}
    virt = entry.get("virtualization")
    if not isinstance(virt, str):
        raise ReportError(f"{where}.virtualization: expected a string")

    def small_int(key: str) -> int | None:
        v = entry.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return Measured(
        nvml_model=nvml_model,
        nvml_name=name,
        memory_total_mib=total,
        virtualization=virt,
        mig_mode=entry.get("mig_mode") if isinstance(entry.get("mig_mode"), str) else None,
        memory_test_ok=ok,
        memory_verified_bytes=verified,
        tflops=measured,
        bandwidth_gbs=_optional_number(entry, "bandwidth_gbs", where),
        pcie_gen=small_int("pcie_gen"),
        pcie_gen_max=small_int("pcie_gen_max"),
        pcie_width=small_int("pcie_width"),
        pcie_width_max=small_int("pcie_width_max"),
        cuda_memory_total_mib=_optional_number(entry, "cuda_memory_total_mib", where),
    )
