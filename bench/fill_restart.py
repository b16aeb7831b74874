"""What a restart costs the live platform's policy, and what learning the served mix saves.

The live control loop runs the online learner (``suanli_online``: the mix it plans for
is learned from arrivals). A restart used to start it from an empty mix, where every
node ties; now the loop shows it the newest served workloads first
(``ControlLoop.learn_served_mix``). This replays the FGD fill experiment (default
trace unless ``--trace``, tune 1.3, seeds 42-51) with the policy restarted when
``--at`` of the capacity has arrived, three ways in the same run:

- ``none``: no restart (the learner keeps its mix);
- ``cold``: a fresh learner (the old behaviour);
- ``warm``: a fresh learner shown the last ``MIX_HISTORY`` requests that arrived (the new
  behaviour; in a fill every arrival is served or failed, none waits).

Prints allocation % at 100 % arrived per arm, mean over seeds, and the paired
difference against ``none``.

    .venv/bin/python bench/fill_restart.py [--trace default] [--seeds 42-51] [--at 0.25,0.5]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-2023"


def alloc_at_100(trace_dir: Path, trace: str, seed: int, at: float | None, warm: bool) -> float:
    from suanli.control.loop import MIX_HISTORY
    from suanli.scheduler import ClusterState, Scheduler, make_policy
    from suanli.sim.fill import arrival_order
    from suanli.sim.traces import load_nodes, load_pods

    nodes = load_nodes(trace_dir / "openb_node_list_gpu_node.csv")
    requests = [p.request for p in load_pods(trace_dir / f"openb_pod_list_{trace}.csv")]
    state = ClusterState(nodes)
    scheduler = Scheduler(make_policy("suanli"), state, seed=seed)  # no target: the live policy
    order = arrival_order(requests, state.total_gpu_milli, 1.3, seed)
    used = arrived = 0
    restarted = at is None
    for k, req in enumerate(order):
        if not restarted and arrived >= at * state.total_gpu_milli:
            scheduler.policy = make_policy("suanli")
            if warm:
                for seen in order[max(0, k - MIX_HISTORY) : k]:
                    scheduler.policy.observe(seen)
            restarted = True
        arrived += req.total_gpu_milli
        alloc = scheduler.schedule(req).allocation
        if alloc is not None:
            used += alloc.total_gpu_milli
        if arrived >= state.total_gpu_milli:
            return 100.0 * used / state.total_gpu_milli
    return 100.0 * used / state.total_gpu_milli


def seeds_of(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv: list[str] | None = None) -> int:
    from concurrent.futures import ProcessPoolExecutor

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--trace", default="default")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--at", default="0.25,0.5", help="restart points, as shares of the capacity arrived")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    seeds = seeds_of(args.seeds)
    arms: list[tuple[str, float | None, bool]] = [("none", None, False)]
    for at in (float(x) for x in args.at.split(",")):
        arms += [(f"cold @{at:g}", at, False), (f"warm @{at:g}", at, True)]
    with ProcessPoolExecutor(args.workers) as pool:
        futures = {
            (name, s): pool.submit(alloc_at_100, args.traces, args.trace, s, at, warm) for name, at, warm in arms for s in seeds
        }
        got = {key: f.result() for key, f in futures.items()}
    print(f"{args.trace}, suanli_online, seeds {args.seeds}: allocation % at 100 % arrived")
    for name, _, _ in arms:
        values = [got[(name, s)] for s in seeds]
        diff = [got[(name, s)] - got[("none", s)] for s in seeds]
        se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else 0.0
        print(f"  {name:10s} {statistics.fmean(values):6.2f}   vs none {statistics.fmean(diff):+.3f} ± {se:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
