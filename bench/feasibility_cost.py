"""What issue 19's checks cost the control loop: the inventory fingerprint read every
tick, and judging waiting work against the inventory when it changes.

    .venv/bin/python bench/feasibility_cost.py            # 128 nodes of 8 H100, SQLite
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

from dag_scale import server

from suanli.control import sizing
from suanli.scheduler import Request


@dataclass
class Work:
    kind: str
    id: int
    request: Request
    num_nodes: int


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--work", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    ctx = server(args.nodes, None)
    try:
        times = []
        for _ in range(args.repeat):
            with ctx.db.transaction() as s:
                t = time.perf_counter()
                sizing.inventory_fingerprint(s)
                times.append(time.perf_counter() - t)
        times.sort()
        work = [
            Work("job", i, Request(gpu_count=1 + i % 8, cpu_milli=1000, memory_mib=1024), 1 + i % 4) for i in range(args.work)
        ]
        with ctx.db.transaction() as s:
            t = time.perf_counter()
            failed = sizing.fail_never_fits(s, work)
            judged = time.perf_counter() - t
        print(
            json.dumps(
                {
                    "nodes": args.nodes,
                    "fingerprint_p10_us": round(times[len(times) // 10] * 1e6),
                    "fingerprint_median_us": round(times[len(times) // 2] * 1e6),
                    "work": args.work,
                    "judge_ms": round(judged * 1e3, 1),
                    "failed": len(failed),
                }
            )
        )
    finally:
        ctx.db.dispose()


if __name__ == "__main__":
    main()
