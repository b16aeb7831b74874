"""An upper bound on the fill experiment's allocation at 100 % arrived demand.

    python bench/fill_bound.py [--traces DIR] [--trace-names default,...] [--seeds 42-51]

Shared pods of more than 500 milli can never share a GPU with each other, so each
leaves a gap of 1000 - milli on its GPU that only smaller shared pods can fill. At
100 % arrived demand the idle capacity equals the failed demand, and each such pod
either fails (losing its milli) or leaves its gap (less any fill), so

    idle >= sum(gaps) - (the most that the smaller shared pods arrived so far can fill)

where the fill is computed fractionally, each small pod only into gaps at least
its size (nested eligibility: gaps ascending, largest eligible pods first, which
is optimal for that relaxation). CPU, memory and GPU models are ignored, so the
bound is loose; no placement policy, online or offline, can beat it.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
from pathlib import Path

from suanli.scheduler import ClusterState
from suanli.sim.fill import arrival_order
from suanli.sim.traces import load_nodes, load_pods

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def max_alloc_at_100(order, capacity: int) -> float:
    arrived, gaps, smalls = 0, [], []
    for r in order:
        arrived += r.total_gpu_milli
        if arrived > capacity:
            break
        if r.is_sharing:
            (gaps if r.gpu_milli > 500 else smalls).append(1000 - r.gpu_milli if r.gpu_milli > 500 else r.gpu_milli)
    gaps.sort()
    smalls.sort()
    heap: list[int] = []
    j = filled = 0
    for gap in gaps:
        while j < len(smalls) and smalls[j] <= gap:
            heapq.heappush(heap, -smalls[j])
            j += 1
        room = gap
        while room > 0 and heap:
            size = -heapq.heappop(heap)
            take = min(size, room)
            room -= take
            filled += take
            if size > take:
                heapq.heappush(heap, -(size - take))
    return 100.0 - 100.0 * (sum(gaps) - filled) / capacity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=SHARED / "traces" / "alibaba-gpu-2023")
    ap.add_argument(
        "--trace-names",
        default="default,cpu050,cpu100,cpu200,gpushare40,gpushare60,gpushare80,"
        "gpuspec10,gpuspec20,gpuspec25,multigpu20,multigpu30,multigpu40",
    )
    ap.add_argument("--seeds", default="42-51")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    capacity = ClusterState(load_nodes(args.traces / "openb_node_list_gpu_node.csv")).total_gpu_milli
    print("| trace | upper bound on alloc @100 (mean over seeds) |\n|---|---:|")
    for name in args.trace_names.split(","):
        pods = [p.request for p in load_pods(args.traces / f"openb_pod_list_{name}.csv")]
        bounds = [max_alloc_at_100(arrival_order(pods, capacity, 1.3, s), capacity) for s in range(int(lo), int(hi or lo) + 1)]
        print(f"| {name} | {statistics.fmean(bounds):.2f} |")


if __name__ == "__main__":
    main()
