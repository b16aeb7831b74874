"""Gang placement against a topology-blind baseline on the spot-GPU inventory.

    python bench/gang_topology.py [--seeds 42-46] [--jobs 6000] [--load 0.85]
                                  [--policy best_fit] [--json]

For each seed: one synthetic job stream (``suanli.sim.gang_workload``) replayed
twice on the same topology-annotated inventory (``load_spot_nodes``, nodes with 4+
GPUs: 1-GPU nodes host no multi-GPU member), once with the gang planner and
NVLink-aware GPU picks, once with the same policy placing members one by one.
Prints, per arm, the share of placed gangs inside one IB leaf (the measure),
leaves per gang, the share of gangs and of all jobs rejected, the share of 2-4
GPU single-node jobs inside one NVLink island, GPU utilisation, and the ratio of
one-leaf shares measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPOT = ROOT.parent / "shared" / "traces" / "alibaba-spot-2026" / "node_info_df.csv"


def seeds(spec: str) -> list[int]:
    if "-" in spec:
        lo, hi = (int(x) for x in spec.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(x) for x in spec.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=Path, default=SPOT)
    ap.add_argument("--seeds", default="42-46")
    ap.add_argument("--jobs", type=int, default=6000)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--policy", default="best_fit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from suanli.sim.gang_workload import generate_jobs, replay
    from suanli.sim.topology_inventory import load_spot_nodes

    nodes = load_spot_nodes(args.nodes, min_gpus=4)
    rows = []
    for seed in seeds(args.seeds):
        jobs = generate_jobs(nodes, args.jobs, load=args.load, seed=seed)
        for aware in (True, False):
            r = replay(nodes, jobs, args.policy, topology_aware=aware, seed=seed)
            rows.append(
                {
                    "seed": seed,
                    "arm": "topology" if aware else "blind",
                    "gangs": r.gangs,
                    "one_leaf": round(100 * r.one_leaf_share, 2),
                    "leaves_per_gang": round(r.mean_leaves, 3),
                    "gangs_rejected": round(100 * r.gangs_rejected / max(r.gangs + r.gangs_rejected, 1), 2),
                    "jobs_rejected": round(100 * r.rejected / r.jobs, 2),
                    "one_island": round(100 * r.one_island_share, 2),
                    "utilisation": round(100 * r.utilisation, 2),
                    "by_size": {n: round(100 * one / placed, 1) for n, (placed, one) in sorted(r.by_size.items())},
                    "wall_seconds": round(r.wall_seconds, 2),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{len(nodes)} nodes, {args.jobs} jobs per seed, load {args.load}, policy {args.policy}\n")
    keys = ["one_leaf", "leaves_per_gang", "gangs_rejected", "jobs_rejected", "one_island", "utilisation", "wall_seconds"]
    print("| arm | seeds | gangs placed | " + " | ".join(keys) + " |")
    print("|---|---:|---:|" + "---:|" * len(keys))
    means = {}
    for arm in ("topology", "blind"):
        sel = [r for r in rows if r["arm"] == arm]
        means[arm] = {k: statistics.fmean(r[k] for r in sel) for k in keys + ["gangs"]}
        sd = statistics.stdev(r["one_leaf"] for r in sel) if len(sel) > 1 else 0.0
        cells = [f"{means[arm]['one_leaf']:.2f} ± {sd:.2f}"] + [f"{means[arm][k]:.2f}" for k in keys[1:]]
        print(f"| {arm} | {len(sel)} | {means[arm]['gangs']:.0f} | " + " | ".join(cells) + " |")
    sizes = sorted({int(n) for r in rows for n in r["by_size"]})
    print("\n| gang nodes | " + " | ".join(f"{n}" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for arm in ("topology", "blind"):
        sel = [r for r in rows if r["arm"] == arm]
        cells = [statistics.fmean(r["by_size"].get(n, 0.0) for r in sel) for n in sizes]
        print(f"| one leaf %, {arm} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    ratio = means["topology"]["one_leaf"] / means["blind"]["one_leaf"] if means["blind"]["one_leaf"] else float("inf")
    print(f"\none-leaf share, topology / blind: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
