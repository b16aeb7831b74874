"""What NVML says each GPU is (nvidia-ml-py), and recordings of those answers.

``read_identity(nvml)`` asks an NVML binding (the ``pynvml`` module, or a
``RecordedNvml`` replaying a recording) for each GPU's name, UUID, serial, memory
total, PCIe link, NVLink links, MIG mode and virtualization mode, plus the driver and
CUDA versions. A query the GPU does not support answers None, never an error: a
consumer card has no NVLink, a vGPU guest hides its serial.

A recording (``record(pynvml)`` on a real GPU, ``suanli verify --record-nvml FILE``) is
JSON holding exactly the answers ``read_identity`` asks for, so a real GPU's answers
can be replayed where there is none (the tests do).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: NVML_GPU_VIRTUALIZATION_MODE_* (nvml.h): 0 none (bare metal), 1 pass-through to a VM,
#: 2 vGPU (a guest sees a slice of a card), 3 host of vGPUs, 4 host of vSGA.
VIRTUALIZATION = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    name: str
    uuid: str
    serial: str | None
    memory_total_mib: float
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    nvlink_links: int | None  # active NVLink links; None: no NVLink (or not reported)
    mig_mode: str | None  # enabled | disabled | None (not supported)
    virtualization: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NodeIdentity:
    driver_version: str | None
    cuda_version: str | None  # the driver's CUDA version, "12.7"
    gpus: list[GpuIdentity]
    source: str  # "nvml", or the recording's label


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ask(fn: Any, *args: Any) -> Any:
    """An NVML answer, or None when the GPU does not support the query."""
    try:
        return fn(*args)
    except Exception:
        return None


def _cuda_version(v: int | None) -> str | None:
    return None if v is None else f"{v // 1000}.{v % 1000 // 10}"


def read_identity(nvml: Any, source: str = "nvml") -> NodeIdentity:
    """Every GPU's identity through ``nvml`` (initialised here and shut down after)."""
    nvml.nvmlInit()
    try:
        driver = _ask(nvml.nvmlSystemGetDriverVersion)
        cuda = _ask(nvml.nvmlSystemGetCudaDriverVersion)
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            links = [_ask(nvml.nvmlDeviceGetNvLinkState, h, link) for link in range(NVLINK_MAX_LINKS)]
            mig = _ask(nvml.nvmlDeviceGetMigMode, h)
            virt = _ask(nvml.nvmlDeviceGetVirtualizationMode, h)
            serial = _ask(nvml.nvmlDeviceGetSerial, h)
            gpus.append(
                GpuIdentity(
                    index=i,
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                    serial=_text(serial) if serial not in (None, "", b"") else None,
                    memory_total_mib=round(int(mem.total) / 2**20, 1),
                    pcie_gen=_ask(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    pcie_gen_max=_ask(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    pcie_width=_ask(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    pcie_width_max=_ask(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                    nvlink_links=sum(1 for s in links if s) if any(s is not None for s in links) else None,
                    mig_mode=None if mig is None else ("enabled" if mig[0] else "disabled"),
                    virtualization=VIRTUALIZATION.get(virt, "unknown") if virt is not None else "unknown",
                )
            )
        return NodeIdentity(_text(driver) if driver else None, _cuda_version(cuda), gpus, source)
    finally:
        _ask(nvml.nvmlShutdown)


def nvml_identity() -> NodeIdentity | None:
    """This machine's GPUs through the real NVML, or None without a driver or GPU."""
    try:
        import pynvml
    except Exception:
        return None
    try:
        found = read_identity(pynvml)
    except Exception:
        return None
    return found if found.gpus else None


# ----------------------------------------------------------------------------- recordings


class NotSupported(Exception):
    """What NVML raises for a query the GPU does not support (NVML_ERROR_NOT_SUPPORTED)."""


class _Memory:
    def __init__(self, total: int) -> None:
        self.total = total


class RecordedNvml:
    """An NVML binding that answers from a recording (JSON, see ``record``).

    The recording stands in for the physical GPU, nothing else: ``read_identity`` runs
    unchanged on it. A field recorded as null answers NVML_ERROR_NOT_SUPPORTED.
    """

    def __init__(self, doc: dict) -> None:
        if not isinstance(doc, dict) or not isinstance(doc.get("devices"), list):
            raise ValueError("an NVML recording is a JSON object with a 'devices' list")
        self.doc = doc
        self.label = str(doc.get("label") or "recording")

    @classmethod
    def load(cls, path: str | Path) -> RecordedNvml:
        return cls(json.loads(Path(path).read_text("utf-8")))

    def _get(self, value: Any) -> Any:
        if value is None:
            raise NotSupported("not supported (recorded as null)")
        return value

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return self._get(self.doc.get("driver_version"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return self._get(self.doc.get("cuda_driver_version"))

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.doc["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict:  # noqa: N802
        return self.doc["devices"][i]

    def nvmlDeviceGetName(self, h: dict) -> str:  # noqa: N802
        return h["name"]

    def nvmlDeviceGetUUID(self, h: dict) -> str:  # noqa: N802
        return h["uuid"]

    def nvmlDeviceGetSerial(self, h: dict) -> str:  # noqa: N802
        return self._get(h.get("serial"))

    def nvmlDeviceGetMemoryInfo(self, h: dict) -> _Memory:  # noqa: N802
        return _Memory(int(h["memory_total_bytes"]))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: dict) -> int:  # noqa: N802
        return self._get(h.get("pcie_gen_current"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: dict) -> int:  # noqa: N802
        return self._get(h.get("pcie_gen_max"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: dict) -> int:  # noqa: N802
        return self._get(h.get("pcie_width_current"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: dict) -> int:  # noqa: N802
        return self._get(h.get("pcie_width_max"))

    def nvmlDeviceGetNvLinkState(self, h: dict, link: int) -> int:  # noqa: N802
        states = self._get(h.get("nvlink_state"))
        if link >= len(states):
            raise NotSupported("no such link")
        return self._get(states[link])

    def nvmlDeviceGetMigMode(self, h: dict) -> list[int]:  # noqa: N802
        return self._get(h.get("mig_mode"))

    def nvmlDeviceGetVirtualizationMode(self, h: dict) -> int:  # noqa: N802
        return self._get(h.get("virtualization_mode"))


def record(nvml: Any, label: str) -> dict:
    """This machine's NVML answers as a recording ``RecordedNvml`` replays."""

    def ask(fn: Any, *args: Any) -> Any:
        value = _ask(fn, *args)
        return _text(value) if isinstance(value, bytes) else value

    nvml.nvmlInit()
    try:
        devices = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            states = [ask(nvml.nvmlDeviceGetNvLinkState, h, link) for link in range(NVLINK_MAX_LINKS)]
            mig = ask(nvml.nvmlDeviceGetMigMode, h)
            devices.append(
                {
                    "name": ask(nvml.nvmlDeviceGetName, h),
                    "uuid": ask(nvml.nvmlDeviceGetUUID, h),
                    "serial": ask(nvml.nvmlDeviceGetSerial, h),
                    "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(h).total),
                    "pcie_gen_current": ask(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    "pcie_gen_max": ask(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    "pcie_width_current": ask(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    "pcie_width_max": ask(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                    "nvlink_state": states if any(s is not None for s in states) else None,
                    "mig_mode": list(mig) if mig is not None else None,
                    "virtualization_mode": ask(nvml.nvmlDeviceGetVirtualizationMode, h),
                }
            )
        return {
            "label": label,
            "kind": "recording",
            "driver_version": ask(nvml.nvmlSystemGetDriverVersion),
            "cuda_driver_version": ask(nvml.nvmlSystemGetCudaDriverVersion),
            "devices": devices,
        }
    finally:
        _ask(nvml.nvmlShutdown)
