"""What a GPU model promises: the catalog row (``advisor/data/gpus.csv``) a node is sold as.

NVML names a GPU its own way ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
"Tesla V100-SXM2-32GB"); ``catalog_model`` maps such a name to a catalog row with the
same rule renters' spellings use (``suanli.gpu_names``), after dropping the words NVML
adds (vendor, brand, memory type).
"""

from __future__ import annotations

import re

from suanli import gpu_names
from suanli.advisor.catalog import load_catalog
from suanli.verify.judge import Datasheet

#: Words in NVML product names that no catalog row carries.
_NVML_NOISE = {"nvidia", "geforce", "tesla", "hbm3", "hbm3e", "hbm2", "hbm2e", "gddr6", "gddr6x", "gddr7"}


def catalog_model(nvml_name: str) -> str | None:
    """The catalog row an NVML product name means, or None when the catalog lacks it."""
    words = [w for w in re.split(r"[\s\-_]+", nvml_name) if w and w.lower() not in _NVML_NOISE]
    if not words:
        return None
    if words[0].upper() in ("RTX", "GTX") and len(words) > 1:
        words = [words[0] + " " + words[1], *words[2:]]
    return gpu_names.canonical_or_none(" ".join(words))


def datasheet(model: str) -> Datasheet | None:
    """The catalog's figures for ``model`` (any spelling), or None for a model it lacks."""
    name = gpu_names.canonical_or_none(model)
    if name is None:
        return None
    row = next(g for g in load_catalog() if g.name == name)
    return Datasheet(
        model=row.name,
        memory_gb=row.memory_gb,
        bandwidth_gbs=row.mem_bandwidth_gbps,
        tflops_16bit=row.bf16_tflops,
        tflops_fp8=row.fp8_tflops,
        interconnect=row.interconnect,
    )
