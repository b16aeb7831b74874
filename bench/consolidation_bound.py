"""How much could consolidating fractional shares buy at the end of a fill?

    python bench/consolidation_bound.py [--trace default] [--policy fgd] [--seeds 42-44]

Issue 16 asks whether a periodic consolidation of shares (repack them onto fewer GPUs
to free whole ones) could lift the default trace from ~95.3 % to 96.2 %. Before
building one, this bounds what it could buy, with unlimited moves, at the end of a
fill (all pods arrived, tune 1.3):

* **within a node**: each node's shares are re-packed onto as few GPUs as possible
  (first-fit decreasing, 1,000 milli per GPU); the CPU does not move, so a GPU freed
  this way can host a whole-GPU pod only if the node has the pod's CPU;
* **across nodes**: all shares of a GPU model re-packed (first-fit decreasing) onto as
  few GPUs of that model as they fit on, ignoring CPU and which node: an optimistic
  bound on the GPUs a cross-node consolidation could free.

The failed whole-GPU pods are then placed, in arrival order, on the GPUs the
within-node consolidation frees (first node with room); the GPU milli they add, over
the cluster's capacity, is the allocation a perfect within-node consolidation at the
end could add. Moves: shares that would change GPU.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"


def ffd_bins(shares: list[int], capacity: int = 1000) -> list[list[int]]:
    """First-fit decreasing: the shares packed onto bins of ``capacity`` milli."""
    bins: list[list[int]] = []
    room: list[int] = []
    for s in sorted(shares, reverse=True):
        for i, r in enumerate(room):
            if r >= s:
                bins[i].append(s)
                room[i] -= s
                break
        else:
            bins.append([s])
            room.append(capacity - s)
    return bins


def one(traces: Path, trace: str, policy: str, seed: int) -> dict:
    from suanli.scheduler import ClusterState, Scheduler, TargetWorkload, make_policy
    from suanli.sim.fill import arrival_order
    from suanli.sim.traces import load_nodes, load_pods

    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    reqs = [p.request for p in load_pods(traces / f"openb_pod_list_{trace}.csv")]
    state = ClusterState(nodes)
    sched = Scheduler(make_policy(policy, TargetWorkload.from_requests(reqs), seed), state, seed=seed)
    shares: dict[tuple[int, int], list[int]] = {}  # (node, gpu) -> share milli
    failed_whole = []
    for req in arrival_order(reqs, state.total_gpu_milli, 1.3, seed):
        alloc = sched.schedule(req).allocation
        if alloc is None:
            if req.gpu_count:
                failed_whole.append(req)
            continue
        if req.is_sharing:
            shares.setdefault((state.index[alloc.node], alloc.gpu_indices[0]), []).append(alloc.milli_per_gpu)
    used_before = state.used_gpu_milli
    per_node: dict[int, list[tuple[int, list[int]]]] = {}
    for (n, g), milli in shares.items():
        per_node.setdefault(n, []).append((g, milli))
    freed = np.zeros(state.num_nodes, np.int64)  # whole GPUs freed per node
    moves = 0
    for n, gpus in per_node.items():
        bins = ffd_bins([m for _, ms in gpus for m in ms])
        freed[n] = len(gpus) - len(bins)
    freed_within = int(freed.sum())
    # no packing beats total milli / 1000 GPUs: a proof when even this frees nothing
    fluid_within = sum(len(g) - -(-sum(m for _, ms in g for m in ms) // 1000) for g in per_node.values())
    for n, gpus in per_node.items():
        bins = ffd_bins([m for _, ms in gpus for m in ms])
        if freed[n] > 0:
            # shares not already on a GPU whose content matches a bin move (an upper count)
            kept = {tuple(sorted(ms)) for _, ms in gpus} & {tuple(sorted(b)) for b in bins}
            moves += sum(len(ms) for _, ms in gpus if tuple(sorted(ms)) not in kept)
    sliver = sum(1000 - sum(ms) for ms in shares.values())
    by_model: dict[int, list[int]] = {}
    for (n, _), ms in shares.items():
        by_model.setdefault(int(state.model_id[n]), []).extend(ms)
    gpus_of_model = {m: sum(1 for (n, _) in shares if state.model_id[n] == m) for m in by_model}
    across = sum(gpus_of_model[m] - len(ffd_bins(v)) for m, v in by_model.items())
    # place failed whole-GPU pods on the freed GPUs (plus GPUs already fully free), CPU as is
    free_gpus = freed + (state.gpu_free == 1000).sum(axis=1)
    cpu = state.cpu_free.astype(np.int64).copy()
    model_ok_all = np.ones(state.num_nodes, bool)
    gained = 0
    for req in failed_whole:
        ok = (free_gpus >= req.gpu_count) & (cpu >= req.cpu_milli) & (freed > 0)
        ok &= state.model_mask(req.gpu_models) if req.gpu_models else model_ok_all
        hit = np.flatnonzero(ok)
        if hit.size:
            n = int(hit[0])
            free_gpus[n] -= req.gpu_count
            freed[n] -= min(freed[n], req.gpu_count)
            cpu[n] -= req.cpu_milli
            gained += req.gpu_count * 1000
    total = state.total_gpu_milli
    return {
        "seed": seed,
        "alloc_end": 100 * used_before / total,
        "partial_gpus": len(shares),
        "sliver_gpu_equiv": sliver / 1000,
        "freed_within_node": freed_within,
        "freed_within_node_fluid_bound": int(fluid_within),
        "freed_across_nodes": int(across),
        "moves_within": moves,
        "failed_whole_pods": len(failed_whole),
        "gain_points_within": 100 * gained / total,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--trace", default="default")
    ap.add_argument("--policy", default="fgd")
    ap.add_argument("--seeds", default="42-44")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    rows = [one(args.traces, args.trace, args.policy, s) for s in range(int(lo), int(hi or lo) + 1)]
    for r in rows:
        print(r, flush=True)
    keys = [k for k in rows[0] if k != "seed"]
    print({k: round(statistics.fmean(r[k] for r in rows), 3) for k in keys})


if __name__ == "__main__":
    main()
