"""Speed of the fill experiment and of single placements (issue 2's speed targets).

    python bench/fill_speed.py [--traces DIR] [--policies fgd,suanli] [--scale 10]

For each policy: one whole fill experiment on the default trace (1213 nodes, tune
1.3), its wall time and peak RSS (each run in a fresh process, so peaks don't mix),
and the same experiment with the per-shape score cache switched off: the naive
"rescore every node for every pod" baseline, measured in the same run. Then
placement latency p50/p99 per pod during a fill at 1,213 nodes and on the node list
replicated ``--scale`` times (12,130 nodes, the pod list replicated alike).
The reference Go simulator's figure (1,132 s and 3.6 GB to reach 100 % arrived, on
this machine kind) comes from ../shared/benchmarks/FGD_PROTOCOL.md; it is not
re-run here.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

REFERENCE_SECONDS, REFERENCE_MB = 1132.0, 3600.0
DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-gpu-2023"


def one_fill(traces: Path, policy: str, cache: bool, scale: int) -> dict:
    """Runs in a child process: one fill experiment, with per-pod placement latency."""
    from suanli.scheduler import ClusterState, Scheduler, TargetWorkload, make_policy
    from suanli.scheduler.policy import NodeLocalPolicy
    from suanli.sim.fill import arrival_order
    from suanli.sim.traces import load_nodes, load_pods

    start = time.perf_counter()
    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = [p.request for p in load_pods(traces / "openb_pod_list_default.csv")]
    if scale > 1:
        nodes = [replace(n, name=f"{n.name}-r{k}") for k in range(scale) for n in nodes]
        pods = [replace(p, name=f"{p.name}-r{k}") for k in range(scale) for p in pods]
    state = ClusterState(nodes)
    pol = make_policy(policy, TargetWorkload.from_requests(pods), 42)
    if isinstance(pol, NodeLocalPolicy):
        pol.use_cache = cache
    sched = Scheduler(pol, state, seed=42)
    order = arrival_order(pods, state.total_gpu_milli, 1.3, 42)
    lat = np.zeros(len(order))
    placed = 0
    for k, req in enumerate(order):
        t0 = time.perf_counter()
        p = sched.schedule(req)
        lat[k] = time.perf_counter() - t0
        placed += p.ok
    wall = time.perf_counter() - start
    return {
        "policy": policy,
        "cache": cache,
        "nodes": len(nodes),
        "pods": len(order),
        "placed": placed,
        "wall_seconds": round(wall, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "latency_ms": {q: round(float(np.percentile(lat, p)) * 1000, 3) for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
        "alloc_pct": round(100 * state.used_gpu_milli / state.total_gpu_milli, 2),
    }


def in_child(traces: Path, policy: str, cache: bool, scale: int) -> dict:
    code = (
        f"import json,sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import fill_speed as b; from pathlib import Path; "
        f"print(json.dumps(b.one_fill(Path({str(traces)!r}), {policy!r}, {cache!r}, {scale:d})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--policies", default="fgd,suanli")
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--skip-naive", action="store_true", help="skip the uncached baseline (slow)")
    args = ap.parse_args()
    rows = []
    for policy in args.policies.split(","):
        fast = in_child(args.traces, policy, True, 1)
        rows.append(fast)
        print(json.dumps(fast), flush=True)
        if not args.skip_naive:
            naive = in_child(args.traces, policy, False, 1)
            rows.append(naive)
            print(json.dumps(naive), flush=True)
            print(f"  {policy}: cached vs naive rescoring, same run: {naive['wall_seconds'] / fast['wall_seconds']:.1f}x faster")
        print(
            f"  {policy}: vs reference Go simulator (published, 100 % arrived only): "
            f"{REFERENCE_SECONDS / fast['wall_seconds']:.0f}x faster, {REFERENCE_MB / fast['peak_rss_mb']:.1f}x less memory"
        )
        big = in_child(args.traces, policy, True, args.scale)
        rows.append(big)
        print(json.dumps(big), flush=True)
    print("\n| policy | nodes | cache | pods | wall s | peak RSS MB | p50 ms | p99 ms | max ms | alloc % |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lat = r["latency_ms"]
        print(
            f"| {r['policy']} | {r['nodes']} | {'yes' if r['cache'] else 'no (naive)'} | {r['pods']} | {r['wall_seconds']} | "
            f"{r['peak_rss_mb']} | {lat['p50']} | {lat['p99']} | {lat['max']} | {r['alloc_pct']} |"
        )


if __name__ == "__main__":
    main()
