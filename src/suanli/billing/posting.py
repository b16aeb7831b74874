"""Posting rated usage records: one transaction per batch, exactly once.

The fast path writes a whole batch straight into ``billing_usage`` (PostgreSQL:
binary COPY built from the NumPy arrays; SQLite: executemany) inside a savepoint,
and sums the batch's charges per tenant with NumPy. If any key of the batch is
already there (a re-run, or a run after a kill -9), the primary key refuses it, the
savepoint rolls back, and the batch goes the careful way: staged, then
``INSERT ... SELECT ... ON CONFLICT (kind, source_id, period_ms) DO NOTHING
RETURNING``, summing only the rows really inserted. Either way the ledger entries of
a batch commit in the same transaction as its records, so every record is charged
once: what committed is skipped by its key, what did not commit never happened.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg.errors import UniqueViolation
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from suanli.billing import ledger, pgcopy
from suanli.billing.store import post_entries
from suanli.db.session import Database

COLUMNS = (
    "tenant_id",
    "kind",
    "source_id",
    "period_ms",
    "workload_kind",
    "workload_id",
    "gpu_model",
    "plan",
    "start_ms",
    "end_ms",
    "quantity",
    "billed_seconds",
    "unit_price",
    "amount",
    "waived",
    "price_version",
)
CODED = {"kind": "kinds", "workload_kind": "workload_kinds", "gpu_model": "models", "plan": "plans"}
INT4 = frozenset({"tenant_id", "workload_id", "price_version"})  # Integer columns of billing_usage
REVENUE = {"gpu": "gpu", "storage": "storage", "transfer": "transfer"}


@dataclass
class Records:
    """Rated usage as int64 arrays; the ``CODED`` columns index the name lists."""

    cols: dict[str, np.ndarray]
    kinds: list[str]
    workload_kinds: list[str]
    models: list[str]
    plans: list[str]
    currency: dict[int, str]  # price version -> currency

    def __post_init__(self) -> None:
        if "waived" not in self.cols:  # only ``billing.debt`` waives a charge
            self.cols["waived"] = np.zeros(self.cols["amount"].size, np.int64)

    def __len__(self) -> int:
        return int(self.cols["amount"].size)

    def take(self, sel: slice | np.ndarray) -> Records:
        return Records(
            {k: v[sel] for k, v in self.cols.items()}, self.kinds, self.workload_kinds, self.models, self.plans, self.currency
        )


@dataclass
class PostResult:
    inserted: int = 0
    skipped: int = 0
    amount: int = 0
    batches: int = 0
    entries: int = 0


def _case(col: str, names: dict[int, str], prefix: str) -> tuple[str, dict]:
    """Codes back to names inside the INSERT ... SELECT (names are bound, not inlined)."""
    if not names:
        return "''", {}
    whens = " ".join(f"WHEN {int(i)} THEN :{prefix}{int(i)}" for i in names)
    return f"CASE s.{col} {whens} END", {f"{prefix}{int(i)}": n for i, n in names.items()}


def _stage_sql(db: Database) -> str:
    cols = ", ".join(f"{c} BIGINT" for c in COLUMNS)
    if db.is_sqlite:
        return f"CREATE TEMP TABLE IF NOT EXISTS billing_stage ({cols})"
    return f"CREATE TEMP TABLE IF NOT EXISTS billing_stage ({cols}) ON COMMIT DELETE ROWS"


def _names(recs: Records) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Text columns as (codes, names) for the direct path."""
    out = {c: (recs.cols[c], list(getattr(recs, attr))) for c, attr in CODED.items()}
    versions = sorted(recs.currency)
    pos = (
        np.searchsorted(np.array(versions, dtype=np.int64), recs.cols["price_version"])
        if versions
        else np.zeros(len(recs), np.int64)
    )
    out["currency"] = (pos, [recs.currency[v] for v in versions] or ["CNY"])
    return out


def _direct(s: Session, db: Database, recs: Records, run_id: str) -> bool:
    """Optimistic path: every row in one COPY (PostgreSQL) or executemany (SQLite)
    straight into billing_usage, inside a savepoint. A key already there (a re-run,
    a crashed run's committed batch) raises; the savepoint rolls back and the caller
    takes the conflict-skipping path. Either way a key is inserted once."""
    cols = list(COLUMNS) + ["currency", "run_id"]
    texts = _names(recs)
    texts["run_id"] = (np.zeros(len(recs), np.int64), [run_id])
    if db.is_sqlite:  # a 64 MiB page cache for this connection: the usage indexes outgrow the 2 MiB default
        s.connection().exec_driver_sql("PRAGMA cache_size = -65536")
    try:
        with s.begin_nested():
            if db.is_sqlite:
                # a column with one value in the whole batch goes into the SQL once, as a
                # quoted literal, instead of being bound on every row
                consts = {
                    c: texts[c][1][int(texts[c][0][0])]
                    for c in cols
                    if c in texts and len(recs) and bool((texts[c][0] == texts[c][0][0]).all())
                }
                per_row = [c for c in cols if c not in consts]
                values = [
                    recs.cols[c].tolist() if c not in texts else np.array(texts[c][1], dtype=object)[texts[c][0]].tolist()
                    for c in per_row
                ]
                marks = ", ".join("'" + consts[c].replace("'", "''") + "'" if c in consts else "?" for c in cols)
                s.connection().exec_driver_sql(
                    f"INSERT INTO billing_usage ({', '.join(cols)}) VALUES ({marks})", list(zip(*values))
                )
            else:
                data = pgcopy.encode(cols, {c: recs.cols[c] for c in cols if c not in texts}, texts, INT4)
                raw = s.connection().connection.driver_connection
                assert raw is not None  # the COPY path: PostgreSQL (psycopg) only
                with (
                    raw.cursor() as cur,
                    cur.copy(f"COPY billing_usage ({', '.join(cols)}) FROM STDIN WITH (FORMAT binary)") as cp,
                ):
                    for lo in range(0, len(data), 1 << 22):
                        cp.write(data[lo : lo + (1 << 22)])
        return True
    except (IntegrityError, UniqueViolation):
        return False


def _sums(recs: Records) -> list[tuple[int, str, int]]:
    """(tenant, kind, amount) per tenant and kind, exact int64 (no float weights)."""
    if len(recs) == 0:
        return []
    key = recs.cols["tenant_id"] * len(recs.kinds) + recs.cols["kind"]
    order = np.argsort(key, kind="stable")
    k = key[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    totals = np.add.reduceat(recs.cols["amount"][order], starts)
    return [(int(kk // len(recs.kinds)), recs.kinds[int(kk % len(recs.kinds))], int(t)) for kk, t in zip(k[starts], totals)]


def _stage(s: Session, db: Database, recs: Records) -> None:
    s.execute(text(_stage_sql(db)))
    if db.is_sqlite:
        s.execute(text("DELETE FROM billing_stage"))
        rows = list(zip(*(recs.cols[c].tolist() for c in COLUMNS)))
        s.connection().exec_driver_sql(
            f"INSERT INTO billing_stage ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", rows
        )
        return
    raw = s.connection().connection.driver_connection
    assert raw is not None  # the COPY path: PostgreSQL (psycopg) only
    with raw.cursor() as cur, cur.copy(f"COPY billing_stage ({', '.join(COLUMNS)}) FROM STDIN WITH (FORMAT binary)") as cp:
        cp.write(pgcopy.encode(COLUMNS, recs.cols, {}))


def _move(s: Session, recs: Records, run_id: str) -> list[tuple[int, str, int]]:
    """Stage -> billing_usage, skipping keys already there; returns what was inserted."""
    params: dict = {"run_id": run_id}
    exprs = {}
    for col, attr in CODED.items():
        exprs[col], p = _case(col, dict(enumerate(getattr(recs, attr))), col[:2] + "_")
        params.update(p)
    cur_expr, p = _case("price_version", recs.currency, "cu_")
    params.update(p)
    select_cols = ", ".join(exprs.get(c, f"s.{c}") for c in COLUMNS)
    sql = (
        f"INSERT INTO billing_usage ({', '.join(COLUMNS)}, currency, run_id) "
        f"SELECT {select_cols}, {cur_expr}, :run_id FROM billing_stage s WHERE true "
        f"ON CONFLICT (kind, source_id, period_ms) DO NOTHING RETURNING tenant_id, kind, amount"
    )
    return [tuple(r) for r in s.execute(text(sql), params)]


def _post_batch(db: Database, part: Records, run_id: str, b: int) -> tuple[int, int, int]:
    """One batch in one transaction: (records inserted, amount, ledger entries)."""
    with db.transaction() as s:
        if _direct(s, db, part, run_id):
            inserted, n_inserted = _sums(part), len(part)
        else:
            _stage(s, db, part)
            inserted = _move(s, part, run_id)
            n_inserted = len(inserted)
            if db.is_sqlite:
                s.execute(text("DELETE FROM billing_stage"))
        sums: dict[int, dict[str, int]] = {}
        for tenant, kind, amount in inserted:
            line = sums.setdefault(int(tenant), {})
            line[REVENUE[kind]] = line.get(REVENUE[kind], 0) + int(amount)
        entries = [
            e
            for t, lines in sorted(sums.items())
            if (e := ledger.charge(f"charge:{run_id}:{b}:{t}", t, lines, f"usage rated by run {run_id}")) is not None
        ]
        posted = post_entries(s, entries)
        return n_inserted, sum(int(a) for _, _, a in inserted), posted


def _retrying(fn: Callable[[], tuple[int, int, int]], attempts: int = 5) -> tuple[int, int, int]:
    """Concurrent runs whose batches overlap can deadlock on each other's uncommitted
    keys; the database aborts one transaction, which changed nothing, so try again."""
    for k in range(attempts):
        try:
            return fn()
        except (OperationalError, psycopg.OperationalError) as exc:  # raw psycopg errors come from COPY
            orig = getattr(exc, "orig", exc)
            code = getattr(orig, "sqlstate", None)
            if k == attempts - 1 or not (code in ("40P01", "40001") or "locked" in str(orig)):
                raise
            time.sleep(0.05 * (k + 1) * (1 + random.random()))
    raise AssertionError("unreachable")


def post(
    db: Database,
    recs: Records,
    run_id: str,
    batch: int = 50_000,
    after_batch: Callable[[int], None] | None = None,
    workers: int = 1,
) -> PostResult:
    """Post ``recs`` in batches; each batch commits alone. ``workers`` > 1 posts
    batches on parallel connections (PostgreSQL; batches have distinct keys)."""
    out = PostResult()
    parts = [(b, recs.take(slice(lo, lo + batch))) for b, lo in enumerate(range(0, len(recs), batch))]

    def one(item: tuple[int, Records]) -> tuple[int, int, int, int]:
        b, part = item
        n, amount, entries = _retrying(lambda: _post_batch(db, part, run_id, b))
        if after_batch is not None:
            after_batch(b)
        return len(part), n, amount, entries

    if workers > 1 and not db.is_sqlite and len(parts) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(one, parts))
    else:
        results = [one(p) for p in parts]
    for size, n, amount, entries in results:
        out.batches += 1
        out.inserted += n
        out.skipped += size - n
        out.amount += amount
        out.entries += entries
    return out
