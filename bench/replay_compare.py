"""Time-based replay benchmarks (issue 6), every comparison measured in one run.

    python bench/replay_compare.py [--traces DIR] [--trace default] [--load 200] [--seed 42]

1. Policies: Suanli's default (suanli policy, priority queue with backfill,
   least-lost-work preemption) against FIFO-first-fit (strict FIFO, first fit, no
   preemption) and FGD (same queue and preemption as the default): on-demand queue
   delay mean/p99 and average GPU allocation over the busy period.
2. Spot: lost GPU-hours to preemption, least-lost-work victims against
   lowest-priority-first victims (checkpoints every 15 min), same trace, same
   seeds (``--spot-seeds``) and loads (``--spot-loads``).
3. Faults: node MTBF 30 d (MTTR 30 min), checkpoints every 15 min: checkpointed
   jobs recovered, and the worst unsaved work lost by one fault eviction (must be
   below the checkpoint interval).
4. Speed: wall seconds of each full replay.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from suanli.sim.replay import Replay, ReplayConfig, summary
from suanli.sim.traces import load_nodes, load_pods

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-gpu-2023"


def run(nodes, pods, **kw) -> dict:
    s = summary(Replay(nodes, pods, ReplayConfig(**kw)).run())
    s.pop("gpu_allocation_over_time")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--trace", default="default")
    ap.add_argument("--load", type=float, default=200.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--spot-seeds", default="42,43,44,45,46")
    ap.add_argument("--spot-loads", default="200,400")
    args = ap.parse_args()
    nodes = load_nodes(args.traces / "openb_node_list_gpu_node.csv")
    pods = load_pods(args.traces / f"openb_pod_list_{args.trace}.csv")
    common = {"load": args.load, "seed": args.seed, "checkpoint_interval": 900.0}
    rows = {
        "suanli (default)": run(nodes, pods, policy="suanli", **common),
        "fgd": run(nodes, pods, policy="fgd", **common),
        "fifo first-fit": run(nodes, pods, policy="first_fit", queue="fifo", preemption="none", **common),
        "suanli, lowest-priority-first victims": run(nodes, pods, policy="suanli", preemption="lowest_priority_first", **common),
        "suanli, node MTBF 30 d": run(nodes, pods, policy="suanli", node_mtbf=30 * 86400.0, **common),
    }
    print(json.dumps(rows, indent=1))
    print(f"\ntrace {args.trace}, load {args.load}, seed {args.seed}, checkpoints every 15 min\n")
    print(
        "| run | on-demand delay mean s | on-demand p99 s | spot delay mean s | avg GPU alloc % | preemptions "
        "| lost GPU-h (preempt / faults) | faults | recovered / failed | worst loss per fault s | wall s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        od = r["queue_delay_seconds"].get("on-demand", {})
        sp = r["queue_delay_seconds"].get("spot", {})
        lost = r["lost_gpu_hours"]
        print(
            f"| {name} | {od.get('mean', 0):.2f} | {od.get('p99', 0):.2f} | {sp.get('mean', 0):.2f} | "
            f"{r['avg_gpu_allocation']:.2f} | {r['preemptions']} | {lost['preemption']:.2f} / {lost['faults']:.2f} | "
            f"{r['fault_evictions']} | {r['jobs_recovered']} / {r['jobs_failed']} | {r['max_lost_seconds_per_fault']:.0f} | "
            f"{r['wall_seconds']:.1f} |"
        )
    spot_comparison(nodes, pods, [int(x) for x in args.spot_seeds.split(",")], [float(x) for x in args.spot_loads.split(",")])


def spot_comparison(nodes, pods, seeds: list[int], loads: list[float]) -> None:
    print("\n| load | seed | least-lost-work: evictions, lost GPU-h | lowest-priority-first: evictions, lost GPU-h |")
    print("|---:|---:|---:|---:|")
    totals = {"least_lost_work": [0, 0.0], "lowest_priority_first": [0, 0.0]}
    for load in loads:
        for seed in seeds:
            cells = []
            for strategy in totals:
                r = run(nodes, pods, policy="suanli", load=load, seed=seed, checkpoint_interval=900.0, preemption=strategy)
                totals[strategy][0] += r["preemptions"]
                totals[strategy][1] += r["lost_gpu_hours"]["preemption"]
                cells.append(f"{r['preemptions']}, {r['lost_gpu_hours']['preemption']:.2f}")
            print(f"| {load:g} | {seed} | {cells[0]} | {cells[1]} |")
    a, b = totals["least_lost_work"], totals["lowest_priority_first"]
    print(f"| all | | {a[0]}, {a[1]:.2f} | {b[0]}, {b[1]:.2f} |")


if __name__ == "__main__":
    main()
