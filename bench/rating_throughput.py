"""Rating throughput: N usage intervals metered, rated and posted to the ledger.

    .venv/bin/python bench/rating_throughput.py [--n 1000000] [--db pg|sqlite] [--naive 1000] [--workers 2]

The fast path is the production code (``rater.rate_gpu_intervals`` + ``posting.post``:
NumPy rating, binary COPY / executemany staging, one INSERT ... ON CONFLICT per batch,
one ledger entry per tenant per batch). The baseline is what a first implementation
does: a Python loop with Decimal per interval, then per record a duplicate check, an
INSERT of the usage row and of a ledger entry with its two postings, one transaction
each. The baseline runs on ``--naive`` intervals of the same set (it would take hours
on all of them) and is scaled linearly; both run in this process, on the same
database server, so the ratio compares like with like. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
from sqlalchemy import create_engine, text

from suanli.billing import metering, rater
from suanli.billing.pricebook import PLANS, default_book
from suanli.db.models import Tenant
from suanli.db.session import Database

PG = os.environ.get("SUANLI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
MODELS = ["H100", "RTX4090", "A100-80G", "Ascend-910B", "H20"]
DAY_MS = 86_400_000


def make_intervals(n: int, tenants: int, seed: int = 0, first_id: int = 1) -> rater.Intervals:
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 30 * DAY_MS, n, dtype=np.int64)
    dur = rng.integers(1_000, 1_800_000, n, dtype=np.int64)  # 1 s .. 30 min
    return rater.Intervals(
        source_id=np.arange(first_id, first_id + n, dtype=np.int64),
        tenant_id=rng.integers(1, tenants + 1, n, dtype=np.int64),
        workload_kind=rng.integers(0, 2, n, dtype=np.int64),
        workload_id=rng.integers(1, 100_000, n, dtype=np.int64),
        model_code=rng.integers(0, len(MODELS), n, dtype=np.int64),
        milli=rng.choice(np.array([500, 1000, 2000, 4000, 8000], dtype=np.int64), n),
        plan_code=rng.choice(np.array([0, 0, 0, 3], dtype=np.int64), n),  # a quarter spot
        start_ms=start,
        end_ms=start + dur,
        models=list(MODELS),
    )


def naive(db: Database, iv: rater.Intervals, cutoff: int, run_id: str) -> int:
    """Row by row: Decimal arithmetic, a check and four INSERTs per record, a commit each."""
    book = default_book()
    posted = 0
    for k in range(iv.source_id.size):
        t0, t1 = int(iv.start_ms[k]), int(iv.end_ms[k])
        p = t0 // 3_600_000 * 3_600_000
        while p < t1:
            a, b = max(p, t0), min(p + 3_600_000, t1)
            units = -(-(b - t0) // 6000) - -(-(a - t0) // 6000)
            if units > 0:
                plan = PLANS[int(iv.plan_code[k])]
                price = Decimal(book.hourly(MODELS[int(iv.model_code[k])], plan, 0))
                amount = int(
                    (Decimal(units * 6) * Decimal(int(iv.milli[k])) * price / 3_600_000).quantize(Decimal(1), ROUND_HALF_UP)
                )
                sid, tid = int(iv.source_id[k]), int(iv.tenant_id[k])
                with db.transaction() as s:
                    if (
                        s.execute(
                            text("SELECT 1 FROM billing_usage WHERE kind='gpu' AND source_id=:s AND period_ms=:p"),
                            {"s": sid, "p": p},
                        ).first()
                        is None
                    ):
                        s.execute(
                            text(
                                "INSERT INTO billing_usage (tenant_id, kind, source_id, period_ms, workload_kind, workload_id, gpu_model, plan, "
                                "start_ms, end_ms, quantity, billed_seconds, unit_price, amount, currency, price_version, run_id) VALUES "
                                "(:t, 'gpu', :s, :p, 'job', 0, :m, :pl, :a, :b, :q, :bs, :up, :am, 'CNY', 1, :r)"
                            ),
                            {
                                "t": tid,
                                "s": sid,
                                "p": p,
                                "m": MODELS[int(iv.model_code[k])],
                                "pl": plan,
                                "a": a,
                                "b": b,
                                "q": int(iv.milli[k]),
                                "bs": units * 6,
                                "up": int(price),
                                "am": amount,
                                "r": run_id,
                            },
                        )
                        eid = s.execute(
                            text(
                                "INSERT INTO billing_entries (key, kind, tenant_id, memo, created_at) VALUES (:k, 'charge', :t, '', CURRENT_TIMESTAMP) RETURNING id"
                            ),
                            {"k": f"naive:{sid}:{p}", "t": tid},
                        ).scalar()
                        s.execute(
                            text("INSERT INTO billing_postings (entry_id, account, amount) VALUES (:e, :a, :v)"),
                            {"e": eid, "a": f"tenant:{tid}:prepaid", "v": amount},
                        )
                        s.execute(
                            text("INSERT INTO billing_postings (entry_id, account, amount) VALUES (:e, 'revenue:gpu', :v)"),
                            {"e": eid, "v": -amount},
                        )
                        posted += 1
            p += 3_600_000
    return posted


def fresh(kind: str, tmp: str) -> tuple[Database, callable]:
    if kind == "sqlite":
        path = os.path.join(tmp, f"bench-{uuid.uuid4().hex[:6]}.db")
        return Database(f"sqlite:///{path}"), lambda: os.path.exists(path) and os.remove(path)
    name = f"suanli_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    return Database(PG.rsplit("/", 1)[0] + "/" + name), drop


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--db", choices=["pg", "sqlite"], default="pg")
    ap.add_argument("--naive", type=int, default=1_000, help="intervals for the row-by-row baseline")
    ap.add_argument("--batch", type=int, default=125_000)
    ap.add_argument("--tenants", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2, help="parallel posting connections (PostgreSQL)")
    args = ap.parse_args(argv)
    db, drop = fresh(args.db, "/tmp")
    try:
        db.migrate()
        with db.transaction() as s:
            s.add_all([Tenant(name=f"bench-{i}") for i in range(args.tenants)])
        with db.sessions() as s:
            from suanli.billing.price_versions import ensure_book, versions

            ensure_book(s)
            s.commit()
            books = versions(s)
        iv = make_intervals(args.n, args.tenants)
        cutoff = 31 * DAY_MS
        capacity = {i: 64_000 for i in range(len(MODELS))}
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        recs = rater.rate_gpu_intervals(iv, books, cutoff, 0, metering.DEFAULT_PERIOD_MS, capacity)
        t_rate, c_rate = time.perf_counter() - t0, time.process_time() - c0
        from suanli.billing.posting import post

        res = post(db, recs, "bench", args.batch, workers=args.workers)
        t_fast, c_fast = time.perf_counter() - t0, time.process_time() - c0
        t2 = time.perf_counter()
        again = post(db, recs, "bench-rerun", args.batch, workers=args.workers)  # idempotence at scale: nothing new
        t_again = time.perf_counter() - t2
        sample = make_intervals(args.naive, args.tenants, seed=1, first_id=10**9)
        t1 = time.perf_counter()
        n_naive = naive(db, sample, cutoff, "naive")
        t_naive = time.perf_counter() - t1
        naive_scaled = t_naive / args.naive * args.n
        with db.sessions() as s:
            trial = s.execute(text("SELECT COALESCE(SUM(amount), 0) FROM billing_postings")).scalar()
            charged = s.execute(
                text("SELECT COALESCE(SUM(amount), 0) FROM billing_postings WHERE account LIKE 'tenant:%'")
            ).scalar()
            usage = s.execute(text("SELECT COALESCE(SUM(amount), 0) FROM billing_usage")).scalar()
        out = {
            "db": args.db,
            "intervals": args.n,
            "records": len(recs),
            "inserted": res.inserted,
            "rerun_inserted": again.inserted,
            "rate_s": round(t_rate, 3),
            "rate_cpu_s": round(c_rate, 3),
            "rate_and_post_s": round(t_fast, 3),
            "rate_and_post_client_cpu_s": round(c_fast, 3),
            "rerun_s": round(t_again, 3),
            "workers": args.workers,
            "load_avg_1m_before": round(load, 2),
            "intervals_per_s": round(args.n / t_fast),
            "naive_intervals": args.naive,
            "naive_records": n_naive,
            "naive_s": round(t_naive, 3),
            "naive_scaled_s": round(naive_scaled, 1),
            "ratio": round(naive_scaled / t_fast, 1),
            "ledger_trial_balance": int(trial),
            "ledger_equals_usage": int(charged) == int(usage),
            "cpus": os.cpu_count(),
        }
        print(json.dumps(out))
        return out
    finally:
        db.dispose()
        drop()


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
