"""Gang placement: ``nodes x gpu_count`` placed all-or-nothing, leaf-aware.

A distributed job of N members is useless until all N run, and its step time is
set by its slowest link. So a gang is planned as one decision, not N cycles:

1. filter  -> nodes that can host one member (the ordinary ``feasible_mask``);
              fewer than N: no plan.
2. leaves  -> count feasible nodes per IB leaf. If some leaf holds N, use the
              tightest such leaf (fewest feasible nodes): best fit on leaves
              leaves the roomy leaves for bigger gangs. Otherwise span the fewest
              leaves: the largest leaves whole, and for the remainder the
              tightest leaf that covers it.
3. nodes   -> inside a leaf, nodes where a member fits one NVLink island first,
              then the policy's score, then the scheduler's seeded rank.
4. GPUs    -> ``pick_gpus_in_island`` for whole GPUs, the policy's pick otherwise.

Members go on distinct nodes (one member per node, as ``nodes x gpus_per_node``
says). ``plan_gang`` changes nothing; ``place_gang`` reserves every member or none:
if a reserve fails half way (a stale plan), the members reserved so far are
unreserved, so the state is exactly as before. ``bind_gang`` is the same on a bare
``ClusterState`` (the live scheduling pass: its reservations are database rows,
not ``Scheduler`` keys).

``plan_blind`` is the topology-blind baseline the benchmark compares against: the
ordinary scheduler placing the members one after another on a copy of the state.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from suanli.scheduler.framework import Scheduler, feasible_mask
from suanli.scheduler.model import Allocation, Request
from suanli.scheduler.policy import Policy
from suanli.scheduler.state import ClusterState
from suanli.scheduler.topology import Topology, fits_one_island, pick_gpus_in_island


@dataclass(frozen=True)
class GangPlan:
    """One allocation per member, in member order, and the leaves they use."""

    allocations: tuple[Allocation, ...]
    leaves: tuple[str, ...]

    @property
    def one_leaf(self) -> bool:
        return len(self.leaves) == 1


def member_of(req: Request) -> Request:
    """The per-node request of a gang (what one member asks of its node)."""
    return replace(req, nodes=1)


def choose_leaves(counts: np.ndarray, need: int, max_leaves: int | None = None) -> list[tuple[int, int]]:
    """(leaf id, members to place there) for a gang of ``need`` members, given the
    feasible nodes per leaf; empty if impossible within ``max_leaves`` leaves.

    One leaf if any leaf can hold the gang: the tightest one (fewest feasible nodes,
    then the lowest id). Else the k largest leaves for the smallest such k, the last
    of them swapped for the tightest leaf that still covers the remainder.
    """
    order = sorted(range(counts.size), key=lambda k: (-int(counts[k]), k))
    if counts.sum() < need:
        return []
    whole = [k for k in order if counts[k] >= need]
    if whole:
        tightest = min(whole, key=lambda k: (int(counts[k]), k))
        return [(tightest, need)]
    taken: list[tuple[int, int]] = []
    left = need
    for pos, k in enumerate(order):
        rest = order[pos:]
        covering = [j for j in rest if counts[j] >= left]
        if covering:
            last = min(covering, key=lambda j: (int(counts[j]), j))
            taken.append((last, left))
            break
        taken.append((k, int(counts[k])))
        left -= int(counts[k])
    if max_leaves is not None and len(taken) > max_leaves:
        return []
    return taken


def _ordered(state: ClusterState, policy: Policy, member: Request, idx: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Node indices ``idx`` best first: one-island fit, policy score, seeded rank."""
    scores = policy.scores(state, member, idx) if idx.size > 1 else np.zeros(idx.size, np.int64)
    island = fits_one_island(state, idx, member.gpu_count) if member.gpu_count >= 2 else np.ones(idx.size, bool)
    return idx[np.lexsort((ranks[idx], -scores, ~island))]


def plan_gang(
    state: ClusterState,
    policy: Policy,
    req: Request,
    ranks: np.ndarray | None = None,
    max_leaves: int | None = None,
) -> GangPlan | None:
    """Where the gang ``req`` (``req.nodes`` members) would go; changes nothing.

    ``ranks`` is the scheduler's seeded tie-break (``Scheduler.ranks``; default: node
    order). ``max_leaves=1`` makes "one IB leaf" a requirement instead of a preference.
    """
    member = member_of(req)
    ranks = np.arange(state.num_nodes) if ranks is None else ranks
    feasible = np.flatnonzero(feasible_mask(state, member))
    if feasible.size < req.nodes:
        return None
    topo = Topology.of(state.nodes)
    if req.nodes == 1:
        # A single node: leaves do not matter, the policy (plus island fit) decides.
        best = int(_ordered(state, policy, member, feasible, ranks)[0])
        return GangPlan((_allocation(state, policy, member, best),), (topo.leaf_name(state, state.nodes[best].name),))
    leaf_of = topo.leaf[feasible]
    counts = np.bincount(leaf_of, minlength=len(topo.leaves))
    chosen: list[int] = []
    names: list[str] = []
    for leaf, take in choose_leaves(counts, req.nodes, max_leaves):
        idx = feasible[leaf_of == leaf]
        chosen.extend(int(i) for i in _ordered(state, policy, member, idx, ranks)[:take])
        names.append(topo.leaves[leaf])
    if len(chosen) < req.nodes:
        return None
    return GangPlan(tuple(_allocation(state, policy, member, i) for i in chosen), tuple(sorted(names)))


def _allocation(state: ClusterState, policy: Policy, member: Request, node: int) -> Allocation:
    if member.is_sharing or not member.gpu_count:
        gpus = policy.pick_gpus(state, member, node)
    else:
        gpus = pick_gpus_in_island(state, node, member.gpu_count)
    return Allocation(state.nodes[node].name, gpus, member.milli_per_gpu, member.cpu_milli, member.memory_mib)


def bind_gang(
    state: ClusterState,
    policy: Policy,
    req: Request,
    ranks: np.ndarray | None = None,
    max_leaves: int | None = None,
) -> list[Allocation] | None:
    """Plan the gang ``req`` with ``plan_gang`` and bind every member into ``state``,
    all or nothing: the allocations in member order, or None (nothing fits) with
    ``state`` unchanged.

    A bind that fails (``OverAllocation``: a policy picked slots that are not free)
    unbinds the members bound so far and re-raises: that is a bug in the policy,
    not a full cluster, and the caller may retry with a fallback policy on the
    state as it was."""
    plan = plan_gang(state, policy, req, ranks, max_leaves)
    if plan is None:
        return None
    bound: list[Allocation] = []
    try:
        for alloc in plan.allocations:
            state.bind(alloc)
            bound.append(alloc)
    except Exception:
        for alloc in reversed(bound):
            state.unbind(alloc)
        raise
    return bound


def plan_blind(scheduler: Scheduler, req: Request) -> GangPlan | None:
    """The topology-blind baseline: the ordinary cycle places each member in turn on
    a copy of the state (so one member's node is full for the next); changes nothing."""
    if req.nodes == 1:
        placement = scheduler.place(req)
        if placement.allocation is None:
            return None
        leaf = Topology.of(scheduler.state.nodes).leaf_name(scheduler.state, placement.allocation.node)
        return GangPlan((placement.allocation,), (leaf,))
    state = scheduler.state.copy()
    probe = Scheduler(scheduler.policy, state)
    probe.ranks = scheduler.ranks
    member = member_of(req)
    allocs = []
    for _ in range(req.nodes):
        placement = probe.place(member)
        if placement.allocation is None:
            return None
        # Members need distinct nodes: mark the chosen node unschedulable on the copy.
        state.set_schedulable(placement.allocation.node, False)
        allocs.append(placement.allocation)
    topo = Topology.of(state.nodes)
    return GangPlan(tuple(allocs), tuple(sorted({topo.leaf_name(state, a.node) for a in allocs})))


def reserve_all(scheduler: Scheduler, keys: Sequence[Hashable], allocs: Sequence[Allocation]) -> bool:
    """Reserve ``allocs[i]`` under ``keys[i]`` for all i, or none: on the first
    failure, unreserve what this call reserved and return False."""
    done: list[Hashable] = []
    existing = scheduler.reservations
    try:
        for key, alloc in zip(keys, allocs, strict=True):
            if key in existing:
                raise ValueError(f"gang member key {key!r} is already reserved")
            scheduler.reserve(key, alloc)
            done.append(key)
    except (ValueError, KeyError):
        for key in reversed(done):
            scheduler.unreserve(key)
        return False
    return True


def member_keys(key: Hashable, count: int) -> list[tuple[Hashable, int]]:
    """Reservation keys of a gang's members: ``(key, 0) .. (key, count - 1)``."""
    return [(key, i) for i in range(count)]


def place_gang(
    scheduler: Scheduler,
    req: Request,
    key: Hashable,
    topology_aware: bool = True,
    max_leaves: int | None = None,
) -> GangPlan | None:
    """Plan the gang and reserve its members under ``member_keys(key, req.nodes)``,
    all or nothing. Returns the plan, or None with the state unchanged."""
    if topology_aware:
        plan = plan_gang(scheduler.state, scheduler.policy, req, scheduler.ranks, max_leaves)
    else:
        plan = plan_blind(scheduler, req)
    if plan is None or not reserve_all(scheduler, member_keys(key, req.nodes), plan.allocations):
        return None
    return plan


def unplace_gang(scheduler: Scheduler, key: Hashable, count: int) -> None:
    """Release every member of the gang ``key`` (idempotent, like ``unreserve``)."""
    for member in member_keys(key, count):
        scheduler.unreserve(member)
