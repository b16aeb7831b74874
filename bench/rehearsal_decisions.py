"""What the default policy's rehearsals decide for keys 1 and 6 on each trace, and how long
they take (``scheduler/policies/rehearsal.py``): "keep" or "drop", or "-" where nothing is
rehearsed (key 1: the mix has no scarce model; key 6: shares ask for under
``SHARE_MEMORY_GATE`` of the GPU milli, or key 1 is rehearsed). ``--every`` and ``--seeds`` try other rehearsal
sizes than the shipped ones; BENCHMARKS.md (issue 16, session 27) compares each with the
key's effect measured by full fills.

    .venv/bin/python bench/rehearsal_decisions.py --traces /tmp/suanli-gen-traces \\
        --trace-names gpuspec10,u-gpuspec12 --every 2 --seeds 1
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from suanli.scheduler import ClusterState
from suanli.scheduler.policies import rehearsal
from suanli.scheduler.policies.suanli import SuanliPolicy
from suanli.scheduler.policies.target import TargetWorkload
from suanli.sim.traces import load_nodes, load_pods


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, required=True, help="directory of openb_*.csv files")
    ap.add_argument("--trace-names", required=True, help="comma-separated, as in openb_pod_list_NAME.csv")
    ap.add_argument("--every", type=int, default=rehearsal.EVERY, help="rehearse on every N-th node")
    ap.add_argument("--seeds", default=",".join(map(str, rehearsal.SEEDS)), help="comma-separated rehearsal seeds")
    args = ap.parse_args()
    rehearsal.EVERY, rehearsal.SEEDS = args.every, tuple(int(s) for s in args.seeds.split(","))
    nodes = load_nodes(args.traces / "openb_node_list_gpu_node.csv")
    print(f"every {rehearsal.EVERY} seeds {rehearsal.SEEDS}")
    for name in args.trace_names.split(","):
        requests = [p.request for p in load_pods(args.traces / f"openb_pod_list_{name}.csv")]
        policy = SuanliPolicy(TargetWorkload.from_requests(requests))
        state = ClusterState(nodes)
        start = time.perf_counter()
        keys = policy.active_keys(state)
        took = time.perf_counter() - start
        # what the policy would use unrehearsed is what it rehearses: key 1 where a model is
        # a pressure level up, key 6 where the mix has shares enough and no such model
        unrehearsed = SuanliPolicy(policy.target, rehearse=False)
        scarce = unrehearsed.model_keys(state)[1].max() > 0
        key_1 = ("keep" if "pressure" in keys else "drop") if scarce else "-"
        key_6 = ("keep" if "share_memory" in keys else "drop") if "share_memory" in unrehearsed.active_keys(state) else "-"
        print(f"{name:24} key 1 {key_1:5} key 6 {key_6:5} {took:5.1f} s")


if __name__ == "__main__":
    main()
