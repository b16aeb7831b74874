"""The NumPy-built binary COPY rows read back exactly in PostgreSQL."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from suanli.billing.pgcopy import encode

pytestmark = pytest.mark.postgres


def test_binary_copy_round_trip(pg_url: str) -> None:
    rng = np.random.default_rng(3)
    n = 2_000
    ints = {"a": rng.integers(-(2**62), 2**62, n), "b": rng.integers(-(2**31), 2**31, n)}
    kinds, models = ["gpu", "storage", ""], ["H100", "RTX 4090", "昇腾 910B"]
    texts = {"k": (rng.integers(0, 3, n), kinds), "m": (rng.integers(0, 3, n), models)}
    data = encode(["a", "k", "b", "m"], ints, texts, int4=frozenset({"b"}))
    with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql")) as c:
        c.execute("CREATE TEMP TABLE t (a bigint, k varchar(10), b integer, m varchar(50))")
        with c.cursor() as cur:
            with cur.copy("COPY t FROM STDIN WITH (FORMAT binary)") as cp:
                cp.write(data)
            got = sorted(cur.execute("SELECT a, k, b, m FROM t").fetchall())
    want = sorted(
        zip(ints["a"].tolist(), [kinds[i] for i in texts["k"][0]], ints["b"].tolist(), [models[i] for i in texts["m"][0]])
    )
    assert got == want
