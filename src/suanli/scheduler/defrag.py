"""Defragmentation: move a few fractional allocations so a multi-GPU request fits.

A cluster at high load often has the GPU milli a pending ``gpu_count = g`` request
needs, scattered as slivers: every node has fewer than g fully free GPUs because
small shared workloads sit on the others. Moving those shares onto GPUs that are
already partly used elsewhere frees whole GPUs. The planner answers "which moves,
and how few?":

1. candidates -> nodes of an allowed model, schedulable, with enough GPUs, where
                 the fully free GPUs plus the GPUs holding only migratable shares
                 reach g (vectorised over all nodes with ``MovableSet``'s arrays).
2. cost       -> per node, clear the GPUs with the fewest shares first; the node's
                 cost is the number of shares on them. Nodes are tried cheapest
                 first (ties: fewer milli moved, then node order); a node whose
                 cost exceeds ``max_moves`` is never tried.
3. simulate   -> on a ``state.copy()``, exactly in the order the plan will be
                 applied: for each share (largest first, first-fit decreasing)
                 unbind it, then bind it at its tightest fit (least milli left on
                 the destination GPU) on a schedulable node of the same GPU model,
                 never on the GPUs reserved for the request; finally bind the
                 request. The first node whose simulation succeeds gives the plan.

So applying a plan in order (``apply_plan``) succeeds on the state it was planned
on. Only fractional allocations (less than one GPU) move; a share keeps its GPU
model because an ``Allocation`` does not say which models its workload accepts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from suanli.scheduler.framework import Scheduler
from suanli.scheduler.model import MILLI_PER_GPU, Allocation, Request
from suanli.scheduler.state import ClusterState, OverAllocation


@dataclass(frozen=True)
class Migration:
    """Move the workload ``key`` from ``old`` to ``new``."""

    key: Hashable
    old: Allocation
    new: Allocation


@dataclass(frozen=True)
class DefragPlan:
    """Migrations to apply in order, then the request's own allocation."""

    migrations: tuple[Migration, ...]
    allocation: Allocation

    @property
    def moves(self) -> int:
        return len(self.migrations)


class MovableSet(Mapping[Hashable, Allocation]):
    """Migratable fractional allocations by key, indexed by (node, GPU).

    Kept incrementally by the caller (``add`` when a share is placed, ``discard``
    when it ends), so a planning call reads per-GPU totals from arrays instead of
    scanning every allocation.
    """

    def __init__(self, state: ClusterState, items: Mapping[Hashable, Allocation] | None = None) -> None:
        self.index = state.index
        shape = state.gpu_free.shape
        self.milli = np.zeros(shape, np.int64)  # movable milli per GPU slot
        self.count = np.zeros(shape, np.int64)  # movable allocations per GPU slot
        self.cpu = np.zeros(shape, np.int64)  # their CPU, charged to their GPU
        self.mem = np.zeros(shape, np.int64)
        self._items: dict[Hashable, Allocation] = {}
        self._on: dict[tuple[int, int], dict[Hashable, None]] = {}
        for key, alloc in (items or {}).items():
            self.add(key, alloc)

    def __getitem__(self, key: Hashable) -> Allocation:
        return self._items[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def _charge(self, alloc: Allocation, sign: int) -> tuple[int, int]:
        slot = (self.index[alloc.node], alloc.gpu_indices[0])
        self.milli[slot] += sign * alloc.milli_per_gpu
        self.count[slot] += sign
        self.cpu[slot] += sign * alloc.cpu_milli
        self.mem[slot] += sign * alloc.memory_mib
        return slot

    def add(self, key: Hashable, alloc: Allocation) -> None:
        """Declare ``alloc`` (a share of one GPU) migratable under ``key``."""
        if len(alloc.gpu_indices) != 1 or not 0 < alloc.milli_per_gpu < MILLI_PER_GPU:
            raise ValueError(f"only fractional one-GPU allocations migrate, got {alloc}")
        self.discard(key)
        self._items[key] = alloc
        self._on.setdefault(self._charge(alloc, +1), {})[key] = None

    def discard(self, key: Hashable) -> None:
        alloc = self._items.pop(key, None)
        if alloc is not None:
            self._on[self._charge(alloc, -1)].pop(key)

    def on_gpu(self, node: int, gpu: int) -> list[Hashable]:
        return list(self._on.get((node, gpu), ()))


def _candidates(
    state: ClusterState, req: Request, movable: MovableSet, max_moves: int
) -> list[tuple[int, int, int, np.ndarray]]:
    """(moves, milli moved, node, GPUs to clear) for every node worth simulating,
    cheapest first."""
    g = req.gpu_count
    ok = state.schedulable & (state.gpu_count >= g) & (state.cpu_total >= req.cpu_milli)
    ok &= state.mem_total >= req.memory_mib
    if req.gpu_models:
        ok &= state.model_mask(req.gpu_models)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return []
    free = state.gpu_free[idx].astype(np.int64)
    used = state.gpu_total[idx].astype(np.int64) - free
    whole = free == MILLI_PER_GPU
    clearable = (used > 0) & (used == movable.milli[idx])
    need = g - whole.sum(axis=1)
    keep = (need <= clearable.sum(axis=1)) & (need <= max_moves)
    idx, need, clearable = idx[keep], need[keep], clearable[keep]
    if idx.size == 0:
        return []
    # Clear the GPUs with the fewest shares first, then the fewest milli.
    big = np.iinfo(np.int64).max // 4
    count = np.where(clearable, movable.count[idx], big)
    milli = np.where(clearable, movable.milli[idx], 0)
    order = np.lexsort((milli, count), axis=1)
    out = []
    for j, i in enumerate(idx):
        k = max(int(need[j]), 0)
        gpus = order[j, :k]
        moves = int(count[j, gpus].sum())
        if moves > max_moves:
            continue
        cpu_back = int(movable.cpu[i, gpus].sum())
        mem_back = int(movable.mem[i, gpus].sum())
        if state.cpu_free[i] + cpu_back < req.cpu_milli or state.mem_free[i] + mem_back < req.memory_mib:
            continue
        out.append((moves, int(milli[j, gpus].sum()), int(i), np.sort(gpus)))
    out.sort(key=lambda c: c[:3])
    return out


def _tightest(state: ClusterState, alloc: Allocation, model: int, avoid: tuple[int, np.ndarray]) -> Allocation | None:
    """The share ``alloc`` re-placed on the GPU it fits most tightly (least milli
    left), on a schedulable node of GPU model ``model``, never on ``avoid``'s GPUs."""
    nodes = state.schedulable & (state.model_id == model)
    nodes &= (state.cpu_free >= alloc.cpu_milli) & (state.mem_free >= alloc.memory_mib)
    slack = state.gpu_free.astype(np.int64) - alloc.milli_per_gpu
    slack[~nodes] = -1
    slack[avoid[0], avoid[1]] = -1
    slack = np.where(slack >= 0, slack, np.iinfo(np.int64).max)
    flat = int(np.argmin(slack))
    if slack.flat[flat] == np.iinfo(np.int64).max:
        return None
    node, gpu = divmod(flat, slack.shape[1])
    return Allocation(state.nodes[node].name, (gpu,), alloc.milli_per_gpu, alloc.cpu_milli, alloc.memory_mib)


def _simulate(
    state: ClusterState, req: Request, movable: MovableSet, node: int, clear: np.ndarray
) -> DefragPlan | None:
    trial = state.copy()
    whole = np.flatnonzero(trial.gpu_free[node] == MILLI_PER_GPU)
    target = np.sort(np.concatenate([whole, clear]))[: req.gpu_count]
    avoid = (node, target)
    keys = [k for gpu in clear for k in movable.on_gpu(node, int(gpu))]
    keys.sort(key=lambda k: -movable[k].milli_per_gpu)
    moves = []
    model = int(trial.model_id[node])
    for key in keys:
        old = movable[key]
        trial.unbind(old)
        new = _tightest(trial, old, model, avoid)
        if new is None:
            return None
        trial.bind(new)
        moves.append(Migration(key, old, new))
    request = Allocation(
        trial.nodes[node].name, tuple(int(g) for g in target), MILLI_PER_GPU, req.cpu_milli, req.memory_mib
    )
    try:
        trial.bind(request)
    except OverAllocation:
        return None
    return DefragPlan(tuple(moves), request)


def plan_defrag(
    state: ClusterState, req: Request, movable: Mapping[Hashable, Allocation], max_moves: int
) -> DefragPlan | None:
    """The cheapest plan (at most ``max_moves`` migrations) after which the
    whole-GPU request ``req`` fits on one node, or None. Changes nothing.

    ``movable`` holds the migratable shares by key (a ``MovableSet`` is used as is;
    any other mapping is indexed first, which costs a pass over it). A request that
    fits already gets a plan with no migrations.
    """
    if req.is_sharing or req.gpu_count < 1 or req.nodes != 1:
        raise ValueError("defragmentation plans for whole-GPU requests on one node")
    if max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    if not isinstance(movable, MovableSet) or movable.index is not state.index:
        movable = MovableSet(state, movable)
    for _, _, node, clear in _candidates(state, req, movable, max_moves):
        plan = _simulate(state, req, movable, node, clear)
        if plan is not None:
            return plan
    return None


def apply_plan(target: Scheduler | ClusterState, plan: DefragPlan, movable: MovableSet | None = None) -> None:
    """Apply the migrations in order (not the request's allocation: the caller binds
    or reserves that). On a ``Scheduler`` each move is unreserve + reserve of its key,
    keeping the reservations true. If a step fails (a stale plan), the moves done so
    far are undone and ``OverAllocation`` is raised: all or nothing. ``movable`` is
    updated to the new places when given.
    """
    if isinstance(target, Scheduler):
        held = target.reservations
        stale = [m.key for m in plan.migrations if held.get(m.key) != m.old]
        if stale:
            raise OverAllocation(f"stale defragmentation plan: {stale[0]!r} is not where the plan found it")

        def move(key: Hashable, src: Allocation, dst: Allocation) -> None:
            target.unreserve(key)
            try:
                target.reserve(key, dst)
            except OverAllocation:
                target.reserve(key, src)
                raise
    else:

        def move(key: Hashable, src: Allocation, dst: Allocation) -> None:
            target.unbind(src)
            try:
                target.bind(dst)
            except OverAllocation:
                target.bind(src)
                raise

    done: list[Migration] = []
    try:
        for m in plan.migrations:
            move(m.key, m.old, m.new)
            done.append(m)
    except OverAllocation:
        for m in reversed(done):
            move(m.key, m.new, m.old)
        raise
    if movable is not None:
        for m in plan.migrations:
            movable.add(m.key, m.new)
