"""Global repack: a solver picks the migrations of shares that free whole GPUs.

``defrag.plan_defrag`` moves each share of the GPUs it clears straight to a GPU
with room. Under a packing policy (FGD) the room left is slivers smaller than the
shares, so a direct move rarely exists; what does is a *chain*: move a small share
B off GPU y into a sliver elsewhere, which makes room on y for the share A that
must leave the GPU the request needs. ``plan_repack`` finds such plans with
OR-Tools CP-SAT over a bounded neighbourhood of the cluster:

1. targets     -> the ``targets`` cheapest nodes where the request could fit once
                  shares leave (free whole GPUs plus GPUs holding only migratable
                  shares reach ``gpu_count``; CPU and memory suffice once the
                  node's migratable shares leave: a share may move to free CPU,
                  not only GPU); cheapest = fewest shares on the GPUs to clear.
2. neighbourhood -> the GPUs shares may go to: for every share that may move, the
                  ``fits`` GPUs it fits most tightly now, and the ``fits`` GPUs it
                  would fit most tightly if their own migratable shares left
                  (chains), two levels deep. Shares on those GPUs may move too.
3. model       -> one boolean per (share, GPU it may end on) and per (target node,
                  GPU given to the request); per-GPU milli and per-node CPU and
                  memory capacity in the final state; each share on exactly one
                  GPU of a model it accepts; exactly one target node with
                  ``gpu_count`` empty GPUs; at most ``max_moves`` moves. Minimise
                  the summed ``move_cost`` of the shares moved.
4. order       -> moves are ordered so each is feasible when applied (a move
                  whose destination has room goes first: the end of a chain
                  before its start), checked on a ``state.copy()``. A solution
                  whose moves cannot be ordered (a cycle) is rejected.

The result is a ``defrag.DefragPlan``, applied with ``defrag.apply_plan`` like a
direct plan: the live platform migrates a share by checkpoint, stop, start
elsewhere, one migration at a time in the plan's order. Bounded by ``time_limit``
(wall seconds for the whole call: the direct try, the model and the solver; the
solver also gets it as a deterministic-time limit, so on an unloaded machine the
same input gives the same plan) and ``max_moves``. Pure: changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from suanli.scheduler.defrag import DefragPlan, Migration, MovableSet, plan_defrag, whole_gpu_hosts
from suanli.scheduler.model import MILLI_PER_GPU, Allocation, Request
from suanli.scheduler.state import ClusterState, OverAllocation

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

#: The cost of moving one share: a fixed part per move (a checkpoint, a stop, a
#: start) and a part per milli moved (its size). Integer, as CP-SAT needs.
MoveCost = Callable[[Hashable, Allocation], int]


def default_move_cost(key: Hashable, alloc: Allocation) -> int:
    return MILLI_PER_GPU + alloc.milli_per_gpu


@dataclass
class RepackStats:
    """What the last calls cost (for benchmarks): solver calls, plans found."""

    calls: int = 0
    solved: int = 0
    seconds: float = 0.0


STATS = RepackStats()

#: Solutions tried per call before giving up on ones whose moves cannot be ordered.
_ATTEMPTS = 3


def _targets(state: ClusterState, req: Request, movable: MovableSet, max_moves: int, k: int) -> list[tuple[int, np.ndarray]]:
    """Up to ``k`` (node, clearable GPU mask) cheapest first (fewest shares on the
    cheapest GPUs to clear; ties: milli moved, then node order)."""
    g = req.gpu_count
    idx = whole_gpu_hosts(state, req)
    if idx.size == 0:
        return []
    free = state.gpu_free[idx].astype(np.int64)
    used = state.gpu_total[idx].astype(np.int64) - free
    clearable = (used > 0) & (used == movable.milli[idx])
    whole = (free == MILLI_PER_GPU) & (state.gpu_total[idx] > 0)
    need = np.maximum(g - whole.sum(axis=1), 0)
    keep = (need <= clearable.sum(axis=1)) & (need <= max_moves)
    idx, need, clearable, whole = idx[keep], need[keep], clearable[keep], whole[keep]
    if idx.size == 0:
        return []
    big = np.iinfo(np.int64).max // 4
    count = np.where(clearable, movable.count[idx], big)
    milli = np.where(clearable, movable.milli[idx], 0)
    order = np.lexsort((milli, count), axis=1)
    taken = np.arange(order.shape[1])[None, :] < need[:, None]
    moves = np.where(taken, np.take_along_axis(count, order, axis=1), 0).sum(axis=1)
    moved = np.where(taken, np.take_along_axis(milli, order, axis=1), 0).sum(axis=1)
    # Any movable share of the node may leave to free CPU and memory, not only those
    # on the GPUs the request takes (FGD's idle whole GPUs sit on nodes short of CPU).
    cpu = movable.cpu[idx].sum(axis=1)
    mem = movable.mem[idx].sum(axis=1)
    fits = (state.cpu_free[idx] + cpu >= req.cpu_milli) & (state.mem_free[idx] + mem >= req.memory_mib) & (moves <= max_moves)
    sel = np.flatnonzero(fits)
    sel = sel[np.lexsort((idx[sel], moved[sel], moves[sel]))][:k]
    return [(int(idx[j]), clearable[j] | whole[j]) for j in sel]


class _Model:
    """The CP-SAT model of one planning call, built over a neighbourhood."""

    def __init__(self, state: ClusterState, movable: MovableSet) -> None:
        self.state = state
        self.movable = movable
        self.allowed_cache: dict[tuple, np.ndarray] = {}

    def allowed_nodes(self, key: Hashable, node: int) -> np.ndarray:
        models = self.movable.models.get(key)
        tag: tuple = ("same", int(self.state.model_id[node])) if models is None else ("set", models)
        if tag not in self.allowed_cache:
            s = self.state
            mask = s.model_id == s.model_id[node] if models is None else s.model_mask(models)
            self.allowed_cache[tag] = s.schedulable & mask
        return self.allowed_cache[tag]


def _neighbourhood(
    state: ClusterState,
    movable: MovableSet,
    found: list[tuple[int, np.ndarray]],
    fits: int,
    depth: int,
) -> tuple[dict[tuple[int, int], int], list[Hashable]]:
    """GPU slots shares may end on with their level, and the shares that may move.

    Level 0: the target GPUs. A slot found as a place a share of level i could use
    once the slot's own shares leave (a chain) gets level i + 1 and its shares may
    move; a slot found as a direct fit gets ``depth + 1`` (its shares stay). A move
    into a slot whose shares may leave is allowed only to a higher level, so the
    moves that wait for room form no cycle through GPUs."""
    s = state
    leaf = depth + 1
    free = s.gpu_free.astype(np.int64)
    room_after = free + movable.milli  # if every movable share on the GPU left
    slots: dict[tuple[int, int], int] = {}
    shares: dict[Hashable, None] = {}
    for node, _ in found:
        for gpu in range(int(s.gpu_count[node])):
            slots[(node, gpu)] = 0
            shares.update(dict.fromkeys(movable.on_gpu(node, gpu)))
    target_nodes = {node for node, _ in found}
    frontier = list(shares)
    helper = _Model(state, movable)
    for level in range(depth):
        nxt: list[Hashable] = []
        for key in frontier:
            a = movable[key]
            home = s.index[a.node]
            ok = helper.allowed_nodes(key, home)
            nodes = ok & (s.cpu_free >= a.cpu_milli) & (s.mem_free >= a.memory_mib)
            for t in target_nodes:
                nodes[t] = ok[t]
            for room, chain in ((free, False), (room_after, True)):
                slack = np.where(nodes[:, None] & (s.gpu_total > 0), room - a.milli_per_gpu, -1)
                if chain:
                    slack = np.where((free >= MILLI_PER_GPU) | (movable.count == 0), -1, slack)
                slack = np.where(slack >= 0, slack, np.iinfo(np.int64).max)
                flat = np.argpartition(slack.ravel(), min(fits, slack.size - 1))[:fits]
                for f in flat:
                    if slack.flat[f] == np.iinfo(np.int64).max:
                        continue
                    slot = divmod(int(f), slack.shape[1])
                    if not chain:
                        slots.setdefault(slot, leaf)
                        continue
                    if slots.get(slot, leaf) <= level + 1 or level + 1 >= leaf:
                        continue
                    slots[slot] = level + 1
                    if level + 1 < depth + 1:
                        for other in movable.on_gpu(*slot):
                            if other not in shares:
                                shares[other] = None
                                nxt.append(other)
        frontier = nxt
    return slots, list(shares)


def plan_repack(
    state: ClusterState,
    req: Request,
    movable: Mapping[Hashable, Allocation],
    max_moves: int,
    *,
    time_limit: float = 0.5,
    move_cost: MoveCost = default_move_cost,
    targets: int = 4,
    fits: int = 6,
    depth: int = 2,
) -> DefragPlan | None:
    """The cheapest plan of at most ``max_moves`` migrations of shares, chains
    included, after which the whole-GPU request ``req`` fits on one node; or None.
    Same contract as ``defrag.plan_defrag``; a direct plan is tried first (it is
    cheap and often optimal), the solver only when it finds none."""
    if req.is_sharing or req.gpu_count < 1 or req.nodes != 1:
        raise ValueError("repack plans for whole-GPU requests on one node")
    if max_moves < 0:
        raise ValueError("max_moves must be >= 0")
    # OR-Tools costs ~55 MB and about a second to load: loaded on the first plan, not on
    # import, so the fill and the replay without migration (which import this module)
    # do not pay it; loaded before the clock starts, so the first plan gets its time.
    from ortools.sat.python import cp_model  # noqa: F401

    start = time.perf_counter()
    if not isinstance(movable, MovableSet) or movable.index is not state.index:
        movable = MovableSet(state, movable)
    direct = plan_defrag(state, req, movable, min(max_moves, 1))
    if direct is not None:
        return direct
    if max_moves < 1:
        return None
    found = _targets(state, req, movable, max_moves, targets)
    if not found:
        return None
    STATS.calls += 1
    try:
        plan = _solve(state, req, movable, max_moves, found, start + time_limit, time_limit, move_cost, fits, depth)
    finally:
        STATS.seconds += time.perf_counter() - start
    if plan is not None:
        STATS.solved += 1
    return plan


def _solve(
    state: ClusterState,
    req: Request,
    movable: MovableSet,
    max_moves: int,
    found: list[tuple[int, np.ndarray]],
    deadline: float,
    time_limit: float,
    move_cost: MoveCost,
    fits: int,
    depth: int,
) -> DefragPlan | None:
    from ortools.sat.python import cp_model  # loaded by plan_repack already

    s = state
    target_nodes = {node for node, _ in found}
    slots, shares = _neighbourhood(s, movable, found, fits, depth)
    helper = _Model(s, movable)
    moving = set(shares)
    # Room each slot and node has once every share of the model has left it.
    gone_gpu: dict[tuple[int, int], int] = {}
    gone_cpu: dict[int, int] = {}
    gone_mem: dict[int, int] = {}
    for key in moving:
        a = movable[key]
        home = (s.index[a.node], a.gpu_indices[0])
        gone_gpu[home] = gone_gpu.get(home, 0) + a.milli_per_gpu
        gone_cpu[home[0]] = gone_cpu.get(home[0], 0) + a.cpu_milli
        gone_mem[home[0]] = gone_mem.get(home[0], 0) + a.memory_mib

    def gpu_room(slot: tuple[int, int]) -> int:
        return int(s.gpu_free[slot]) + gone_gpu.get(slot, 0)

    def cpu_room(node: int) -> int:
        return int(s.cpu_free[node]) + gone_cpu.get(node, 0)

    def mem_room(node: int) -> int:
        return int(s.mem_free[node]) + gone_mem.get(node, 0)

    m = cp_model.CpModel()
    # Where each share may end: its own GPU, or a neighbourhood slot it may go to.
    place: dict[Hashable, dict[tuple[int, int], cp_model.IntVar]] = {}
    on_slot: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = {}
    on_node: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {}
    stay: dict[Hashable, cp_model.IntVar] = {}
    costs = []
    pending_in: list[tuple[tuple[int, int], cp_model.IntVar]] = []
    for key in shares:
        a = movable[key]
        home = (s.index[a.node], a.gpu_indices[0])
        ok = helper.allowed_nodes(key, home[0])
        options = {home: m.new_bool_var("")}
        for slot in slots:
            if slot == home or not ok[slot[0]] or s.gpu_total[slot] == 0 or gpu_room(slot) < a.milli_per_gpu:
                continue
            if cpu_room(slot[0]) < a.cpu_milli or mem_room(slot[0]) < a.memory_mib:
                continue
            options[slot] = m.new_bool_var("")
            if slots[slot] <= slots[home]:
                pending_in.append((slot, options[slot]))
        m.add_exactly_one(options.values())
        place[key] = options
        stay[key] = options[home]
        for slot, var in options.items():
            on_slot.setdefault(slot, []).append((a.milli_per_gpu, var))
            on_node.setdefault(slot[0], []).append((a.cpu_milli, a.memory_mib, var))
        costs.append(move_cost(key, a) * (1 - stay[key]))
    # No cycle through GPUs: a move to a level no higher than its own needs the
    # destination's shares to stay.
    for slot, var in pending_in:
        for other in movable.on_gpu(*slot):
            if other in stay:
                m.add_implication(var, stay[other])
    # The request: one target node, gpu_count of its (clearable or free) GPUs.
    pick = {node: m.new_bool_var("") for node, _ in found}
    m.add_exactly_one(pick.values())
    take: dict[tuple[int, int], cp_model.IntVar] = {}
    for node, mask in found:
        free_or_clear = [int(g) for g in np.flatnonzero(mask)]
        for g in free_or_clear:
            take[(node, g)] = m.new_bool_var("")
        m.add(sum(take[(node, g)] for g in free_or_clear) == req.gpu_count * pick[node])
    # Capacity in the final state.
    for slot in set(on_slot) | set(take):
        terms = [milli * var for milli, var in on_slot.get(slot, [])]
        if slot in take:
            terms.append(MILLI_PER_GPU * take[slot])
        m.add(sum(terms) <= gpu_room(slot))
    for node in set(on_node) | target_nodes:
        cpu_terms = [c * var for c, _, var in on_node.get(node, [])]
        mem_terms = [mm * var for _, mm, var in on_node.get(node, [])]
        if node in pick:
            cpu_terms.append(req.cpu_milli * pick[node])
            mem_terms.append(req.memory_mib * pick[node])
        m.add(sum(cpu_terms) <= cpu_room(node))
        m.add(sum(mem_terms) <= mem_room(node))
    m.add(sum(1 - v for v in stay.values()) <= max_moves)
    m.minimize(sum(costs))
    request_node = {v: node for node, v in pick.items()}
    for _ in range(_ATTEMPTS):
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = left
        solver.parameters.max_deterministic_time = time_limit
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        # Stronger LP relaxation: proves the common "no repack exists" in tens of ms
        # where the default level searches to the time limit.
        solver.parameters.linearization_level = 2
        status = solver.solve(m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        node = next(n for v, n in request_node.items() if solver.value(v))
        chosen = tuple(sorted(g for (n, g), v in take.items() if n == node and solver.value(v)))
        moves, used = [], []
        for key, options in place.items():
            if solver.value(stay[key]):
                continue
            slot, var = next((sl, v) for sl, v in options.items() if solver.value(v))
            old = movable[key]
            new = Allocation(s.nodes[slot[0]].name, (slot[1],), old.milli_per_gpu, old.cpu_milli, old.memory_mib)
            moves.append(Migration(key, old, new))
            used.append(var)
        request = Allocation(s.nodes[node].name, chosen, MILLI_PER_GPU, req.cpu_milli, req.memory_mib)
        plan = order_moves(state, moves, request)
        if plan is not None:
            return plan
        # The moves form a cycle (each waits for room another frees): cut this set of
        # moves off and ask again.
        m.add(sum(used) <= len(used) - 1)
    return None


def order_moves(state: ClusterState, moves: list[Migration], request: Allocation) -> DefragPlan | None:
    """The moves in an order where each one fits when applied (chain ends first),
    then the request; None if no such order exists (a cycle) or the end state does
    not hold the request. Checked on a copy."""
    trial = state.copy()
    pending = sorted(moves, key=lambda mv: (-mv.old.milli_per_gpu, str(mv.key)))
    done: list[Migration] = []
    while pending:
        rest = []
        for mv in pending:
            trial.unbind(mv.old)
            try:
                trial.bind(mv.new)
            except OverAllocation:
                trial.bind(mv.old)
                rest.append(mv)
                continue
            done.append(mv)
        if len(rest) == len(pending):
            return None
        pending = rest
    try:
        trial.bind(request)
    except OverAllocation:
        return None
    return DefragPlan(tuple(done), request)


#: Migration planners by name, one signature: (state, request, movable, max_moves) -> plan | None.
PLANNERS: dict[str, Callable[..., DefragPlan | None]] = {"direct": plan_defrag, "repack": plan_repack}
