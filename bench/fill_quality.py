"""Allocation quality of every policy on every openb trace, next to the FGD paper.

    python bench/fill_quality.py [--traces DIR] [--policies ...] [--seeds 42-51]
                                 [--workers 2] [--out bench/results/fill_quality.jsonl]

One fill experiment per (trace, policy, seed), appended to a JSONL file as it
finishes, so an interrupted run resumes where it stopped. Then a Markdown table:
mean allocation % at 100 % and 130 % arrived per trace and policy, the paper's mean
for the same policy (../shared/benchmarks/fgd_paper_alloc_ratio.csv), and the
share of unallocated capacity the default policy removes relative to FGD.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from suanli.scheduler.model import Request
from suanli.scheduler.policies.target import OnlineTarget, TargetWorkload, TaskShape

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PAPER_NAMES = {
    "random": "Random",
    "dot_product": "DotProd",
    "gpu_clustering": "GpuClustering",
    "gpu_packing": "GpuPacking",
    "best_fit": "BestFit",
    "fgd": "FGD",
}
#: ``P_online-history-N`` draws its history with the fill's seed plus this (another draw)
HISTORY_SEED = 1000
ALL_POLICIES = "random,dot_product,gpu_clustering,gpu_packing,best_fit,fgd,suanli,suanli_online"


def register_ablations() -> None:
    """Make ``suanli-no-KEY`` and ``suanli_online-no-KEY`` (one tie-break key off,
    ``policies/suanli.py``) and ``suanli-only-KEY`` known to ``make_policy``, for
    experiments that ask which key a trace gains or loses by."""
    from suanli.scheduler.policies import POLICIES
    from suanli.scheduler.policies.suanli import KEYS, SuanliPolicy

    for key in KEYS:
        off = KEYS - {key}
        POLICIES[f"suanli-no-{key}"] = lambda target, seed, keys=off: SuanliPolicy(target, keys)
        POLICIES[f"suanli_online-no-{key}"] = lambda target, seed, keys=off: SuanliPolicy(None, keys)
        POLICIES[f"suanli-only-{key}"] = lambda target, seed, keys=frozenset({key}): SuanliPolicy(target, keys)


class MixLearner(OnlineTarget):
    """``OnlineTarget`` with the learners of ``P_online-history_W-N`` (``register_mix_variant``)."""

    def __init__(self, how: str, trace_mix: TargetWorkload, n: int) -> None:
        super().__init__()
        self.how, self.n = how, n
        self.trace_kept = set(trace_mix.shapes)
        whole = trace_mix.whole or trace_mix
        self.trace_weight = dict(zip(whole.shapes, whole.weights))

    def observe(self, req: Request) -> bool:
        if self.how == "frozen" and self.seen >= self.n:
            self.seen += 1  # counted, as the policies read ``seen``, but not learned from
            return False
        return super().observe(req)

    def derive(self) -> TargetWorkload:
        if self.how == "late" and self.seen < self.n:
            return TargetWorkload((), np.zeros(0))
        if self.how == "oraclecut":
            return TargetWorkload.from_counts(Counter({s: c for s, c in self.counts.items() if s in self.trace_kept}), 1.0)
        if self.how == "oracleweights":
            cut = super().derive()
            return TargetWorkload.from_counts(Counter({s: self.trace_weight.get(s, 0.0) for s in cut.shapes}), 1.0)
        if self.how.startswith("smooth"):
            return TargetWorkload.from_counts(self._smoothed(float(self.how.removeprefix("smooth"))), self.coverage)
        return super().derive()

    def _smoothed(self, alpha: float) -> Counter[TaskShape]:
        """Each GPU shape (cpu, milli, GPUs) keeps its count; how it splits over the
        model lists moves towards the lists' shares over all GPU requests, as if
        ``alpha`` more of its requests had been seen with those shares."""
        per_shape: Counter[tuple[int, int, int]] = Counter()
        per_list: Counter[tuple[str, ...]] = Counter()
        for s, c in self.counts.items():
            if s.milli_per_gpu:
                per_shape[(s.cpu_milli, s.milli_per_gpu, s.gpus)] += c
                per_list[s.gpu_models] += c
        lists = sum(per_list.values())
        out: Counter[TaskShape] = Counter({s: c for s, c in self.counts.items() if not s.milli_per_gpu})
        for (cpu, milli, gpus), n in per_shape.items():
            for models, m in per_list.items():
                shape = TaskShape(cpu, milli, gpus, models)
                out[shape] = (self.counts.get(shape, 0) + alpha * m / lists) * n / (n + alpha)
        return out


def register_mix_variant(name: str) -> None:
    """Make a variant of ``fgd``/``suanli`` that plans on another mix known to
    ``make_policy``, for experiments that ask what the learned mix costs (issue 16,
    session 35): ``P_online-true-after-N`` learns the mix online and adopts the trace's
    after N requests; ``P_online-coverage-C`` and ``P_online-drift-D`` learn it with
    another coverage (``OnlineTarget``, FGD's is 0.95) or drift; ``P-coverage-C`` plans
    on the trace's mix cut at coverage C. ``P_online-history-N`` first learns from N
    requests drawn from the trace's mix (its own seed, not the arrivals), as the live loop
    learns from the work it served before a restart (``ControlLoop.learn_served_mix``).
    ``P_online-history_W-N`` learns so too, with the learner ``W`` (session 36: which part
    of the learned mix costs): ``frozen`` adopts the mix after the history and keeps it;
    ``oraclecut`` keeps the shapes of the trace's 95 % cut, weighed by the learned counts;
    ``oracleweights`` keeps the learned cut's shapes, weighed as in the trace;
    ``smoothA`` shrinks each GPU shape's model list towards the lists' overall shares,
    ``A`` requests' worth (the counts of shape and list are noisy where the list is rare).
    ``P_online-late-N`` plans on no mix (FGD's ties, the seeded node order) until it has
    seen N requests, then learns as shipped. ``P_online-judge-N`` packs while nearly empty
    whatever its mix until it has seen N requests, and only then asks the policy's gate
    (session 37: a mix of few requests swings across the gate). ``P_online-sticky-N`` keeps
    the gate open once it has opened on a mix learned from N requests or more (FGD's
    ``pack_latch``; session 38, before which the gate was asked every time).
    ``P_online-sizedafter-N`` (Suanli's only) counts no node-sized share until it has seen N
    requests, so that a young mix keeps keys 1-3 (session 38). ``P-packed-U`` and ``P_online-packed-U``
    plan on no mix while under U of the cluster's GPU milli is allocated, whatever the
    mix (FGD's ``pack_below`` without the gate Suanli's policies ship, session 37)."""

    from suanli.scheduler.policies import POLICIES
    from suanli.scheduler.policies.fgd import FGD
    from suanli.scheduler.policies.suanli import SuanliPolicy

    base, _, rest = name.partition("-")
    kind, _, value = rest.rpartition("-")
    cls = {"fgd": FGD, "suanli": SuanliPolicy}.get(base.removesuffix("_online"))
    if cls is None or name in POLICIES:
        return

    def recut(target: TargetWorkload, coverage: float) -> TargetWorkload:
        whole = target.whole or target
        return TargetWorkload.from_counts(Counter(dict(zip(whole.shapes, whole.weights))), coverage)

    def online(target: TargetWorkload, seed: int) -> FGD:
        policy = cls(None)
        if kind.startswith("history_"):
            policy.online = MixLearner(kind.removeprefix("history_"), target, int(value))
        if kind == "coverage":
            policy.online = OnlineTarget(coverage=float(value))
        elif kind == "drift":
            policy.online = OnlineTarget(drift=float(value))
        elif kind == "late":
            policy.online = MixLearner("late", target, int(value))
        elif kind == "judge":
            learner, gate, after = policy.online, policy.pack_if, int(value)
            policy.pack_if = lambda mix: learner.seen < after or gate is None or gate(mix)
        elif kind == "sticky":
            policy.pack_latch = int(value)
        elif kind == "sizedafter":
            share, learn, after = policy.node_sized_share, policy.observe, int(value)
            policy.node_sized_share = lambda state: share(state) if policy.online.seen >= after else 0.0  # type: ignore[method-assign]

            def observe_sized(req: Request) -> None:
                learn(req)
                if policy.online is not None and policy.online.seen == after:
                    policy._model_keys_of = None  # judge the mix's node-sized share now
                    policy.cache.clear()

            policy.observe = observe_sized  # type: ignore[method-assign]
        elif kind == "true-after":
            learn, after = policy.observe, int(value)

            def observe(req: object) -> None:
                if policy.online is not None and policy.online.seen >= after:
                    policy.online, policy.target, policy._arrays = None, target, None
                    policy.cache.clear()
                    return
                learn(req)

            policy.observe = observe  # type: ignore[method-assign]
        if kind.startswith("history"):
            mix = target.whole or target
            rng = np.random.default_rng(seed + HISTORY_SEED)
            for k in rng.choice(len(mix.shapes), size=int(value), p=mix.weights):
                policy.observe(mix.shapes[k].request())
        return policy

    if kind == "packed":  # the policies' own rule (a rehearsal's policies too)
        POLICIES[name] = lambda target, seed: cls(
            None if base.endswith("_online") else target, pack_below=float(value), pack_if=None
        )
    elif base.endswith("_online") and (
        kind in ("coverage", "drift", "true-after", "late", "judge", "sticky", "sizedafter") or kind.startswith("history")
    ):
        POLICIES[name] = online
    elif kind == "coverage":
        POLICIES[name] = lambda target, seed: cls(recut(target, float(value)))


def run_one(traces: str, trace: str, policy: str, seed: int) -> dict:
    from suanli.sim.fill import run_fill
    from suanli.sim.metrics import summary
    from suanli.sim.traces import load_nodes, load_pods

    register_ablations()
    register_mix_variant(policy)
    nodes = load_nodes(Path(traces) / "openb_node_list_gpu_node.csv")
    pods = [p.request for p in load_pods(Path(traces) / f"openb_pod_list_{trace}.csv")]
    s = summary(run_fill(nodes, pods, policy, seed))
    return {
        "trace": trace,
        "policy": policy,
        "seed": seed,
        "a100": s["alloc_ratio"].get("100"),
        "a130": s["alloc_ratio"].get("130"),
        "failed_pods": s["failed_pods"],
        "wall_seconds": s["wall_seconds"],
    }


def paper_figures() -> dict:
    path = SHARED / "benchmarks" / "fgd_paper_alloc_ratio.csv"
    if not path.exists():
        return {}
    with path.open() as f:
        return {(r["trace"].removeprefix("openb_pod_list_"), r["policy"]): r for r in csv.DictReader(f)}


def table(results: list[dict], policies: list[str], default: str = "suanli") -> str:
    paper = paper_figures()
    by = {}
    for r in results:
        by.setdefault((r["trace"], r["policy"]), []).append(r)
    traces = sorted({r["trace"] for r in results}, key=lambda t: (t != "default", t))
    lines = [
        "| trace | policy | seeds | alloc @100 mean ± sd | paper @100 | alloc @130 mean | paper @130 | s/run |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    cuts = []
    for trace in traces:
        for policy in policies:
            runs = by.get((trace, policy))
            if not runs:
                continue
            a = [r["a100"] for r in runs]
            b = [r["a130"] for r in runs if r["a130"] is not None]  # None: a run that kept @100 only
            ref = paper.get((trace, PAPER_NAMES.get(policy, "")), {})
            sd = statistics.stdev(a) if len(a) > 1 else 0.0
            lines.append(
                f"| {trace} | {policy} | {len(runs)} | {statistics.fmean(a):.2f} ± {sd:.2f} | "
                f"{ref.get('alloc_at_100_mean', '—')} | {f'{statistics.fmean(b):.2f}' if b else '—'} | {ref.get('alloc_at_130_mean', '—')} | "
                f"{statistics.fmean(r['wall_seconds'] for r in runs):.1f} |"
            )
        fgd, mine = by.get((trace, "fgd")), by.get((trace, default))
        if fgd and mine:
            u_fgd = 100 - statistics.fmean(r["a100"] for r in fgd)
            u_mine = 100 - statistics.fmean(r["a100"] for r in mine)
            cuts.append((trace, u_fgd, u_mine, 100 * (u_fgd - u_mine) / u_fgd))
    if cuts:
        lines += ["", f"| trace | unallocated @100, fgd | unallocated @100, {default} | cut |", "|---|---:|---:|---:|"]
        lines += [f"| {t} | {a:.2f} | {b:.2f} | {c:+.1f} % |" for t, a, b, c in cuts]
        lines.append(f"| mean | | | {statistics.fmean(c for *_, c in cuts):+.1f} % |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", default=str(SHARED / "traces" / "alibaba-gpu-2023"))
    ap.add_argument("--trace-names", default="", help="comma list; default: every openb_pod_list_*.csv")
    ap.add_argument("--policies", default=ALL_POLICIES)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fill_quality.jsonl")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))
    policies = args.policies.split(",")
    names = (
        args.trace_names.split(",")
        if args.trace_names
        else sorted(p.stem.removeprefix("openb_pod_list_") for p in Path(args.traces).glob("openb_pod_list_*.csv"))
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.exists() else []
    have = {(r["trace"], r["policy"], r["seed"]) for r in done}
    todo = [(t, p, s) for t in names for p in policies for s in seeds if (t, p, s) not in have]
    if not args.table_only and todo:
        with ProcessPoolExecutor(args.workers) as pool, args.out.open("a") as out:
            futures = [pool.submit(run_one, args.traces, *job) for job in todo]
            for k, fut in enumerate(as_completed(futures), 1):
                r = fut.result()
                out.write(json.dumps(r) + "\n")
                out.flush()
                done.append(r)
                print(f"[{k}/{len(todo)}] {r['trace']} {r['policy']} seed {r['seed']}: {r['a100']} / {r['a130']}", flush=True)
    print(table([r for r in done if r["trace"] in names and r["policy"] in policies], policies))


if __name__ == "__main__":
    main()
