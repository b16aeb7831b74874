"""GPU catalog: datasheet numbers from the bundled ``data/gpus.csv``.

The CSV is a copy of ``shared/reference/gpus.csv`` (each row names its sources). The
advisor needs only memory, bandwidth, dense peaks and interconnect, so that is what a
``GPU`` carries; everything else stays in the file for people to read.

Lookup is forgiving because renters type "H100", "h100-sxm", "A100-80G" or "4090":
a name matches a row when every token of the name occurs in the row's name, and a small
alias table settles the names that are ambiguous on purpose ("H100" means the SXM part).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from suanli import gpu_names
from suanli.advisor.errors import AdvisorError

#: Names that match several rows (kept with the name rule in ``suanli.gpu_names``).
ALIASES = gpu_names.ALIASES

#: End-to-end training MFU defaults per class, and why. Derived from
#: shared/reference/microbench_refs.md: well-tuned dense training reaches 0.35-0.45 MFU
#: on NVIDIA datacenter parts (Llama 2's 184,320 A100-hours for 7B x 2T tokens imply
#: 0.41); the other classes scale that by their measured GEMM efficiency or by the lack
#: of a GPU-to-GPU fabric.
MFU_BY_CLASS: dict[str, tuple[float, str]] = {
    "nvidia-datacenter": (0.40, "dense training on A100/H100-class with NVLink: 0.35-0.45 (Llama 2 7B on A100 implies 0.41)"),
    "nvidia-pcie": (0.35, "datacenter PCIe parts without an NVLink fabric: slower gradient sync"),
    "nvidia-consumer": (0.30, "GeForce cards: no NVLink/P2P, halved FP32-accumulate tensor rate"),
    "nvidia-legacy": (0.30, "Volta/Turing/Pascal: older kernels, no BF16"),
    "amd": (0.25, "MI300X GEMMs reach ~51 % of peak vs ~80 % on H100 (MAMF), scale 0.40 by that"),
    "ascend": (0.30, "Ascend: uncertain peaks and a younger software stack; a cautious guess"),
}


@dataclass(frozen=True)
class GPU:
    """One catalog row: what the advisor needs to size, time and price a GPU."""

    name: str
    vendor: str
    memory_gb: float
    mem_bandwidth_gbps: float
    bf16_tflops: float  # dense, no sparsity; FP16 tensor rate where BF16 is absent
    fp8_tflops: float | None
    interconnect: str
    interconnect_gbps: float
    tdp_w: float | None
    gpu_class: str

    @property
    def memory_bytes(self) -> float:
        """Usable memory in bytes, counted in decimal GB (conservative: '80 GB' HBM is 80 GiB)."""
        return self.memory_gb * 1e9

    @property
    def default_mfu(self) -> float:
        return MFU_BY_CLASS[self.gpu_class][0]

    @property
    def mfu_reason(self) -> str:
        return MFU_BY_CLASS[self.gpu_class][1]


def _num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _classify(row: dict[str, str]) -> str:
    vendor, name = row["vendor"], row["gpu"]
    if vendor == "AMD":
        return "amd"
    if vendor == "Huawei":
        return "ascend"
    if name.startswith("RTX"):
        return "nvidia-consumer"
    if re.match(r"(V100|T4|P100|P40)", name):
        return "nvidia-legacy"
    if "PCIe" in row["form_factor"] and (_num(row["interconnect_bw_GBps_bidir_total"]) or 0) == 0:
        return "nvidia-pcie"
    if re.fullmatch(r"L40S|L20|L4|A10|A30", name):
        return "nvidia-pcie"
    return "nvidia-datacenter"


@lru_cache(maxsize=1)
def load_catalog() -> tuple[GPU, ...]:
    """Read the bundled gpus.csv once."""
    text = resources.files("suanli.advisor").joinpath("data/gpus.csv").read_text("utf-8")
    gpus = []
    for row in csv.DictReader(text.splitlines()):
        peak = _num(row["bf16_dense_tflops"]) or _num(row["fp16_dense_tflops"]) or 0.0
        gpus.append(
            GPU(
                name=row["gpu"],
                vendor=row["vendor"],
                memory_gb=float(row["memory_GB"]),
                mem_bandwidth_gbps=float(row["mem_bandwidth_GBps"]),
                bf16_tflops=peak,
                fp8_tflops=_num(row["fp8_dense_tflops"]),
                interconnect=row["interconnect"],
                interconnect_gbps=_num(row["interconnect_bw_GBps_bidir_total"]) or 0.0,
                tdp_w=_num(row["tdp_w"]),
                gpu_class=_classify(row),
            )
        )
    return tuple(gpus)


def find_gpu(name: str) -> GPU:
    """Resolve a renter's GPU name to one catalog row, or say which names exist
    (the rule: ``suanli.gpu_names.resolve``)."""
    by_name = {g.name: g for g in load_catalog()}
    try:
        return by_name[gpu_names.resolve(name, tuple(by_name))]
    except gpu_names.UnknownGpu as exc:
        raise AdvisorError(str(exc)) from None
