"""Quotas as grants (seed 004's token factory: a GPU type and count, a time quota
in minutes, a QoS level) and the admission decision. Pure.

A tenant without grants is unlimited (quotas are opt-in). With grants, a request
must be covered by one unexpired grant whose model matches (``None`` = any model)
and whose QoS allows the request's priority; the grant's concurrent GPUs and GPU-
minute budget then decide: admit, queue (it would fit later, when the tenant's
other work ends) or reject (it never fits this grant). Every refusal says why in
words a tenant can act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from suanli import gpu_names

QOS_RANK = {"spot": 0, "on-demand": 1, "reserved": 2}


@dataclass(frozen=True)
class Grant:
    id: int
    tenant_id: int
    gpu_model: str | None  # None: any model
    max_gpu_milli: int  # concurrent GPUs x 1000
    gpu_minutes: int | None  # budget; None: unlimited
    qos: str  # highest priority class the grant admits
    expires_ms: int | None

    def covers_model(self, models: Sequence[str]) -> bool:
        if self.gpu_model is None:
            return True
        return len(models) > 0 and all(_same(m, self.gpu_model) for m in models)


@dataclass(frozen=True)
class Demand:
    tenant_id: int
    models: tuple[str, ...]  # allowed models; empty = any
    gpu_milli: int  # total over all nodes (2 nodes x 8 GPUs = 16000)
    priority: str


@dataclass(frozen=True)
class Decision:
    action: str  # admit | queue | reject
    reason: str = ""
    grant_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.action == "admit"


def _same(a: str, b: str) -> bool:
    """A grant for ``a100`` covers work on the ``A100-80G`` nodes: one rule, ``gpu_names``."""
    return gpu_names.same(a, b)


def _gpus(milli: int) -> str:
    return f"{milli / 1000:g}"


def admit(
    grants: Sequence[Grant], demand: Demand, in_use_milli: dict[int, int], used_minutes: dict[int, float], now_ms: int
) -> Decision:
    """``in_use_milli``/``used_minutes`` are per grant id: the tenant's running work
    and GPU-minutes consumed under each grant's model since the grant began."""
    mine = [g for g in grants if g.tenant_id == demand.tenant_id]
    if not mine:
        return Decision("admit")
    what = f"{_gpus(demand.gpu_milli)} x {'/'.join(demand.models) or 'any GPU'} ({demand.priority})"
    live = [g for g in mine if g.expires_ms is None or g.expires_ms > now_ms]
    if not live:
        return Decision(
            "reject", f"quota: every grant of this tenant has expired; ask the operator for a new grant to run {what}"
        )
    models = [g for g in live if g.covers_model(demand.models)]
    if not models:
        have = ", ".join(sorted({g.gpu_model or "any" for g in live}))
        return Decision("reject", f"quota: no grant covers {what}; this tenant's grants are for: {have}")
    rank = QOS_RANK.get(demand.priority, 1)
    qos = [g for g in models if QOS_RANK.get(g.qos, 1) >= rank]
    if not qos:
        return Decision(
            "reject",
            f"quota: the grants for this model allow QoS up to {max(models, key=lambda g: QOS_RANK.get(g.qos, 1)).qos}, not {demand.priority}",
        )
    queue_reasons: list[tuple[str, int]] = []
    reject_reasons: list[str] = []
    for g in sorted(qos, key=lambda g: (g.gpu_model is None, g.id)):  # specific grants first
        if demand.gpu_milli > g.max_gpu_milli:
            reject_reasons.append(
                f"grant {g.id} allows {_gpus(g.max_gpu_milli)} GPUs at once, the request asks {_gpus(demand.gpu_milli)}"
            )
            continue
        if g.gpu_minutes is not None and used_minutes.get(g.id, 0.0) >= g.gpu_minutes:
            reject_reasons.append(
                f"grant {g.id}'s GPU-minute budget is spent ({used_minutes.get(g.id, 0.0):.0f} of {g.gpu_minutes})"
            )
            continue
        busy = in_use_milli.get(g.id, 0)
        if busy + demand.gpu_milli > g.max_gpu_milli:
            queue_reasons.append(
                (
                    f"quota: {_gpus(busy)} of {_gpus(g.max_gpu_milli)} GPUs of grant {g.id} in use, "
                    f"the request asks {_gpus(demand.gpu_milli)}; it starts when they free up",
                    g.id,
                )
            )
            continue
        return Decision("admit", grant_id=g.id)
    if queue_reasons:
        return Decision("queue", queue_reasons[0][0], queue_reasons[0][1])
    return Decision("reject", "quota: " + "; ".join(reject_reasons))
