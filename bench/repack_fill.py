"""Allocation bought by migrations, and their cost, on the FGD fill experiment (issue 16).

    python bench/repack_fill.py [--traces-dir DIR] [--trace default,...] [--policy fgd,suanli]
                                [--seeds 42-44] [--arms none,direct:8,repack:8]
                                [--out bench/results/repack_fill.jsonl]

One fill run (``run_fill``, tune 1.3) per (trace, policy, seed, arm). An arm is
``none`` (no migration: the baseline, measured in the same invocation) or
``PLANNER:K[:CAP]``: whenever a whole-GPU pod fails, ask planner ``PLANNER``
(``repack.PLANNERS``: ``direct`` = ``defrag.plan_defrag``, ``repack`` = CP-SAT
global repack) for at most K migrations of placed shares (and at most CAP moves
per 100 pods placed so far, when given). Per run: allocation %
at 100 % arrived, shares moved, moves per 100 placed pods, GPU milli moved, plans
applied, planner calls and their p99 wall time. Runs are appended to ``--out`` as
they finish and reused on the next invocation (``--fresh`` measures again).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"


def seeds(spec: str) -> list[int]:
    if "-" in spec:
        lo, hi = (int(x) for x in spec.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(x) for x in spec.split(",")]


def pods_path(traces: Path, trace: str) -> Path:
    for base in (traces, Path("/tmp/suanli-gen-traces")):
        path = base / f"openb_pod_list_{trace}.csv"
        if path.exists():
            return path
    raise SystemExit(f"no pod list for trace {trace!r} (generated traces: python bench/gen_traces.py)")


def run_one(traces: Path, trace: str, policy: str, seed: int, arm: str) -> dict:
    import numpy as np

    from suanli.sim.fill import run_fill
    from suanli.sim.metrics import summary
    from suanli.sim.traces import load_nodes, load_pods

    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = [p.request for p in load_pods(pods_path(traces, trace))]
    parts = arm.split(":")  # none | PLANNER:K | PLANNER:K:CAP (moves per 100 placed pods)
    planner, moves = ("direct", 0) if arm == "none" else (parts[0], int(parts[1]))
    cap = float(parts[2]) if len(parts) > 2 else None
    run = run_fill(nodes, pods, policy, seed, defrag_max_moves=moves, planner=planner, moves_per_100_pods=cap)
    s = summary(run)
    placed = run.pods - s["failed_pods"]
    plan_s = np.array(run.plan_seconds) if run.plan_seconds else np.zeros(1)
    return {
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "arm": arm,
        "a100": s["alloc_ratio"].get("100"),
        "a130": s["alloc_ratio"].get("130"),
        "placed_pods": placed,
        "migrations": run.migrations,
        "moves_per_100_pods": round(100 * run.migrations / max(placed, 1), 3),
        "migrated_gpu_milli": run.migrated_milli,
        "plans": run.plans,
        "planner_calls": len(run.plan_seconds),
        "plan_p99_s": round(float(np.percentile(plan_s, 99)), 4),
        "plan_max_s": round(float(plan_s.max()), 4),
        "wall_seconds": s["wall_seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--trace", default="default")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seeds", default="42-44")
    ap.add_argument("--arms", default="none,direct:8,repack:8")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "repack_fill.jsonl")
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    done: dict[tuple, dict] = {}
    if args.out.exists() and not args.fresh:
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done[(r["trace"], r["policy"], r["seed"], r["arm"])] = r
    args.out.parent.mkdir(parents=True, exist_ok=True)
    keys = [(t, p, s, a) for t in args.trace.split(",") for p in args.policy.split(",") for s in seeds(args.seeds) for a in arms]
    for key in keys:
        if key in done:
            continue
        r = run_one(args.traces, *key)
        done[key] = r
        with args.out.open("a") as f:
            f.write(json.dumps(r) + "\n")
        print(json.dumps(r), flush=True)
    print(
        "\n| trace | policy | arm | seeds | alloc @100 mean ± sd | vs none (paired) | moves/run | moves per 100 placed pods "
        "| GPU milli moved/run | plans/run | planner p99 s | s/run |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for trace in args.trace.split(","):
        for policy in args.policy.split(","):
            for arm in arms:
                rows = [done[k] for k in keys if k[:2] == (trace, policy) and k[3] == arm and k in done]
                if not rows:
                    continue
                a = [r["a100"] for r in rows]
                base = [done.get((trace, policy, r["seed"], "none"), {}).get("a100") for r in rows]
                diff = statistics.fmean(x - b for x, b in zip(a, base)) if None not in base else float("nan")
                sd = statistics.stdev(a) if len(a) > 1 else 0.0
                f = statistics.fmean
                print(
                    f"| {trace} | {policy} | {arm} | {len(rows)} | {f(a):.2f} ± {sd:.2f} | {diff:+.3f} | "
                    f"{f(r['migrations'] for r in rows):.1f} | {f(r['moves_per_100_pods'] for r in rows):.3f} | "
                    f"{f(r['migrated_gpu_milli'] for r in rows):.0f} | {f(r['plans'] for r in rows):.1f} | "
                    f"{max(r['plan_p99_s'] for r in rows):.3f} | {f(r['wall_seconds'] for r in rows):.1f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
