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
                 the destination GPU) on a schedulable node of a GPU model the share accepts,
                 never on the GPUs reserved for the request; finally bind the
                 request. The first node whose simulation succeeds gives the plan.

So applying a plan in order (``apply_plan``) succeeds on the state it was planned
on. Only fractional allocations (less than one GPU) move; a share keeps its GPU
model unless the caller says which models its workload accepts (``MovableSet.add``'s
``models``; empty: any model), since an ``Allocation`` does not say.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
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
        #: Component-wise smallest share per GPU slot (milli, CPU, memory): ``_slot_screen``
        #: rejects a GPU whose smallest share fits nowhere, for the price of one array pass.
        self.least = np.full((3, *shape), np.iinfo(np.int64).max, np.int64)
        self._items: dict[Hashable, Allocation] = {}
        self.models: dict[Hashable, frozenset[str] | None] = {}
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

    def add(self, key: Hashable, alloc: Allocation, models: frozenset[str] | None = None) -> None:
        """Declare ``alloc`` (a share of one GPU) migratable under ``key``; ``models``
        are the GPU models it may move to (empty: any; None: only its current one).
        Re-adding a key keeps its models unless new ones are given."""
        if len(alloc.gpu_indices) != 1 or not 0 < alloc.milli_per_gpu < MILLI_PER_GPU:
            raise ValueError(f"only fractional one-GPU allocations migrate, got {alloc}")
        keep = self.models.get(key) if models is None else models
        self.discard(key)
        self._items[key] = alloc
        self.models[key] = keep
        slot = self._charge(alloc, +1)
        self._on.setdefault(slot, {})[key] = None
        self._refresh_least(slot)

    def discard(self, key: Hashable) -> None:
        alloc = self._items.pop(key, None)
        self.models.pop(key, None)
        if alloc is not None:
            slot = self._charge(alloc, -1)
            self._on[slot].pop(key)
            self._refresh_least(slot)

    def _refresh_least(self, slot: tuple[int, int]) -> None:
        shares = [(a.milli_per_gpu, a.cpu_milli, a.memory_mib) for a in map(self._items.__getitem__, self._on.get(slot, ()))]
        self.least[(slice(None), *slot)] = np.min(shares, axis=0) if shares else np.iinfo(np.int64).max

    def on_gpu(self, node: int, gpu: int) -> list[Hashable]:
        return list(self._on.get((node, gpu), ()))


def whole_gpu_hosts(state: ClusterState, req: Request) -> np.ndarray:
    """Indices of the nodes that could hold ``req`` once enough of their GPUs were
    cleared: schedulable, enough GPUs, CPU and memory in total, an allowed model."""
    ok = state.schedulable & (state.gpu_count >= req.gpu_count) & (state.cpu_total >= req.cpu_milli)
    ok &= state.mem_total >= req.memory_mib
    if req.gpu_models:
        ok &= state.model_mask(req.gpu_models)
    return np.flatnonzero(ok)


def _candidates(state: ClusterState, req: Request, movable: MovableSet, max_moves: int) -> list[tuple[int, int, int, np.ndarray]]:
    """(moves, milli moved, node, GPUs to clear) for every node worth simulating,
    cheapest first. Vectorised over nodes: the per-node cost is the sum of the
    ``need`` smallest share counts among its clearable GPUs."""
    g = req.gpu_count
    idx = whole_gpu_hosts(state, req)
    if idx.size == 0:
        return []
    free = state.gpu_free[idx].astype(np.int64)
    used = state.gpu_total[idx].astype(np.int64) - free
    clearable = (used > 0) & (used == movable.milli[idx]) & _slot_screen(state, movable, idx)
    need = np.maximum(g - (free == MILLI_PER_GPU).sum(axis=1), 0)
    keep = (need <= clearable.sum(axis=1)) & (need <= max_moves)
    idx, need, clearable = idx[keep], need[keep], clearable[keep]
    if idx.size == 0:
        return []
    # Clear the GPUs with the fewest shares first, then the fewest milli.
    big = np.iinfo(np.int64).max // 4
    count = np.where(clearable, movable.count[idx], big)
    milli = np.where(clearable, movable.milli[idx], 0)
    order = np.lexsort((milli, count), axis=1)
    taken = np.arange(order.shape[1])[None, :] < need[:, None]

    def total(a: np.ndarray) -> np.ndarray:
        return np.where(taken, np.take_along_axis(a, order, axis=1), 0).sum(axis=1)

    moves, moved = total(count), total(milli)
    cpu_ok = state.cpu_free[idx] + total(movable.cpu[idx]) >= req.cpu_milli
    mem_ok = state.mem_free[idx] + total(movable.mem[idx]) >= req.memory_mib
    keep = np.flatnonzero((moves <= max_moves) & cpu_ok & mem_ok)
    keep = keep[np.lexsort((idx[keep], moved[keep], moves[keep]))]
    return [(int(moves[j]), int(moved[j]), int(idx[j]), np.sort(order[j, : need[j]])) for j in keep]


def _prefix_top2(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each prefix of ``values`` (>= 0): its maximum, the position holding it and
    the largest value at any other position (-1 if none)."""
    n = values.size
    best = np.maximum.accumulate(values)
    record = np.ones(n, dtype=bool)
    record[1:] = best[1:] > best[:-1]
    where = np.maximum.accumulate(np.where(record, np.arange(n), 0))
    segment = np.cumsum(record) - 1
    big = int(values.max(initial=0)) + 2
    # The best of each run between records, the record itself left out.
    inside = np.maximum.accumulate(np.where(record, -1, values) + segment * big) - segment * big
    before = np.where(where > 0, best[np.maximum(where - 1, 0)], -1)
    return best, where, np.maximum(inside, before)


def _slot_screen(state: ClusterState, movable: MovableSet, idx: np.ndarray) -> np.ndarray:
    """(len(idx), G) mask of GPU slots that may be clearable: a necessary condition,
    relaxed (any model, memory ignored, the own node's CPU ignored) so it never
    rejects a plan. A slot fails when even its component-wise smallest share has no
    other node with a GPU of that much room *and* that much CPU, nor room on its own
    node's other GPUs. Nodes sorted by room, the best CPU among those with enough
    room is a prefix maximum (the second best when the best is the share's own
    node), so the check is one ``searchsorted`` over all slots."""
    least = movable.least[:, idx, :]  # (3, K, G)
    if state.gpu_free.size == 0:
        return np.zeros(least.shape[1:], dtype=bool)
    top = state.gpu_free.max(axis=1).astype(np.int64)
    cpu = np.where(state.schedulable, state.cpu_free, -1).astype(np.int64)
    order = np.argsort(-top, kind="stable")
    best, where, second = _prefix_top2(np.maximum(cpu[order], -1) + 1)  # shift: "none" is 0
    # Nodes with top >= milli are the first n of `order`.
    n = np.searchsorted(-top[order], -np.minimum(least[0], np.iinfo(np.int32).max), side="right")
    last = np.maximum(n - 1, 0)
    own = order[where[last]] == idx[:, None]
    cpu_there = np.where(own, second[last], best[last]) - 1
    ok = (n > 0) & (cpu_there >= least[1])
    # Or the share's own node, ignoring CPU and memory (they grow as shares leave it):
    # its other GPUs except the fully free ones, which the request takes (a candidate
    # needs clearing only while it has fewer free GPUs than the request).
    free = np.where(state.gpu_free[idx] == MILLI_PER_GPU, -1, state.gpu_free[idx]).astype(np.int64)
    ranked = -np.sort(-free, axis=1)
    first = ranked[:, :1]
    other = ranked[:, 1:2] if ranked.shape[1] > 1 else np.full_like(first, -1)
    alone = (free == first) & ((free == first).sum(axis=1, keepdims=True) == 1)
    ok |= least[0] <= np.where(alone, other, first)
    return ok


class _Destinations:
    """Where shares may go, cached within one planning call.

    ``possible`` is a necessary condition checked before a node's plan is simulated:
    in a simulation every node but the source only loses room as earlier shares
    land, and the source only gains CPU and memory from the shares leaving it, so a
    share with no room on the unchanged state (nor on its own node's other GPUs given
    all freed CPU) dooms that node's plan before a state copy is made.
    """

    def __init__(self, state: ClusterState, movable: MovableSet) -> None:
        self.state = state
        self.movable = movable
        self.top = state.gpu_free.max(axis=1) if state.gpu_free.size else np.zeros(state.num_nodes)
        self.masks: dict[object, np.ndarray] = {}
        self.hosts_cache: dict[tuple, np.ndarray] = {}

    def _tag(self, key: Hashable, node: int) -> object:
        models = self.movable.models.get(key)
        return ("same", int(self.state.model_id[node])) if models is None else models

    def allowed(self, key: Hashable, node: int) -> np.ndarray:
        """Schedulable nodes of a model the share ``key`` (now on ``node``) accepts."""
        tag, s = self._tag(key, node), self.state
        if tag not in self.masks:
            models = self.movable.models.get(key)
            mask = s.model_id == s.model_id[node] if models is None else s.model_mask(models)
            self.masks[tag] = s.schedulable & mask
        return self.masks[tag]

    def hosts(self, key: Hashable, node: int) -> np.ndarray:
        a = self.movable[key]
        cache_key = (a.milli_per_gpu, a.cpu_milli, a.memory_mib, self._tag(key, node))
        if cache_key not in self.hosts_cache:
            s = self.state
            mask = self.allowed(key, node) & (self.top >= a.milli_per_gpu)
            mask &= (s.cpu_free >= a.cpu_milli) & (s.mem_free >= a.memory_mib)
            self.hosts_cache[cache_key] = np.flatnonzero(mask)[:2]
        return self.hosts_cache[cache_key]

    def possible(self, node: int, target: np.ndarray, keys: list[Hashable]) -> bool:
        s = self.state
        own_top = -1
        for key in keys:
            hosts = self.hosts(key, node)
            if hosts.size and (hosts.size > 1 or int(hosts[0]) != node):
                continue
            if own_top < 0:
                rest = s.gpu_free[node].copy()
                rest[target] = -1
                own_top = int(rest.max())
                shares = [self.movable[k] for k in keys]
                cpu = int(s.cpu_free[node]) + sum(x.cpu_milli for x in shares)
                mem = int(s.mem_free[node]) + sum(x.memory_mib for x in shares)
            a = self.movable[key]
            if own_top < a.milli_per_gpu or cpu < a.cpu_milli or mem < a.memory_mib:
                return False
        return True


def _tightest(state: ClusterState, alloc: Allocation, allowed: np.ndarray, avoid: tuple[int, np.ndarray]) -> Allocation | None:
    """The share ``alloc`` re-placed on the GPU it fits most tightly (least milli
    left; ties: lowest node, then GPU index) on an ``allowed`` node, never on
    ``avoid``'s GPUs."""
    nodes = allowed & (state.cpu_free >= alloc.cpu_milli) & (state.mem_free >= alloc.memory_mib)
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
    state: ClusterState, req: Request, movable: MovableSet, node: int, clear: np.ndarray, dest: _Destinations
) -> DefragPlan | None:
    whole = np.flatnonzero(state.gpu_free[node] == MILLI_PER_GPU)
    target = np.sort(np.concatenate([whole, clear]))[: req.gpu_count]
    avoid = (node, target)
    keys = [k for gpu in clear for k in movable.on_gpu(node, int(gpu))]
    keys.sort(key=lambda k: -movable[k].milli_per_gpu)
    if not dest.possible(node, target, keys):
        return None
    trial = state.copy()
    moves = []
    for key in keys:
        old = movable[key]
        trial.unbind(old)
        new = _tightest(trial, old, dest.allowed(key, node), avoid)
        if new is None:
            return None
        trial.bind(new)
        moves.append(Migration(key, old, new))
    request = Allocation(trial.nodes[node].name, tuple(int(g) for g in target), MILLI_PER_GPU, req.cpu_milli, req.memory_mib)
    try:
        trial.bind(request)
    except OverAllocation:
        return None
    return DefragPlan(tuple(moves), request)


def plan_defrag(state: ClusterState, req: Request, movable: Mapping[Hashable, Allocation], max_moves: int) -> DefragPlan | None:
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
    dest = _Destinations(state, movable)
    for _, _, node, clear in _candidates(state, req, movable, max_moves):
        plan = _simulate(state, req, movable, node, clear, dest)
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
        if isinstance(target, Scheduler):
            target.unreserve(key)
            put: Callable[[Allocation], None] = lambda alloc: target.reserve(key, alloc)  # noqa: E731
        else:
            target.unbind(src)
            put = target.bind
        try:
            put(dst)
        except OverAllocation:
            put(src)  # back where it was: this step changed nothing
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
