"""One scheduling cycle, in the shape of the Kubernetes scheduling framework.

    filter   -> which nodes can host the request at all (vectorised over all nodes)
    score    -> the policy's integer score for each feasible node
    select   -> highest score; ties go to the node with the smallest seeded rank
    pick     -> the policy chooses GPU indices inside the chosen node
    reserve  -> bind the allocation into the cluster state (idempotent per key)
    unreserve-> give it back (idempotent per key)

The scheduler never mutates state while deciding, so a planner can ask "where would
this go?" (``place``) without side effects, and the live platform can write the
allocation to its database before calling ``reserve``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from suanli.scheduler.model import Allocation, Request
from suanli.scheduler.policy import Policy
from suanli.scheduler.state import ClusterState

#: Failure reasons, in the order filters are applied; a pod that fails is counted
#: under the first filter that leaves no node. ``pinned``: no node the request is
#: pinned to is schedulable now (it is cordoned, down, or not registered).
REASONS = ("unschedulable", "pinned", "gpu_model", "cpu", "memory", "gpu")


@dataclass(frozen=True)
class Placement:
    """The outcome of one cycle: an allocation, or the reason nothing fits."""

    allocation: Allocation | None
    reason: str | None = None
    score: int | None = None

    @property
    def ok(self) -> bool:
        return self.allocation is not None


def open_nodes(state: ClusterState, req: Request) -> np.ndarray:
    """Nodes that take new work from ``req`` at all: the schedulable ones (plus the
    cordoned ones for ``ignore_cordon``), narrowed to ``pin_nodes`` when pinned (the
    k8s NodeUnschedulable and NodeName filters)."""
    if not req.pin_nodes:
        return state.schedulable
    usable = state.schedulable | state.cordoned if req.ignore_cordon else state.schedulable
    return usable & state.node_mask(req.pin_nodes)


def feasible_mask(state: ClusterState, req: Request) -> np.ndarray:
    """Nodes that can host ``req`` now (the k8s NodeResourcesFit + GPU filters)."""
    mask = open_nodes(state, req) & (state.cpu_free >= req.cpu_milli) & (state.mem_free >= req.memory_mib)
    if req.gpu_models:
        mask &= state.model_mask(req.gpu_models)
    if req.milli_per_gpu:
        fitting = (state.gpu_free >= req.milli_per_gpu).sum(axis=1)
        mask &= fitting >= req.gpus_used
    return mask


def failure_reason(state: ClusterState, req: Request) -> str:
    """Name the first filter that rules out every node."""
    if req.pin_nodes:
        mask = open_nodes(state, req)
        if not mask.any():
            return "pinned"
    else:
        mask = state.schedulable.copy()
        if not mask.any():
            return "unschedulable"
    if req.gpu_models:
        mask &= state.model_mask(req.gpu_models)
        if not mask.any():
            return "gpu_model"
    mask &= state.cpu_free >= req.cpu_milli
    if not mask.any():
        return "cpu"
    mask &= state.mem_free >= req.memory_mib
    if not mask.any():
        return "memory"
    return "gpu"


def node_ranks(names: list[str], seed: int) -> np.ndarray:
    """A seeded tie-break priority per node (lower wins), as in the FGD protocol:
    sort nodes by name, then give the i-th a rank from a seeded permutation."""
    order = np.argsort(np.array(names, dtype=object), kind="stable")
    perm = np.random.default_rng(seed).permutation(len(names))
    ranks = np.empty(len(names), dtype=np.int64)
    ranks[order] = perm
    return ranks


class Scheduler:
    """Runs cycles of one policy over one cluster state."""

    def __init__(self, policy: Policy, state: ClusterState, seed: int = 0) -> None:
        self.policy = policy
        self.state = state
        self.ranks = node_ranks([n.name for n in state.nodes], seed)
        self._reserved: dict[Hashable, Allocation] = {}

    def observe(self, req: Request) -> None:
        """A request arrived: policies that learn the request mix online count it.
        Call once per request, not once per placement attempt, or work that waits
        (and is retried every pass) would weigh more than work that fits at once."""
        self.policy.observe(req)

    def place(self, req: Request) -> Placement:
        """Decide where ``req`` would go; changes nothing."""
        feasible = np.flatnonzero(feasible_mask(self.state, req))
        if feasible.size == 0:
            return Placement(None, failure_reason(self.state, req))
        if feasible.size == 1:
            best, score = int(feasible[0]), None
        else:
            scores = self.policy.scores(self.state, req, feasible)
            top = scores.max()
            tied = feasible[scores == top]
            best, score = int(tied[np.argmin(self.ranks[tied])]), int(top)
        gpus = self.policy.pick_gpus(self.state, req, best)
        node = self.state.nodes[best]
        return Placement(Allocation(node.name, gpus, req.milli_per_gpu, req.cpu_milli, req.memory_mib), score=score)

    def reserve(self, key: Hashable, alloc: Allocation) -> None:
        """Bind ``alloc`` under ``key``; reserving the same key again is a no-op."""
        if key in self._reserved:
            return
        self.state.bind(alloc)
        self._reserved[key] = alloc

    def unreserve(self, key: Hashable) -> None:
        """Release what ``key`` holds; unknown or already released keys are a no-op."""
        alloc = self._reserved.pop(key, None)
        if alloc is not None:
            self.state.unbind(alloc)

    def schedule(self, req: Request, key: Hashable | None = None) -> Placement:
        """A request that arrives and is placed at once or never (the fill
        experiment): observe, place, then reserve under ``key`` (default: a fresh key)."""
        self.observe(req)
        placement = self.place(req)
        if placement.allocation is not None:
            self.reserve(key if key is not None else object(), placement.allocation)
        return placement

    @property
    def reservations(self) -> Mapping[Hashable, Allocation]:
        """What is reserved now, by key (a read-only view)."""
        return MappingProxyType(self._reserved)
