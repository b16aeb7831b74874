"""What the funds figures of many tenants cost: ``rater.accruing_many`` over T tenants
with K allocations each (half of them jobs, every instance with a disk), the read the
control loop's funds phase and admission make every poll (issue 18: the worker's
steady-state CPU grows with the running work).

    python bench/accruing_cost.py [--tenants 50] [--allocations 8] [--db sqlite|postgresql] [--compare SRC]

Prints the median CPU ms per call (this process, ``time.process_time``) over the rounds.
``--compare SRC`` runs the same measurement with another checkout's ``src`` in a
subprocess, rounds interleaved with this one's (the baseline, same run), checks that
both give the same total and prints the ratio. Then, this checkout only, what a funds
rule for every tenant costs (``funds.Figures``: each tenant, well funded, judged on a
ceiling of its accruing, the exact figures read only if a ceiling fails), against the
same rule on the exact figures (``funds.figures_many``), same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.billing.billing_helpers, tests.pg_helpers


def measure(tenants: int, allocations: int, db: str, calls: int) -> dict:
    from suanli.billing import funds, rater, store
    from suanli.billing.terms import Terms
    from tests.billing.billing_helpers import HOUR, add_tenant, allocate, world
    from tests.pg_helpers import fresh_pg_database

    drop = None
    if db == "postgresql":
        url, drop = fresh_pg_database()
    else:
        url = f"sqlite:///{tempfile.mkdtemp(prefix='suanli-acc-')}/b.db"
    try:
        w = world(url, disk_gib=10)
        ids = [w.tenant_id] + [add_tenant(w, f"t{i}") for i in range(tenants - 1)]
        for t in ids:
            for k in range(allocations):
                allocate(w, k * 60_000, None, milli=100, tenant_id=t, job=k % 2 == 0)
        for t in ids:
            store.topup(w.db, t, "1000")
        at = HOUR // 2
        out: dict = {}

        def timed(call: Callable[[Session], object]) -> float:
            with w.db.transaction() as s:
                call(s)  # warm: statements compiled
                t0 = time.process_time()
                for _ in range(calls):
                    out["last"] = call(s)
                return (time.process_time() - t0) / calls * 1000

        cpu = timed(lambda s: rater.accruing_many(s, ids, at))
        result = {"cpu_ms": cpu, "total": sum(a.total for a in out["last"].values())}
        if hasattr(funds, "Figures"):  # a funds rule for every tenant: on the exact figures, and on a ceiling first

            def rule(bal: int, acc: int) -> str | None:  # may each start work of 1 a GPU-hour
                return funds.refusal(Terms(0), bal, acc, 1_000_000, "CNY")

            def on_exact(s: Session) -> list:
                return [rule(*f) for f in funds.figures_many(s, ids, at).values()]

            def ceiling_first(s: Session) -> list:
                figs = funds.Figures(s, ids, at)
                return [figs.judge(t, rule) for t in ids]

            result |= {"rule_exact_cpu_ms": timed(on_exact), "rule_ceiling_first_cpu_ms": timed(ceiling_first)}
            assert out["last"] == [None] * len(ids)  # every tenant well funded: the ceiling decides
        w.db.dispose()
        return result
    finally:
        if drop is not None:
            drop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tenants", type=int, default=50)
    ap.add_argument("--allocations", type=int, default=8, help="per tenant, all running")
    ap.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--calls", type=int, default=20, help="per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", type=Path, help="another checkout's src: the baseline, rounds interleaved")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one round, as JSON (a --compare child)
    args = ap.parse_args()
    shape = [str(args.tenants), str(args.allocations), args.db, str(args.calls)]
    if args.one:
        print(json.dumps(measure(args.tenants, args.allocations, args.db, args.calls)))
        return
    srcs = {"this checkout": ROOT / "src"} | ({str(args.compare): args.compare.resolve()} if args.compare else {})
    runs: dict[str, list[dict]] = {k: [] for k in srcs}
    for _ in range(args.rounds):
        for label, src in srcs.items():
            cmd = [sys.executable, __file__, "--one", "--tenants", shape[0], "--allocations", shape[1], "--db", shape[2]]
            env = os.environ | {"PYTHONPATH": f"{src}:{ROOT}"}
            done = subprocess.run(cmd + ["--calls", shape[3]], env=env, capture_output=True, text=True, check=True)
            runs[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"accruing_many of {args.tenants} tenants x {args.allocations} allocations ({args.db}), CPU ms per call:")
    median = {}
    for label, rs in runs.items():
        median[label] = statistics.median(r["cpu_ms"] for r in rs)
        each = ", ".join(f"{r['cpu_ms']:.2f}" for r in rs)
        print(f"  {label:<40} {median[label]:7.2f}  ({each})")
    for key, what in (("rule_exact_cpu_ms", "on the exact figures"), ("rule_ceiling_first_cpu_ms", "on a ceiling first")):
        rs = [r[key] for r in runs["this checkout"] if key in r]
        if rs:
            print(
                f"  a funds rule for every tenant, {what:<21} {statistics.median(rs):7.2f}  ({', '.join(f'{x:.2f}' for x in rs)})"
            )
    if args.compare:
        totals = {r["total"] for rs in runs.values() for r in rs}
        assert len(totals) == 1, f"the two checkouts disagree on the figures: {totals}"
        print(
            f"  same figures in both; this checkout / {args.compare}: {median['this checkout'] / median[str(args.compare)]:.2f}x"
        )


if __name__ == "__main__":
    main()
