"""What the local backend's tasks use, read in one batch per interval (``ReportsUsage``).

- **Containers**: one ``podman stats --no-stream`` call for every container of the host
  (the engine reads each container's cgroup: cumulative CPU nanoseconds and memory in
  use); CPU percent is the difference of the cumulative CPU time since the previous
  sample over the wall time between them (100 = one core busy). A container's first
  sample takes the engine's average since its start.
- **Host processes** (no isolation): ``/proc`` once, summing CPU ticks and resident
  memory over the task's session (the task runs in a session of its own).
- **Sessions**: established inbound TCP connections to the task's SSH port (22) or its
  published ports, read from ``/proc/<init pid>/net/tcp{,6}``: the table of the
  container's own network namespace, so SSH sessions and the port proxy's connections
  count, the container's own outbound connections do not. Host processes share the
  host's table: not measured (None).
- **GPUs**: NVML (``nvml.GpuSampler``) for real GPUs; a task on virtual GPUs gets None
  with the note ``not measured: virtual GPU``, never a number.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suanli.backends.base import GpuReading, TaskSpec, UsageSample

VIRTUAL_NOTE = "not measured: virtual GPU"
NO_NVML_NOTE = "not measured: NVML unavailable"

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def gpu_facts(spec: TaskSpec) -> dict[str, Any]:
    """What a handle keeps for sampling: its node, GPU indices, whether they are real
    (NVML-measurable) and its share of each."""
    return {
        "node": spec.node,
        "gpus": list(spec.gpu_indices),
        "gpu_real": spec.env.get("SUANLI_VIRTUAL_GPUS") == "0",
        "milli_per_gpu": spec.milli_per_gpu,
    }


@dataclass(frozen=True)
class EngineStat:
    """One container in ``podman stats``: cumulative CPU time and memory in use."""

    name: str
    container_id: str
    cpu_ns: int
    memory_bytes: int
    avg_cpu_percent: float  #: the engine's average since the container started
    #: Docker only: its own CPU percent over the moment it sampled (no cumulative counter
    #: in its ``stats`` output); None for Podman
    cpu_percent_now: float | None = None


_SIZE = re.compile(r"^\s*([\d.]+)\s*([KMGT]?i?B)?", re.I)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(text: str) -> int:
    """Docker's ``1.5MiB`` (the part before `` / ``) in bytes; 0 if unreadable."""
    m = _SIZE.match(text.split("/")[0])
    if m is None:
        return 0
    return int(float(m.group(1)) * _UNITS.get((m.group(2) or "B").lower(), 1))


def parse_stats(text: str) -> dict[str, EngineStat]:
    """``podman stats --no-stream --format '{{json .ContainerStats}}'`` (cumulative CPU
    nanoseconds, memory bytes) or Docker's ``stats --no-stream --format '{{json .}}'``
    (``CPUPerc`` "12.34%", ``MemUsage`` "1.5MiB / 2GiB"): one JSON object a line (or a JSON
    list), by container name."""
    text = text.strip()
    if not text:
        return {}
    rows: list[dict[str, Any]] = (
        json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    )
    out = {}
    for r in rows:
        name = str(r.get("Name") or "")
        if not name:
            continue
        if "CPUNano" not in r and "CPUPerc" in r:  # Docker Engine
            cpu = float(str(r.get("CPUPerc") or "0").rstrip("%") or 0.0)
            out[name] = EngineStat(
                name, str(r.get("ID") or r.get("Container") or ""), 0, _bytes(str(r.get("MemUsage") or "")), cpu, cpu
            )
            continue
        out[name] = EngineStat(
            name,
            str(r.get("ContainerID") or ""),
            int(r.get("CPUNano") or 0),
            int(r.get("MemUsage") or 0),
            float(r.get("AvgCPU") or r.get("CPU") or 0.0),
        )
    return out


class CpuMeter:
    """CPU percent from cumulative CPU seconds: the difference to the previous reading."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def percent(self, key: str, cpu_s: float, now: float, first: float) -> tuple[float, bool]:
        """The percent, and whether it was measured over an interval. ``first``: the
        answer for a key read for the first time (its average since it started, start-up
        included: shown, but no sign of activity now)."""
        prev = self._last.get(key)
        self._last[key] = (cpu_s, now)
        if prev is None or now <= prev[1] or cpu_s < prev[0]:
            return max(0.0, first), False
        return max(0.0, 100.0 * (cpu_s - prev[0]) / (now - prev[1])), True

    def forget_except(self, keys: Iterable[str]) -> None:
        keep = set(keys)
        for k in [k for k in self._last if k not in keep]:
            del self._last[k]


def count_sessions(tables: Iterable[str], ports: Iterable[int]) -> int:
    """Established TCP connections whose local port is one of ``ports``, in the text of
    ``/proc/net/tcp`` and ``tcp6`` (the ``st`` column ``01`` is ESTABLISHED)."""
    wanted = set(ports)
    n = 0
    for text in tables:
        for line in text.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 4 or parts[3] != "01":
                continue
            try:
                port = int(parts[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if port in wanted:
                n += 1
    return n


def netns_tables(pid: int) -> list[str]:
    out = []
    for name in ("tcp", "tcp6"):
        try:
            out.append(Path(f"/proc/{pid}/net/{name}").read_text())
        except OSError:
            pass
    return out


def session_ports(data: dict[str, Any]) -> set[int]:
    """SSH's port and the task's published ports (container ports)."""
    ports = {22}
    for p in data.get("ports") or {}:
        try:
            ports.add(int(p))
        except ValueError:
            pass
    return ports


@dataclass(frozen=True)
class ProcStat:
    pid: int
    session: int
    cpu_s: float
    rss_bytes: int
    start_s: float  #: since boot


_STAT = re.compile(rb"^\d+ \(.*\) (.*)$", re.S)


def read_procs() -> list[ProcStat]:
    """Every process of the host (``/proc/*/stat``): session, CPU seconds, resident memory."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        m = _STAT.match(raw)
        if m is None:
            continue
        f_ = m.group(1).split()
        try:
            out.append(
                ProcStat(
                    int(entry.name),
                    int(f_[3]),
                    (int(f_[11]) + int(f_[12])) / _CLK_TCK,
                    int(f_[21]) * _PAGE,
                    int(f_[19]) / _CLK_TCK,
                )
            )
        except (IndexError, ValueError):
            continue
    return out


def uptime_s() -> float:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return time.monotonic()


def in_container(pid: int, container_id: str) -> bool:
    """Whether host process ``pid`` is in that container's cgroup (NVML's process list
    names host pids)."""
    if not container_id:
        return False
    try:
        return container_id in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def in_session(pid: int, session: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    m = _STAT.match(raw)
    try:
        return m is not None and int(m.group(1).split()[3]) == session
    except (IndexError, ValueError):
        return False


def combine_gpus(readings: list[GpuReading]) -> tuple[float | None, float | None, float | None]:
    """A task's GPU figures from its GPUs' readings: utilisation averaged over its GPUs,
    memory and power summed; None where no GPU gave the figure."""
    utils = [r.util_percent for r in readings if r.util_percent is not None]
    mems = [r.memory_used_mib for r in readings if r.memory_used_mib is not None]
    powers = [r.power_w for r in readings if r.power_w is not None]
    return (
        sum(utils) / len(utils) if utils else None,
        sum(mems) if mems else None,
        sum(powers) if powers else None,
    )


def sample(
    key: str,
    data: dict[str, Any],
    cpu_percent: float,
    memory_bytes: int,
    readings: list[GpuReading] | None,
    sessions: int | None,
    cpu_over_interval: bool = True,
) -> UsageSample:
    """One ``UsageSample``; ``readings`` None: the task's GPUs could not be read."""
    gpus = list(data.get("gpus") or [])
    note = ""
    util = mem = power = None
    if gpus and not data.get("gpu_real"):
        note = VIRTUAL_NOTE
    elif gpus and readings is None:
        note = NO_NVML_NOTE
    elif gpus and readings is not None:
        util, mem, power = combine_gpus(readings)
    return UsageSample(
        key=key,
        cpu_percent=round(cpu_percent, 2),
        cpu_over_interval=cpu_over_interval,
        memory_mib=round(memory_bytes / 2**20, 2),
        gpu_util_percent=util,
        gpu_memory_mib=mem,
        power_w=power,
        gpus=tuple(readings or ()) if gpus and data.get("gpu_real") else (),
        gpu_note=note,
        sessions=sessions,
        node=str(data.get("node") or ""),
    )
