"""Which spot allocations to reclaim so that a higher-class request fits.

Only ``spot`` work is ever a victim; reserved and on-demand never are. A plan is
chosen per node and then across nodes:

* ``least_lost_work`` (Suanli's default): the victim set whose eviction loses the
  fewest GPU-seconds, then the fewest victims, then the node's seeded rank. What an
  eviction loses is the victim's unsaved progress (work since its last checkpoint)
  plus ``eviction_cost``, a fixed charge per victim for the restart every eviction
  forces (reload the checkpoint, queue again). Without that charge the planner
  prefers several just-checkpointed victims to one, and in the replay of the
  openb default trace the extra evictions cost more than they saved
  (BENCHMARKS.md, "Scheduler in time"). Exact over
  all subsets when a node holds few spot allocations, greedy (cheapest first,
  then dropping victims that turn out unnecessary) otherwise.
* ``lowest_priority_first``: the usual rule of Slurm, Kueue and kube-scheduler:
  lowest class first, the most recently started first among equals; across
  nodes the lowest top victim class, then the fewest victims, then the latest
  start. Kept as the baseline the default is measured against.

Plans are evaluated on a copy of one node's free-resource row: the cluster state
is never mutated to evaluate a plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from suanli.scheduler.framework import open_nodes
from suanli.scheduler.model import Allocation, PriorityClass, Request
from suanli.scheduler.state import ClusterState

EXACT_LIMIT = 8  # subsets of up to 2^8 victims per node are searched exhaustively
EVICTION_COST = 300.0  # GPU-seconds charged per victim (see the module docstring)


@dataclass(frozen=True)
class Candidate:
    """A running allocation that may be evicted."""

    key: Hashable
    allocation: Allocation
    priority: PriorityClass
    lost_work: float  # GPU-seconds since its last checkpoint, if evicted now
    started_at: float = 0.0


@dataclass(frozen=True)
class PreemptionPlan:
    node: str
    victims: tuple[Candidate, ...]

    @property
    def lost_work(self) -> float:
        return sum(v.lost_work for v in self.victims)


class _NodeView:
    """One node's free resources as plain ints (a copy: evaluating a plan never
    touches the cluster state). Small enough that Python beats NumPy here."""

    def __init__(self, state: ClusterState, i: int, req: Request) -> None:
        self.free = [int(x) for x in state.gpu_free[i]]
        self.cpu, self.mem = int(state.cpu_free[i]), int(state.mem_free[i])
        self.req = req

    def fits_without(self, victims: Sequence[Candidate]) -> bool:
        req = self.req
        cpu, mem = self.cpu, self.mem
        free = self.free
        if req.milli_per_gpu:
            free = free.copy()
        for v in victims:
            a = v.allocation
            cpu += a.cpu_milli
            mem += a.memory_mib
            if req.milli_per_gpu:
                for g in a.gpu_indices:
                    free[g] += a.milli_per_gpu
        if cpu < req.cpu_milli or mem < req.memory_mib:
            return False
        return not req.milli_per_gpu or sum(f >= req.milli_per_gpu for f in free) >= req.gpus_used


def _least_lost(view: _NodeView, cands: list[Candidate], bound: tuple, eviction_cost: float) -> tuple | None:
    """Cheapest victim set on one node, if cheaper than ``bound`` (the best plan so far)."""
    cands = sorted(cands, key=lambda c: c.lost_work)
    if len(cands) <= EXACT_LIMIT:
        best = None
        for r in range(1, len(cands) + 1):
            for subset in itertools.combinations(cands, r):
                cost = (sum(c.lost_work for c in subset) + eviction_cost * r, r)
                limit = best[0] if best else bound
                if cost < limit and view.fits_without(subset):
                    best = (cost, subset)
        return best
    chosen: list[Candidate] = []
    for c in cands:
        chosen.append(c)
        if view.fits_without(chosen):
            break
    else:
        return None
    for c in sorted(chosen, key=lambda c: -c.lost_work):  # drop victims not needed after all
        rest = [v for v in chosen if v is not c]
        if view.fits_without(rest):
            chosen = rest
    return (sum(c.lost_work for c in chosen) + eviction_cost * len(chosen), len(chosen)), tuple(chosen)


def _lowest_priority(view: _NodeView, cands: list[Candidate], bound: tuple, eviction_cost: float) -> tuple | None:
    chosen: list[Candidate] = []
    for c in sorted(cands, key=lambda c: (c.priority.rank, -c.started_at)):
        chosen.append(c)
        if view.fits_without(chosen):
            # kube-scheduler's node order: lowest top victim class, fewest victims, latest start
            return (max(v.priority.rank for v in chosen), len(chosen), -max(v.started_at for v in chosen)), tuple(chosen)
    return None


STRATEGIES = {"least_lost_work": _least_lost, "lowest_priority_first": _lowest_priority}


def plan_preemption(
    state: ClusterState,
    req: Request,
    running: Sequence[Candidate],
    ranks: np.ndarray,
    strategy: str = "least_lost_work",
    eviction_cost: float = EVICTION_COST,
) -> PreemptionPlan | None:
    """The best plan to fit ``req`` by evicting lower-class spot work, or None."""
    choose = STRATEGIES[strategy]
    by_node: dict[int, list[Candidate]] = {}
    for c in running:
        if c.priority is PriorityClass.SPOT and c.priority.rank < req.priority.rank:
            by_node.setdefault(state.index[c.allocation.node], []).append(c)
    model_ok = state.model_mask(req.gpu_models) & open_nodes(state, req)
    best = None
    for i, cands in by_node.items():
        if not model_ok[i]:
            continue
        view = _NodeView(state, i, req)
        if not view.fits_without(cands):
            continue  # not even evicting everything would do
        found = choose(view, cands, best[0] if best else (math.inf,), eviction_cost)
        if found is not None:
            cost = (*found[0], int(ranks[i]))
            if best is None or cost < best[0]:
                best = (cost, PreemptionPlan(state.nodes[i].name, found[1]))
    return None if best is None else best[1]
