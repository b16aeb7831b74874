"""Linux process-group helpers: liveness that survives PID reuse, and group kill.

A task's identity is (pid, start time in clock ticks from ``/proc/<pid>/stat``):
after a server restart a bare PID could belong to an unrelated process, so the
start time must match too. Zombies count as exited.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time), or None if the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the name may hold spaces and ')'
    if fields[0] == "Z":
        return None
    return int(fields[19])


def alive(pid: int, ticks: int) -> bool:
    return start_ticks(pid) == ticks


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False if nothing of it is left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def stop_group(pgid: int, leader_alive: Callable[[], bool], grace_s: float, marker: str) -> None:
    """SIGTERM the whole group, wait up to ``grace_s`` for the leader, then SIGKILL
    what is left: the whole group while its leader still holds the id, and the processes
    carrying ``marker`` (``kill_leftovers``: the id may be reused by then, and a process
    may have left the group)."""
    if not signal_group(pgid, signal.SIGTERM):
        kill_leftovers(pgid, marker)
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and leader_alive():
        time.sleep(0.05)
    if leader_alive():
        signal_group(pgid, signal.SIGKILL)
    kill_leftovers(pgid, marker)


#: What the process runtime's wrapper exports: its process id, which is its task's group
#: id. A process that leaves the group (its own session: torchrun starts its workers so)
#: still carries it, with the task's marker, in its environment.
GROUP_VAR = "SUANLI_TASK_GROUP"


def kill_leftovers(pgid: int, marker: str) -> int:
    """SIGKILL what is left of a finished task: the processes whose environment carries
    ``marker`` (the task's ``SUANLI_TASK_DIR=...``) and that are in group ``pgid`` or
    carry ``SUANLI_TASK_GROUP=<pgid>`` (they left the group, e.g. torchrun's workers).

    Once the group's leader is gone its id is free for reuse, and on a busy host
    (pid_max 32768) another program's group can get it; a bare ``killpg`` would
    then kill that program. A later run of the same task (same marker) has another
    group id, so it is left alone. Returns how many processes were killed."""
    needle, group = marker.encode(), f"{GROUP_VAR}={pgid}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = (entry / "stat").read_text()
            in_group = int(raw[raw.rindex(")") + 2 :].split()[2]) == pgid
            env = (entry / "environ").read_bytes().split(b"\0")
            if needle in env and (in_group or group in env):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed
