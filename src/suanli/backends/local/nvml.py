"""Real GPU discovery through NVML (nvidia-ml-py); an empty list when there is none.

Absence of a driver is the normal case on a laptop or CI machine, so every
failure here means "no real GPUs", never an error: the inventory's declared
(virtual) GPUs are used instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiscoveredGpu:
    index: int
    name: str
    uuid: str
    memory_mib: int


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover_gpus() -> list[DiscoveredGpu]:
    try:
        import pynvml
    except Exception:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            found.append(
                DiscoveredGpu(i, _text(pynvml.nvmlDeviceGetName(h)), _text(pynvml.nvmlDeviceGetUUID(h)), int(mem.total // 2**20))
            )
        return found
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def short_model_name(nvml_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; 'NVIDIA GeForce RTX 4090' -> 'RTX4090'."""
    words = nvml_name.replace("NVIDIA", "").replace("GeForce", "").split()
    if not words:
        return nvml_name
    if words[0] in ("RTX", "GTX") and len(words) > 1:
        return words[0] + words[1]
    return words[0]
