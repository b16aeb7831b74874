"""``suanli sim fill --json`` end to end against the fill it runs (issue 18, part 4).

    PYTHONPATH=src .venv/bin/python bench/sim_cli.py [--traces DIR] [--runs 3] [--policy suanli]

End to end: the whole ``suanli sim fill --nodes ... --pods ... --policy P --seed 42
--tune 1.3 --json`` process, spawn to exit, through the installed entry point. In
process: ``run_fill`` on traces already in memory, in a fresh interpreter, its wall time
alone -- the core the command wraps. Both are run ``--runs`` times, interleaved, in the
same run; the ratio of medians is the figure (target <= 1.2), in wall time and, for a
loaded machine where wall time mostly measures the neighbours, in CPU time too. Every end-to-end run's
JSON must equal the in-process ``summary`` but for ``wall_seconds`` (``alloc_ratio`` is
an interface contract): the bench stops if it does not. The in-process child also
reports where the rest of the process time goes: imports, trace loading, summary; and
times the bare placement loop ``bench/fill_speed.py`` times (``Scheduler.schedule`` per
pod, no per-pod fragmentation and allocation bookkeeping), which is the "fill" figure
issue 18 compared the command against. The trace cache (``suanli.sim.trace_cache``)
lives in a fresh directory: the first end-to-end run fills it and is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.2
DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "alibaba-gpu-2023"
NODES, PODS = "openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"


def in_process(traces: Path, policy: str, seed: int, tune: float) -> dict:
    """Runs in a child process: the phases of the command, each timed, and its summary."""
    t0 = time.perf_counter()
    from suanli.scheduler import ClusterState, Scheduler, TargetWorkload, make_policy
    from suanli.sim.fill import arrival_order, run_fill
    from suanli.sim.metrics import summary
    from suanli.sim.traces import load_nodes, load_pods

    t1 = time.perf_counter()
    nodes = load_nodes(traces / NODES)
    requests = [p.request for p in load_pods(traces / PODS)]
    t2 = time.perf_counter()
    c2 = time.process_time()
    run = run_fill(nodes, requests, policy, seed, tune)
    c3 = time.process_time()
    t3 = time.perf_counter()
    result = summary(run)
    text = json.dumps(result)
    t4 = time.perf_counter()
    state = ClusterState(nodes)
    sched = Scheduler(make_policy(policy, TargetWorkload.from_requests(requests), seed), state, seed=seed)
    for req in arrival_order(requests, state.total_gpu_milli, tune, seed):
        sched.schedule(req)
    t5 = time.perf_counter()
    return {
        "imports_s": t1 - t0,
        "load_s": t2 - t1,
        "fill_s": t3 - t2,
        "fill_cpu_s": c3 - c2,
        "summary_s": t4 - t3,
        "placement_loop_s": t5 - t4,
        "summary": json.loads(text),
    }


def child(traces: Path, policy: str, seed: int, tune: float) -> dict:
    code = (
        f"import json,sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import sim_cli as b; from pathlib import Path; "
        f"print(json.dumps(b.in_process(Path({str(traces)!r}), {policy!r}, {seed:d}, {tune!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def end_to_end(argv: list[str], env: dict[str, str]) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one whole ``suanli sim fill`` process, and its JSON."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr[-2000:]}")
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return took, cpu, json.loads(done.stdout)


def same_result(a: dict, b: dict) -> bool:
    strip = lambda d: {k: v for k, v in d.items() if k != "wall_seconds"}  # noqa: E731
    return strip(a) == strip(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--policy", default="suanli")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--tune", type=float, default=1.3)
    args = ap.parse_args()
    script = Path(sys.executable).parent / "suanli"
    cli = [str(script)] if script.exists() else [sys.executable, "-c", "from suanli.cli import main; main()"]
    argv = [*cli, "sim", "fill", "--nodes", str(args.traces / NODES), "--pods", str(args.traces / PODS)]
    argv += ["--policy", args.policy, "--seed", str(args.seed), "--tune", str(args.tune), "--json"]
    os.environ["SUANLI_CACHE_DIR"] = tempfile.mkdtemp(prefix="suanli-bench-cache-")  # children inherit it
    env = dict(os.environ)
    cold, _, first = end_to_end(argv, env)  # an empty cache directory: what the first run of a trace costs
    e2e: list[float] = []
    e2e_cpu: list[float] = []
    inner: list[dict] = []
    for _ in range(args.runs):
        took, cpu, result = end_to_end(argv, env)
        e2e.append(took)
        e2e_cpu.append(cpu)
        inner.append(child(args.traces, args.policy, args.seed, args.tune))
        for r in (first, result):
            if not same_result(r, inner[-1]["summary"]):
                raise SystemExit("the CLI's JSON differs from the in-process summary: the contract is broken")
    fill = statistics.median(r["fill_s"] for r in inner)
    whole = statistics.median(e2e)
    ratio = whole / fill
    cpu_ratio = statistics.median(e2e_cpu) / statistics.median(r["fill_cpu_s"] for r in inner)
    keys = ("imports_s", "load_s", "fill_s", "fill_cpu_s", "summary_s", "placement_loop_s")
    phases = {k: round(statistics.median(r[k] for r in inner), 3) for k in keys}
    print(f"{args.policy}, seed {args.seed}, tune {args.tune}, {args.runs} runs each, interleaved; load {os.getloadavg()[0]:.2f}")
    print(f"in process (fresh interpreter), median phases: {json.dumps(phases)}")
    print(f"end to end, first run with an empty cache: {cold:.3f} s")
    print(f"end to end, runs: {', '.join(f'{t:.3f}' for t in e2e)} s; median {whole:.3f} s")
    fills = ", ".join(f"{r['fill_s']:.3f}" for r in inner)
    print(f"in-process run_fill: {fills} s; median {fill:.3f} s")
    print(f"end to end CPU: {', '.join(f'{t:.3f}' for t in e2e_cpu)} s")
    print(f"ratio end to end / in process, wall: {ratio:.2f} (target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'})")
    print(f"ratio end to end / in process, CPU: {cpu_ratio:.2f}")
    print(f"end to end / bare placement loop (fill_speed's figure): {whole / phases['placement_loop_s']:.2f}")
    print("results identical (alloc_ratio, frag_*, failures): yes")
    summary = {"e2e_s": round(whole, 3), "e2e_cold_s": round(cold, 3), "fill_s": round(fill, 3)}
    print(json.dumps({**summary, "ratio": round(ratio, 3), "cpu_ratio": round(cpu_ratio, 3), "phases": phases}))


if __name__ == "__main__":
    main()
