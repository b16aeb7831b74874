"""Where the suite's time goes: with ``SUANLI_TEST_CPU=FILE`` set, every test (setup, call
and teardown) appends one JSON line to FILE: its id, xdist worker and group, when it
started and ended, and the CPU it cost, this process's and that of the child processes
it waited for (servers stopped, CLI runs; not containers, whose processes the engine
owns). ``python -m tests.cpu_report FILE`` sums it by group, by worker and by file.

The suite is CPU-bound on two cores (BENCHMARKS.md, issue 11): its wall time is cut by
cutting what tests cost the machine, so that is what this measures, per test, in the
run itself rather than in a profiler's run that no longer looks like the suite's.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

FILE = os.environ.get("SUANLI_TEST_CPU")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not FILE:
        yield
        return
    start, cpu, children = time.time(), time.process_time(), _children_cpu()
    yield
    group = item.get_closest_marker("xdist_group")
    line = {
        "test": item.nodeid.split("@")[0],
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "group": group.args[0] if group and group.args else "",
        "start": round(start, 3),
        "end": round(time.time(), 3),
        "cpu_self": round(time.process_time() - cpu, 3),
        "cpu_children": round(_children_cpu() - children, 3),
    }
    with open(FILE, "a") as f:  # one short append per line: workers' lines do not interleave
        f.write(json.dumps(line) + "\n")


def summary(path: Path, top: int = 25) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return "no tests recorded"
    t0 = min(r["start"] for r in rows)
    out = [f"{len(rows)} tests, {max(r['end'] for r in rows) - t0:.0f} s from the first start to the last end"]

    def table(title: str, key) -> None:  # type: ignore[no-untyped-def]
        acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for r in rows:
            a = acc[key(r)]
            a[0] += 1
            a[1] += r["end"] - r["start"]
            a[2] += r["cpu_self"]
            a[3] += r["cpu_children"]
        out.append(f"\n{title:<60} {'tests':>6} {'wall s':>8} {'cpu self':>9} {'children':>9}")
        for name, (n, wall, cs, cc) in sorted(acc.items(), key=lambda kv: -(kv[1][2] + kv[1][3]))[:top]:
            out.append(f"{name[:60]:<60} {n:>6} {wall:>8.1f} {cs:>9.1f} {cc:>9.1f}")

    table("group", lambda r: r["group"] or "(ungrouped)")
    table("worker", lambda r: r["worker"])
    table("file", lambda r: r["test"].split("::")[0])
    table("test", lambda r: r["test"])
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
