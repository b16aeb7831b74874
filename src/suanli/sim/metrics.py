"""The paper's curves from a fill run's per-pod samples (FGD_PROTOCOL.md section 4).

Every sample is binned by arrived demand in whole percent of capacity (Python's
``round``, i.e. half to even, as the reference analysis script); a column is the mean
over its samples, or over the neighbouring +-1 % samples if it has none.
"""

from __future__ import annotations

import numpy as np

from suanli.sim.fill import FillRun

COLUMNS = range(0, 131)


def _binned(arrived_pct: np.ndarray, values: np.ndarray, decimals: int | None) -> dict[str, float]:
    bins = np.round(arrived_pct)  # NumPy rounds half to even, like Python's round()
    out: dict[str, float] = {}
    for c in COLUMNS:
        sel = bins == c
        if not sel.any():
            sel = np.abs(bins - c) <= 1
        if sel.any():
            mean = float(values[sel].mean())
            out[str(c)] = round(mean, decimals) if decimals is not None else mean
    return out


def arrived_percent(run: FillRun) -> np.ndarray:
    return 100.0 * run.arrived / run.total_gpu_milli


def alloc_ratio(run: FillRun) -> dict[str, float]:
    """Column -> mean GPU allocation ratio (% of capacity)."""
    used_pct = np.round(100.0 * run.used / run.total_gpu_milli, 2)
    return _binned(arrived_percent(run), used_pct, 2)


def frag_amount(run: FillRun) -> dict[str, float]:
    """Column -> fragmented GPU milli as % of capacity."""
    frag = np.round(run.frag, 2)
    amount = _binned(arrived_percent(run), frag, None)
    return {c: round(100.0 * v / run.total_gpu_milli, 2) for c, v in amount.items()}


def frag_ratio(run: FillRun) -> dict[str, float]:
    """Column -> fragmented share of the idle GPU milli, in %."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(run.idle > 0, np.round(100.0 * np.round(run.frag, 2) / run.idle, 2), 0.0)
    return {c: round(v, 2) for c, v in _binned(arrived_percent(run), ratio, None).items()}


def summary(run: FillRun) -> dict:
    """The JSON object ``suanli sim fill --json`` prints."""
    return {
        "policy": run.policy,
        "seed": run.seed,
        "tune": run.tune,
        "pods": run.pods,
        "total_gpus": run.total_gpu_milli // 1000,
        "alloc_ratio": alloc_ratio(run),
        "frag_amount": frag_amount(run),
        "frag_ratio": frag_ratio(run),
        "failed_pods": sum(run.failed.values()),
        "migrations": run.migrations,
        "migrated_gpu_milli": run.migrated_milli,
        "migration_plans": run.plans,
        "failed_by_reason": dict(run.failed),
        "failed_by_shape": {f"cpu={c},milli={m},gpus={g}": n for (c, m, g), n in run.failed_shapes.most_common()},
        "wall_seconds": round(run.wall_seconds, 3),
    }
