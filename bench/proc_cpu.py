"""Every process of the machine as ``/proc`` shows it: name, parent and CPU seconds so
far. The benchmarks that run a ``suanli server`` read it before and after a stretch to
say which process spent the CPU (``api_load.py`` per phase, ``server_costs.py`` per part)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    name: str  #: ``/proc/PID/comm``: the supervisor names its parts (``suanli-api-1``...)
    ppid: int
    cpu_s: float


def processes() -> dict[int, Proc]:
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        out[int(d.name)] = Proc(
            stat[stat.index("(") + 1 : stat.rindex(")")], int(rest[1]), (int(rest[11]) + int(rest[12])) / ticks
        )
    return out


def descends(procs: dict[int, Proc], pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants."""
    while pid > 1 and pid in procs:
        if pid == root:
            return True
        pid = procs[pid].ppid
    return False
