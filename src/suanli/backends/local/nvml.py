"""Real GPU discovery through NVML (nvidia-ml-py); an empty list when there is none.

Absence of a driver is the normal case on a laptop or CI machine, so every
failure here means "no real GPUs", never an error: the inventory's declared
(virtual) GPUs are used instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from suanli.backends.base import GpuReading

T = TypeVar("T")


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


class GpuSampler:
    """Utilisation, memory used and power of this host's GPUs through NVML, opened once
    and kept open (``nvmlInit`` costs tens of milliseconds). ``nvml``: the ``pynvml``
    module, or an object with the same functions (a test's recorded GPU).

    A GPU a workload holds whole is read as a device (``scope`` ``device``). A shared GPU
    (``milli_per_gpu`` < 1000) is read per process where the driver allows: the memory
    of the workload's own processes (``nvmlDeviceGetComputeRunningProcesses``) and their
    SM utilisation (``nvmlDeviceGetProcessUtilization``); a figure the driver does not
    give per process is None, and power is never split (None)."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._ok: bool | None = None
        self._seen: dict[int, int] = {}  #: GPU index -> last process-sample timestamp (microseconds)

    def available(self) -> bool:
        if self._ok is None:
            try:
                if self._nvml is None:
                    import pynvml

                    self._nvml = pynvml
                self._nvml.nvmlInit()
                self._ok = True
            except Exception:
                self._ok = False
        return bool(self._ok)

    def close(self) -> None:
        if self._ok:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        self._ok = None

    def device(self, index: int) -> GpuReading | None:
        """The whole GPU; None when NVML cannot read it."""
        if not self.available():
            return None
        n = self._nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(n.nvmlDeviceGetUUID(h)), _text(n.nvmlDeviceGetName(h))
        except Exception:
            return None
        util = _try(lambda: float(n.nvmlDeviceGetUtilizationRates(h).gpu))
        mem = _try(lambda: n.nvmlDeviceGetMemoryInfo(h).used / 2**20)
        power = _try(lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0)  # milliwatts
        return GpuReading(index, uuid, name, util, mem, power, "device")

    def processes(self, index: int, mine: Callable[[int], bool]) -> GpuReading | None:
        """The share of a GPU used by the processes ``mine`` accepts (host pids)."""
        whole = self.device(index)
        if whole is None:
            return None
        n = self._nvml
        mem: float | None = None
        util: float | None = None
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
            procs = n.nvmlDeviceGetComputeRunningProcesses(h)
            used = [p.usedGpuMemory for p in procs if mine(int(p.pid)) and p.usedGpuMemory is not None]
            mem = sum(used) / 2**20
        except Exception:
            mem = None
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
            samples = n.nvmlDeviceGetProcessUtilization(h, self._seen.get(index, 0))
            by_pid: dict[int, float] = {}
            for smp in samples:
                if mine(int(smp.pid)):
                    by_pid[int(smp.pid)] = max(by_pid.get(int(smp.pid), 0.0), float(smp.smUtil))
                self._seen[index] = max(self._seen.get(index, 0), int(smp.timeStamp))
            util = min(100.0, sum(by_pid.values()))
        except Exception as exc:
            # NVML_ERROR_NOT_FOUND: no sample since the last read, i.e. nothing ran on it
            util = 0.0 if type(exc).__name__ == "NVMLError_NotFound" else None
        return GpuReading(index, whole.uuid, whole.model, util, mem, None, "process")


def _try(read: Callable[[], T]) -> T | None:
    """A field the driver may not support (power on some boards): None, never a guess."""
    try:
        return read()
    except Exception:
        return None
