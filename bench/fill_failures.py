"""What a fill loses by 100 % arrived, and where its idle GPU capacity sits then.

    python bench/fill_failures.py [--traces default,gpushare80] [--policy fgd] [--seed 42]

The fill experiment's allocation at 100 % arrived is 100 % minus the GPU milli of the
pods that failed by then (nothing departs). This splits that loss by request class
(shares, 1/2/4/8 GPUs) and shows the idle milli per GPU at that moment: whether a
migration (``scheduler.repack``) could make room is a question of that histogram, since
a moved share needs a GPU with at least its milli free. Issue 16 asked migration to add
0.5 points on every family; this says where the points are lost.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from suanli.scheduler import ClusterState, Scheduler, TargetWorkload, make_policy  # noqa: E402
from suanli.sim.fill import arrival_order  # noqa: E402
from suanli.sim.traces import load_nodes, load_pods  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"
#: idle milli per GPU, bin edges (the last bin: GPUs wholly free)
EDGES = [1, 100, 200, 300, 500, 1000, 1001]


def at_100(trace: str, policy: str, seed: int, tune: float = 1.3) -> dict:
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    requests = [p.request for p in load_pods(TRACES / f"openb_pod_list_{trace}.csv")]
    state = ClusterState(nodes)
    scheduler = Scheduler(make_policy(policy, TargetWorkload.from_requests(requests), seed), state, seed=seed)
    capacity = state.total_gpu_milli
    lost: Counter[str] = Counter()
    arrived = 0
    for key, req in enumerate(arrival_order(requests, capacity, tune, seed)):
        arrived += req.total_gpu_milli
        if arrived > capacity:
            break
        if scheduler.schedule(req, key=key).allocation is None and req.total_gpu_milli:
            lost["share" if req.is_sharing else f"{req.gpu_count} GPU"] += req.total_gpu_milli
    idle = state.gpu_free[state.gpu_total > 0]
    counts, _ = np.histogram(idle, bins=[0, *EDGES])
    return {
        "trace": trace,
        "alloc_100": round(100 * state.used_gpu_milli / capacity, 2),
        "lost_points": {k: round(100 * v / capacity, 2) for k, v in lost.most_common()},
        "idle_gpus_by_free_milli": dict(zip(["0", "1-99", "100-199", "200-299", "300-499", "500-999", "1000"], counts.tolist())),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="default,gpushare40,gpushare80,multigpu30")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    for trace in args.traces.split(","):
        r = at_100(trace, args.policy, args.seed)
        print(f"{r['trace']}: allocated {r['alloc_100']} % at 100 % arrived; lost (points) {r['lost_points']}")
        print(f"  GPUs by idle milli: {r['idle_gpus_by_free_milli']}")


if __name__ == "__main__":
    main()
