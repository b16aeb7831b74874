"""What the process runtime's wrapper costs the host while tasks run: N tasks of
``sleep 600`` started through ``ProcessRuntime``, then the CPU of their process groups
(every process's user + system time, and its reaped children's) over a window.

The wrapper rewrites ``alive`` every second (a sign of life for tasks whose whole group
is killed). The shipped loop waits with ``read -t`` on a silent pipe; the baseline,
measured in the same run, is the loop it replaced, which started a ``sleep`` process per
beat. Issue 18: with about 430 instances running in ``bench/api_load.py`` (process
runtime), their wrappers took 0.3-0.47 of the 2-core machine's cores.

    .venv/bin/python bench/wrapper_overhead.py --tasks 200 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from suanli.backends.base import TaskSpec
from suanli.backends.local import process_runtime
from suanli.backends.local.process_runtime import ProcessRuntime

SHIPPED_WAIT = 'read -r -t {beat} -u "$quiet" _; [ $? -gt 128 ] || sleep {beat}'
#: the beat as it was before issue 18's session 21: a process per second per task
SLEEP_PER_BEAT = "sleep {beat}"
HZ = os.sysconf("SC_CLK_TCK")


def group_cpu_s(pgids: set[int]) -> float:
    """User + system seconds of the live processes in ``pgids``, their reaped children's included."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:  # pgrp
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / HZ


def measure(wrapper: str, tasks: int, seconds: float) -> float:
    """CPU-milliseconds per task per second of ``tasks`` wrapped ``sleep 600``s."""
    root = Path(tempfile.mkdtemp(prefix="suanli-wrapper-"))
    rt = ProcessRuntime(root)
    saved, process_runtime.WRAPPER = process_runtime.WRAPPER, wrapper
    handles = []
    try:
        for i in range(tasks):
            spec = TaskSpec(key=f"job-{i}-0", kind="job", workload_id=i, node="n", node_rank=0, run="sleep 600")
            handles.append(rt.submit(spec, root / spec.key))
        time.sleep(3)  # every task past its start
        pgids = {int(json.loads((root / h.key / "handle.json").read_text())["pgid"]) for h in handles}
        before, t0 = group_cpu_s(pgids), time.monotonic()
        time.sleep(seconds)
        used, spent = group_cpu_s(pgids) - before, time.monotonic() - t0
        return used / tasks / spent * 1000
    finally:
        process_runtime.WRAPPER = saved
        for h in handles:
            rt.stop(h, grace_s=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    shipped = process_runtime.WRAPPER
    assert SHIPPED_WAIT in shipped, "the shipped wrapper changed: update this benchmark"
    baseline = shipped.replace(SHIPPED_WAIT, SLEEP_PER_BEAT)
    old = measure(baseline, args.tasks, args.seconds)
    new = measure(shipped, args.tasks, args.seconds)
    cores = lambda ms: ms * args.tasks / 1000  # noqa: E731
    print(f"{args.tasks} tasks, {args.seconds:g} s, load {os.getloadavg()[0]:.2f}")
    print(f"sleep per beat (before): {old:.3f} CPU-ms per task per second ({cores(old):.3f} cores for all)")
    print(f"read -t (shipped):       {new:.3f} CPU-ms per task per second ({cores(new):.3f} cores for all)")
    floor = 1000 / HZ / args.tasks / args.seconds  # one clock tick over all tasks and the window
    print(f"ratio shipped / before:  {new / old:.3f}" if old > 0 else "before used no CPU: no ratio")
    print(f"(resolution: one clock tick, {floor:.4f} CPU-ms per task per second)")


if __name__ == "__main__":
    main()
