"""Posting rated usage records: one transaction per batch, exactly once.

Each batch is staged (PostgreSQL: binary COPY built straight from the NumPy
arrays; SQLite: executemany) and moved into ``billing_usage`` with
``INSERT ... SELECT ... ON CONFLICT (kind, source_id, period_ms) DO NOTHING
RETURNING``. Only the rows that were really inserted are summed into that batch's
ledger entries, in the same transaction. A re-run, a concurrent run, or a run after
a kill -9 therefore posts every record once: what committed is skipped by the
unique key, what did not commit never happened.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from suanli.billing import ledger
from suanli.billing.store import post_entry
from suanli.db.session import Database

COLUMNS = ("tenant_id", "kind", "source_id", "period_ms", "workload_kind", "workload_id", "gpu_model", "plan",
           "start_ms", "end_ms", "quantity", "billed_seconds", "unit_price", "amount", "price_version")
CODED = {"kind": "kinds", "workload_kind": "workload_kinds", "gpu_model": "models", "plan": "plans"}
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

    def __len__(self) -> int:
        return int(self.cols["amount"].size)

    def take(self, sel: slice | np.ndarray) -> Records:
        return Records({k: v[sel] for k, v in self.cols.items()}, self.kinds, self.workload_kinds, self.models,
                       self.plans, self.currency)


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


def _pg_binary(cols: dict[str, np.ndarray]) -> bytes:
    """PostgreSQL binary COPY of int8 columns, built with one structured array."""
    n = cols["amount"].size
    fields = [("nf", ">i2")]
    for c in COLUMNS:
        fields += [(f"l_{c}", ">i4"), (c, ">i8")]
    rows = np.empty(n, dtype=np.dtype(fields))
    rows["nf"] = len(COLUMNS)
    for c in COLUMNS:
        rows[f"l_{c}"] = 8
        rows[c] = cols[c]
    return b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0) + rows.tobytes() + struct.pack(">h", -1)


def _stage(s: Session, db: Database, recs: Records) -> None:
    s.execute(text(_stage_sql(db)))
    if db.is_sqlite:
        s.execute(text("DELETE FROM billing_stage"))
        rows = list(zip(*(recs.cols[c].tolist() for c in COLUMNS)))
        s.connection().exec_driver_sql(
            f"INSERT INTO billing_stage ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)
        return
    raw = s.connection().connection.driver_connection
    with raw.cursor() as cur, cur.copy(f"COPY billing_stage ({', '.join(COLUMNS)}) FROM STDIN WITH (FORMAT binary)") as cp:
        data = _pg_binary(recs.cols)
        buf = io.BytesIO(data)
        while chunk := buf.read(1 << 20):
            cp.write(chunk)


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
    sql = (f"INSERT INTO billing_usage ({', '.join(COLUMNS)}, currency, run_id) "
           f"SELECT {select_cols}, {cur_expr}, :run_id FROM billing_stage s WHERE true "
           f"ON CONFLICT (kind, source_id, period_ms) DO NOTHING RETURNING tenant_id, kind, amount")
    return [tuple(r) for r in s.execute(text(sql), params)]


def post(
    db: Database,
    recs: Records,
    run_id: str,
    batch: int = 50_000,
    after_batch: Callable[[int], None] | None = None,
) -> PostResult:
    """Post ``recs`` (sorted any way) in batches; each batch commits alone."""
    out = PostResult()
    n = len(recs)
    for b, lo in enumerate(range(0, n, batch)):
        part = recs.take(slice(lo, lo + batch))
        with db.transaction() as s:
            _stage(s, db, part)
            inserted = _move(s, part, run_id)
            if db.is_sqlite:
                s.execute(text("DELETE FROM billing_stage"))
            sums: dict[int, dict[str, int]] = {}
            for tenant, kind, amount in inserted:
                line = sums.setdefault(int(tenant), {})
                line[REVENUE[kind]] = line.get(REVENUE[kind], 0) + int(amount)
            for tenant, lines in sorted(sums.items()):
                e = ledger.charge(f"charge:{run_id}:{b}:{tenant}", tenant, lines, f"usage rated by run {run_id}")
                if e is not None and post_entry(s, e):
                    out.entries += 1
            out.inserted += len(inserted)
            out.skipped += len(part) - len(inserted)
            out.amount += sum(int(a) for _, _, a in inserted)
        out.batches += 1
        if after_batch is not None:
            after_batch(b)
    return out
