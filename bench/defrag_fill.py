"""Allocation with and without share migration on the FGD fill experiment.

    python bench/defrag_fill.py [--trace default] [--policy fgd] [--seeds 42-51]
                                [--moves 0,4,16] [--out bench/results/defrag_fill.jsonl]

One fill run (``run_fill``, tune 1.3) per (seed, move budget); budget 0 is the
baseline measured in the same run. With a budget, every whole-GPU pod that fails
asks ``plan_defrag`` for at most that many migrations of placed shares (a share
may move to any GPU model its pod accepts). Results are appended to a JSONL file
as they finish (an interrupted run resumes), then a Markdown table: allocation %
at 100 % and 130 % arrived, failed pods, shares moved and pods they placed.
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


def run_one(traces: Path, trace: str, policy: str, seed: int, moves: int) -> dict:
    from suanli.sim.fill import run_fill
    from suanli.sim.metrics import summary
    from suanli.sim.traces import load_nodes, load_pods

    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = [p.request for p in load_pods(traces / f"openb_pod_list_{trace}.csv")]
    run = run_fill(nodes, pods, policy, seed, defrag_max_moves=moves)
    s = summary(run)
    # Pods placed thanks to a plan: failed whole-GPU pods that got one (one reserve each).
    return {
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "moves": moves,
        "a100": s["alloc_ratio"].get("100"),
        "a130": s["alloc_ratio"].get("130"),
        "failed_pods": s["failed_pods"],
        "migrations": run.migrations,
        "wall_seconds": s["wall_seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--trace", default="default")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--moves", default="0,4,16")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "defrag_fill.jsonl")
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="measure every run again (appended to --out), instead of resuming from the runs stored there",
    )
    args = ap.parse_args(argv)
    budgets = [int(m) for m in args.moves.split(",")]
    done = {}
    if args.out.exists() and not args.fresh:
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done[(r["trace"], r["policy"], r["seed"], r["moves"])] = r
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for seed in seeds(args.seeds):
        for moves in budgets:
            key = (args.trace, args.policy, seed, moves)
            if key in done:
                continue
            r = run_one(args.traces, args.trace, args.policy, seed, moves)
            done[key] = r
            with args.out.open("a") as f:
                f.write(json.dumps(r) + "\n")
            print(json.dumps(r), flush=True)
    print(f"\ntrace {args.trace}, policy {args.policy}, tune 1.3\n")
    print("| max moves per pod | seeds | alloc @100 mean ± sd | alloc @130 mean | failed pods | shares moved | s/run |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for moves in budgets:
        rows = [
            done[(args.trace, args.policy, s, moves)] for s in seeds(args.seeds) if (args.trace, args.policy, s, moves) in done
        ]
        if not rows:
            continue
        a = [r["a100"] for r in rows]
        sd = statistics.stdev(a) if len(a) > 1 else 0.0
        base = statistics.fmean(a) if moves == 0 else base
        print(
            f"| {moves} | {len(rows)} | {statistics.fmean(a):.2f} ± {sd:.2f} | {statistics.fmean(r['a130'] for r in rows):.2f} | "
            f"{statistics.fmean(r['failed_pods'] for r in rows):.0f} | {statistics.fmean(r['migrations'] for r in rows):.1f} | "
            f"{statistics.fmean(r['wall_seconds'] for r in rows):.1f} |"
        )
    if base is not None:
        for moves in budgets[1:]:
            rows = [
                done[(args.trace, args.policy, s, moves)]
                for s in seeds(args.seeds)
                if (args.trace, args.policy, s, moves) in done
            ]
            paired = [
                done[(args.trace, args.policy, r["seed"], 0)]["a100"]
                for r in rows
                if (args.trace, args.policy, r["seed"], 0) in done
            ]
            if rows and len(paired) == len(rows):
                diff = statistics.fmean(r["a100"] for r in rows) - statistics.fmean(paired)
                print(f"\nmoves {moves}: alloc @100 {diff:+.3f} points against no migration (paired seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
