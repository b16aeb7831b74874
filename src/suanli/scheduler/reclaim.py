"""Spot reclaim planning: which spot work to give notice so waiting work can start.

This is the one recipe both the trace replay (``sim/replay.py``) and the live
control plane (``control/preempt.py``) run, so what the replay measures on traces
(BENCHMARKS.md, "Scheduler in time") is what production does:

1. **Who asks.** Waiting requests (``Claim``), highest class first, then oldest:
   the order the scheduler serves them. Only a request of a higher class than spot
   gets victims (``plan_preemption`` offers spot work to nothing else), and the
   callers leave out work that is already waiting for the notices it caused (the
   request waits for them to run out instead of choosing more victims meanwhile).
2. **Fits already: no plan.** A request with at least ``num_nodes`` nodes that can
   host one member now needs no eviction; the scheduling pass places it.
3. **One plan per missing node.** A gang of ``num_nodes`` members on distinct
   nodes that has only k feasible nodes gets ``num_nodes - k`` preemption plans,
   each on a node that neither a free node nor an earlier plan already gives. Each
   node is chosen by ``plan_preemption``'s cost (least lost work by default: the
   unsaved GPU-seconds of the victims plus a fixed charge per eviction), one at a
   time, without topology preference: the gang planner places the gang once the
   notices have run out.
4. **All or nothing.** If any missing node cannot be freed, the request gets no
   plan at all: a notice is final, and evicting spot work for a gang that still
   would not fit loses that work for nothing.
5. **No double booking.** A workload chosen as a victim for one request is not
   offered to later ones (all of its allocations leave the pool: evicting one
   member of a spot gang stops the whole gang). Without this, two requests could
   count on the same freed capacity.

Everything is pure: the cluster state is read, never changed (a plan for a later
request is made against the same state: victims only leave when their notice
expires), and no clock is read: a candidate carries the work it would lose, which
the caller computes from its own clock. ``plan_reclaim`` is the batch form (the
live control plane plans from one snapshot); the replay, which places work
between two requests' plans within one pass, calls it for one claim at a time and
drops what each plan uses with ``unclaimed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from suanli.scheduler.framework import feasible_mask
from suanli.scheduler.model import Request
from suanli.scheduler.preemption import Candidate, PreemptionPlan, plan_preemption
from suanli.scheduler.state import ClusterState

#: Maps a candidate's key to the (hashable) workload it belongs to (default: the key
#: itself). Keys are the callers' own: ``Any`` so a typed caller's function fits.
WorkloadOf = Callable[[Any], Any]


@dataclass(frozen=True)
class Claim:
    """A waiting request that may reclaim spot capacity: ``num_nodes`` members of
    ``request`` (its per-node part), each on its own node. ``key`` names it to the
    caller (it becomes ``ReclaimPlan.beneficiary``)."""

    key: Any  # hashable
    request: Request
    num_nodes: int = 1

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise ValueError("num_nodes must be >= 1")


@dataclass(frozen=True)
class ReclaimPlan:
    """What one beneficiary gets: one ``PreemptionPlan`` (node and victims) per node
    it lacks, in the order they were chosen, and the victims' workloads (each once,
    in the order first met) so the caller notices each workload once."""

    beneficiary: Any  # the claim's key
    plans: tuple[PreemptionPlan, ...]
    workloads: tuple[Any, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node for p in self.plans)

    @property
    def victims(self) -> tuple[Candidate, ...]:
        return tuple(v for p in self.plans for v in p.victims)

    @property
    def lost_work(self) -> float:
        return sum(p.lost_work for p in self.plans)


def _identity(key: Any) -> Any:
    return key


def plan_claim(
    state: ClusterState,
    claim: Claim,
    candidates: Sequence[Candidate],
    ranks: np.ndarray,
    strategy: str = "least_lost_work",
    workload_of: WorkloadOf | None = None,
) -> ReclaimPlan | None:
    """The plan for one claim (steps 2-4 of the module docstring), or None when it
    fits already or cannot be made whole by evicting ``candidates``."""
    workload_of = workload_of or _identity
    taken = set(np.flatnonzero(feasible_mask(state, claim.request)).tolist())
    if len(taken) >= claim.num_nodes:
        return None
    plans: list[PreemptionPlan] = []
    for _ in range(claim.num_nodes - len(taken)):
        offered = [c for c in candidates if state.index[c.allocation.node] not in taken]
        plan = plan_preemption(state, claim.request, offered, ranks, strategy)
        if plan is None:
            return None  # all or nothing
        taken.add(state.index[plan.node])
        plans.append(plan)
    workloads = dict.fromkeys(workload_of(v.key) for p in plans for v in p.victims)
    return ReclaimPlan(claim.key, tuple(plans), tuple(workloads))


def unclaimed(
    candidates: Iterable[Candidate], plans: Iterable[ReclaimPlan], workload_of: WorkloadOf | None = None
) -> list[Candidate]:
    """``candidates`` less every allocation of a workload some plan evicts, in order."""
    workload_of = workload_of or _identity
    gone = {w for p in plans for w in p.workloads}
    return [c for c in candidates if workload_of(c.key) not in gone]


def plan_reclaim(
    state: ClusterState,
    waiting: Iterable[Claim],
    candidates: Sequence[Candidate],
    ranks: np.ndarray,
    strategy: str = "least_lost_work",
    workload_of: WorkloadOf | None = None,
) -> list[ReclaimPlan]:
    """Plans for the claims in ``waiting`` (in priority order) that need and can get
    spot victims from ``candidates``, in that order; a workload one plan evicts is
    not offered to later claims.

    ``ranks`` is the scheduler's seeded node tie-break, ``strategy`` a key of
    ``preemption.STRATEGIES``. ``workload_of`` maps a candidate's key to its
    workload when one workload has several allocations (a gang member per node):
    then ``ReclaimPlan.workloads`` and the exclusion are per workload. Changes
    nothing: not ``state``, not the arguments."""
    pool = list(candidates)
    out: list[ReclaimPlan] = []
    for claim in waiting:
        plan = plan_claim(state, claim, pool, ranks, strategy, workload_of)
        if plan is not None:
            out.append(plan)
            pool = unclaimed(pool, [plan], workload_of)
    return out


__all__ = ["Claim", "ReclaimPlan", "WorkloadOf", "plan_claim", "plan_reclaim", "unclaimed"]
