"""PostgreSQL binary COPY rows built with NumPy, no per-row Python.

Binary COPY frames every field with its length, so rows whose text columns have the
same values have one fixed layout. Rows are grouped by their text columns (a few
dozen combinations of kind, plan, GPU model...) and each group becomes one
structured array whose bytes are the COPY rows of that group.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)


def encode(columns: Sequence[str], ints: dict[str, np.ndarray], texts: dict[str, tuple[np.ndarray, list[str]]],
           int4: frozenset[str] = frozenset()) -> bytes:
    """``columns`` in table order; ``ints`` integer arrays (int8 columns, or int4 for
    the names in ``int4``); ``texts`` (codes, names) pairs for text columns."""
    n = next(iter(ints.values())).size if ints else next(iter(texts.values()))[0].size
    if n == 0:
        return HEADER + TRAILER
    tcols = [c for c in columns if c in texts]
    if tcols:
        codes = np.stack([texts[c][0].astype(np.int64) for c in tcols], axis=1)
        combos, inverse = np.unique(codes, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:
        combos, inverse = np.zeros((1, 0), dtype=np.int64), np.zeros(n, dtype=np.int64)
    parts = [HEADER]
    for g, combo in enumerate(combos):
        sel = np.flatnonzero(inverse == g)
        values = {c: texts[c][1][int(combo[k])].encode() for k, c in enumerate(tcols)}
        fields: list[tuple[str, str]] = [("nf", ">i2")]
        for c in columns:
            fields.append((f"l_{c}", ">i4"))
            if c in values:
                fields.append((c, f"S{len(values[c])}" if values[c] else "V0"))
            else:
                fields.append((c, ">i4" if c in int4 else ">i8"))
        rows = np.zeros(sel.size, dtype=np.dtype(fields))
        rows["nf"] = len(columns)
        for c in columns:
            if c in values:
                rows[f"l_{c}"] = len(values[c])
                if values[c]:
                    rows[c] = values[c]
            else:
                rows[f"l_{c}"] = 4 if c in int4 else 8
                rows[c] = ints[c][sel]
        parts.append(rows.tobytes())
    parts.append(TRAILER)
    return b"".join(parts)
