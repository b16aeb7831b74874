"""How well a fill's shares could pack, nodes and CPU aside: Best Fit against the mix's patterns and the LP.

    python bench/share_packing.py [--traces default,gpushare40,gpushare80] [--seeds 42-43]

The shares that arrive by 100 % in the fill experiment (``sim.fill.arrival_order``), packed
onto GPUs with nothing else on them: every GPU holding shares ends with a gap, and the
gaps' sum is the waste (points of the cluster's GPU capacity). Three packings:

- ``best_fit``: each share on the GPU it leaves the smallest gap on, else a new GPU: the
  rule FGD's fragmentation score follows for shares;
- ``patterns``: ``policies/patterns.py``'s book as ``SuanliPolicy``'s key 5 uses it (a
  slot of the share's size first; else Best Fit among GPUs no plan waits on; else a new
  GPU, planned as the pattern furthest behind its rate), planned on the trace's mix;
- ``lp``: the cutting-stock program on the shares that arrived (known in advance): no
  packing of them, online or not, wastes less.

Why: it says how much of a fill's idle capacity is the packing of shares rather than CPU,
nodes or GPU models, and how much of it following the patterns can take back (issue 16,
session 43).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from suanli.scheduler import ClusterState, Node, TargetWorkload  # noqa: E402
from suanli.scheduler.policies.patterns import PatternBook, share_sizes, solve  # noqa: E402
from suanli.sim.fill import arrival_order  # noqa: E402
from suanli.sim.traces import load_nodes, load_pods  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"


def best_fit(shares: list[int]) -> int:
    """GPUs used."""
    gaps: list[int] = []
    for s in shares:
        fitting = [(g, i) for i, g in enumerate(gaps) if g >= s]
        if fitting:
            gaps[min(fitting)[1]] -= s
        else:
            gaps.append(1000 - s)
    return len(gaps)


def by_patterns(shares: list[int], mix: TargetWorkload) -> int:
    """GPUs used, each GPU a node of its own with room for any number of shares."""
    state = ClusterState([Node(f"g{i:05d}", "G", 1, 1 << 40, 1 << 40) for i in range(len(shares))])
    book = PatternBook(solve(share_sizes(mix)))
    opened = 0
    for s in shares:
        slots = book.best_slots(state, s)
        if slots:
            node = next(iter(slots))
        else:
            planned = set(book.planned(state)[0].tolist())
            free = state.gpu_free[:opened, 0]
            fits = [i for i in np.flatnonzero(free >= s).tolist() if i not in planned]
            node = min(fits, key=lambda i: (free[i], i)) if fits else opened
        opened = max(opened, node + 1)
        book.placed(state, node, 0, s)
        state.gpu_free[node, 0] -= s
    return opened


def at_100(trace: str, seed: int, tune: float = 1.3) -> dict:
    requests = [p.request for p in load_pods(TRACES / f"openb_pod_list_{trace}.csv")]
    capacity = ClusterState(load_nodes(TRACES / "openb_node_list_gpu_node.csv")).total_gpu_milli
    shares, arrived = [], 0
    for r in arrival_order(requests, capacity, tune, seed):
        arrived += r.total_gpu_milli
        if arrived > capacity:
            break
        if r.is_sharing:
            shares.append(r.milli_per_gpu)
    counts = Counter(shares)
    lp_gpus = sum(p.rate for p in solve({s: float(n) for s, n in counts.items()})) * len(shares)
    waste = lambda gpus: round(100 * (gpus * 1000 - sum(shares)) / capacity, 3)  # noqa: E731
    return {
        "trace": trace,
        "seed": seed,
        "shares": len(shares),
        "best_fit": waste(best_fit(shares)),
        "patterns": waste(by_patterns(shares, TargetWorkload.from_requests(requests))),
        "lp": waste(lp_gpus),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="default,gpushare40,gpushare80")
    ap.add_argument("--seeds", default="42-43")
    args = ap.parse_args()
    first, _, last = args.seeds.partition("-")
    print(f"{'trace':<12}{'seed':>5}{'shares':>8}  waste, points of GPU capacity: {'best_fit':>9}{'patterns':>9}{'lp':>7}")
    for trace in args.traces.split(","):
        for seed in range(int(first), int(last or first) + 1):
            r = at_100(trace, seed)
            print(f"{trace:<12}{seed:>5}{r['shares']:>8}  {'':>32}{r['best_fit']:>9}{r['patterns']:>9}{r['lp']:>7}")


if __name__ == "__main__":
    main()
