"""Could this request ever run here? Judged once, at submission, on an empty cluster.

``never_fits(nodes, req)`` runs the scheduler's own filters (``feasible_mask``) and
gang planner (``gang.plan_gang``) against an *empty* copy of the inventory: every
node schedulable, nothing allocated. If even then the request (``req.nodes``
members on distinct nodes) cannot be placed, no amount of waiting helps, and the
answer names the first limit it runs into and the largest value that would fit
("no H100 node has 999999 GiB of memory; the largest has 2 TiB"). ``None`` means
it fits an empty cluster, so it waits only for capacity to free up.

Filters are walked in the scheduler's order (GPU model, GPU count, CPU, memory,
then the gang's node count), each limit taken over the nodes that passed the
filters before it, so the largest value named is one that would really fit
together with the rest of the request. Requests carry no hard topology
constraint (NVLink islands and IB leaves are preferences of the gang planner,
``gang``), so topology never makes a request infeasible.

A request pinned to nodes (``Request.pin_nodes``) is judged against those nodes
only: a name that is not registered is refused by name, and otherwise the same
walk runs over the pinned nodes, its answer prefixed with them ("pinned to
a100-0: at most 8 × GPU per node; 9 never fit on one node").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from suanli.scheduler import gang
from suanli.scheduler.framework import feasible_mask
from suanli.scheduler.model import Node, Request
from suanli.scheduler.policies.first_fit import FirstFit
from suanli.scheduler.state import ClusterState


def mib_text(mib: int) -> str:
    """Memory for a person: ``2 TiB``, ``64 GiB``, ``1536 MiB``."""
    if mib and mib % (1024 * 1024) == 0:
        return f"{mib // (1024 * 1024)} TiB"
    if mib and mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib} MiB"


def cpu_text(milli: int) -> str:
    return f"{milli / 1000:g} CPUs"


def fits_empty(nodes: Sequence[Node], req: Request) -> bool:
    """Whether the scheduler places ``req`` (all ``req.nodes`` members) on an empty
    cluster of ``nodes``: the gang planner on a fresh ``ClusterState``."""
    if not nodes:
        return False
    return gang.plan_gang(ClusterState(nodes), FirstFit(), req) is not None


def never_fits(nodes: Sequence[Node], req: Request) -> str | None:
    """Why ``req`` can never be placed on ``nodes`` (the limit and the largest value
    that fits), or None if an empty copy of the cluster holds it."""
    if not nodes:
        return "no nodes are registered"
    return never_fits_in(ClusterState(nodes), req)


def never_fits_in(state: ClusterState, req: Request) -> str | None:
    """``never_fits`` against an empty ``ClusterState`` built once (judging many
    requests against one inventory); ``state`` must hold no allocation."""
    if not state.num_nodes:
        return "no nodes are registered"
    if req.pin_nodes:
        return _never_fits_pinned(state, req)
    member = replace(req, nodes=1)
    fit = feasible_mask(state, member)
    if int(fit.sum()) >= req.nodes:
        return None
    mask = np.ones(state.num_nodes, dtype=bool)
    kind = "node"
    if req.gpu_models:
        mask &= state.model_mask(req.gpu_models)
        names = "/".join(sorted(req.gpu_models))
        if not mask.any():
            return f"no node has GPU model {names} (registered: {', '.join(state.models)})"
        kind = f"{names} node"
    if member.milli_per_gpu:
        most = int(state.gpu_count[mask].max())
        label = "/".join(sorted(req.gpu_models)) or "GPU"
        if most < member.gpus_used:
            return f"at most {most} × {label} per node; {member.gpus_used} never fit on one node"
        mask &= state.gpu_count >= member.gpus_used
        if member.gpus_used > 1:
            kind = f"{kind} with {member.gpus_used} GPUs"
        elif not req.gpu_models:
            kind = "GPU node"
    if not (state.cpu_total[mask] >= req.cpu_milli).any():
        most = int(state.cpu_total[mask].max())
        return f"no {kind} has {cpu_text(req.cpu_milli)}; the largest has {cpu_text(most)}"
    mask &= state.cpu_total >= req.cpu_milli
    if not (state.mem_total[mask] >= req.memory_mib).any():
        most = int(state.mem_total[mask].max())
        return f"no {kind} has {mib_text(req.memory_mib)} of memory; the largest has {mib_text(most)}"
    count = int(fit.sum())
    return f"a gang of {req.nodes} nodes never fits: at most {count} nodes can each hold one member"


def _never_fits_pinned(state: ClusterState, req: Request) -> str | None:
    """``never_fits_in`` for a pinned request: unknown names, else the walk over the
    pinned nodes alone (a cordon is no reason here: every node counts as empty)."""
    unknown = sorted(n for n in req.pin_nodes if n not in state.index)
    if unknown:
        return f"no node named {', '.join(unknown)} is registered (the request is pinned to it)"
    pinned = [state.nodes[state.index[n]] for n in sorted(req.pin_nodes)]
    why = never_fits_in(ClusterState(pinned), replace(req, pin_nodes=frozenset(), ignore_cordon=False))
    return None if why is None else f"pinned to {', '.join(n.name for n in pinned)}: {why}"


__all__ = ["cpu_text", "fits_empty", "mib_text", "never_fits", "never_fits_in"]
