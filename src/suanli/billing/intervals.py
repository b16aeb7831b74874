"""GPU allocation intervals as arrays: what the rater meters and the spot market counts.

One row per allocation (one per node of a workload): ``[start, end)`` in epoch ms,
``milli`` = GPUs x milli per GPU, the plan its priority bills under and its bid.
``intervals`` builds them from the rows ``ALLOCATION_COLUMNS`` selects; a benchmark
may build ``Intervals`` directly.

Seen as of ``open_end`` (an estimate "if everything stopped then"), an interval is cut
there: one that starts after it is empty and bills nothing, one still held ends then.
An end stamped before its start (clocks of two servers that disagree) is read as
empty too: one bad row must never stop the rating of every other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from suanli.billing import metering
from suanli.billing.pricebook import PLANS
from suanli.billing.store import dt_to_ms
from suanli.db.models import Allocation

PLAN_OF_PRIORITY = {"on-demand": "on_demand", "spot": "spot", "reserved": "reserved"}


@dataclass
class Intervals:
    """GPU allocation intervals as arrays (what the store reads, or a benchmark makes)."""

    source_id: np.ndarray
    tenant_id: np.ndarray
    workload_kind: np.ndarray  # 0 instance, 1 job
    workload_id: np.ndarray
    model_code: np.ndarray
    milli: np.ndarray  # GPUs x milli per GPU
    plan_code: np.ndarray  # index into PLANS
    start_ms: np.ndarray
    end_ms: np.ndarray  # metering.OPEN while held
    models: list[str]
    max_price: np.ndarray | None = None  # spot bid per GPU-hour, micro-units; -1: none (None: no bids)


#: what ``intervals`` reads of an allocation
ALLOCATION_COLUMNS = (
    Allocation.id,
    Allocation.tenant_id,
    Allocation.job_id,
    Allocation.instance_id,
    Allocation.gpu_model,
    Allocation.gpu_indices,
    Allocation.milli_per_gpu,
    Allocation.priority,
    Allocation.max_price_micros,
    Allocation.started_at,
    Allocation.ended_at,
)


def clip(start_ms: np.ndarray, end_ms: np.ndarray, open_end: int = metering.OPEN) -> np.ndarray:
    """Ends as of ``open_end``: never after it, never before their start."""
    return np.maximum(np.minimum(end_ms, open_end), start_ms)


def intervals(allocs: list, open_end: int = metering.OPEN) -> Intervals:
    """Allocation rows (id, tenant_id, job_id, instance_id, gpu_model, gpu_indices,
    milli_per_gpu, priority, max_price_micros, started_at, ended_at) as arrays, as of
    ``open_end`` (``clip``)."""
    models = sorted({a.gpu_model for a in allocs} | {"-"})
    code = {m: i for i, m in enumerate(models)}
    n = len(allocs)
    start = np.array([dt_to_ms(a.started_at) for a in allocs], dtype=np.int64).reshape(n)
    end = np.array([dt_to_ms(a.ended_at) if a.ended_at else metering.OPEN for a in allocs], dtype=np.int64).reshape(n)
    return Intervals(
        source_id=np.array([a.id for a in allocs], dtype=np.int64).reshape(n),
        tenant_id=np.array([a.tenant_id for a in allocs], dtype=np.int64).reshape(n),
        workload_kind=np.array([0 if a.instance_id else 1 for a in allocs], dtype=np.int64).reshape(n),
        workload_id=np.array([a.instance_id or a.job_id for a in allocs], dtype=np.int64).reshape(n),
        model_code=np.array([code[a.gpu_model] for a in allocs], dtype=np.int64).reshape(n),
        milli=np.array([len(a.gpu_indices) * a.milli_per_gpu for a in allocs], dtype=np.int64).reshape(n),
        plan_code=np.array([PLANS.index(PLAN_OF_PRIORITY.get(a.priority, "on_demand")) for a in allocs], dtype=np.int64).reshape(
            n
        ),
        start_ms=start,
        end_ms=clip(start, end, open_end),
        models=models,
        max_price=np.array([-1 if a.max_price_micros is None else a.max_price_micros for a in allocs], dtype=np.int64).reshape(n),
    )
