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


def encode(
    columns: Sequence[str],
    ints: dict[str, np.ndarray],
    texts: dict[str, tuple[np.ndarray, list[str]]],
    int4: frozenset[str] = frozenset(),
) -> bytes:
    """``columns`` in table order; ``ints`` integer arrays (int8 columns, or int4 for
    the names in ``int4``); ``texts`` (codes, names) pairs for text columns."""
    n = next(iter(ints.values())).size if ints else next(iter(texts.values()))[0].size
    if n == 0:
        return HEADER + TRAILER
    tcols = [c for c in columns if c in texts]
    key = np.zeros(n, dtype=np.int64)  # one mixed-radix integer per combination of text values
    for c in tcols:
        key = key * max(len(texts[c][1]), 1) + texts[c][0].astype(np.int64)
    _, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(int(inverse.max()) + 2))
    parts = [HEADER]
    for g in range(bounds.size - 1):
        sel = order[bounds[g] : bounds[g + 1]]
        values = {c: texts[c][1][int(texts[c][0][sel[0]])].encode() for c in tcols}
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
