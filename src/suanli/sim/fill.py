"""The FGD paper's fill experiment (see ../shared/benchmarks/FGD_PROTOCOL.md).

Pods arrive one at a time in a seeded shuffle, inflated (or trimmed) until the
requested GPU milli is ``tune`` x the cluster's capacity; each is placed against
the current state or fails for good; nothing departs. After every pod the run
records used and arrived GPU milli and the cluster fragmentation, from which
``metrics`` derives the paper's curves.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from suanli.scheduler import Allocation, ClusterState, Node, Request, Scheduler, TargetWorkload, make_policy
from suanli.scheduler.defrag import MovableSet, apply_plan
from suanli.scheduler.policies.fragmentation import TargetArrays, node_fragmentation
from suanli.scheduler.repack import PLANNERS


@dataclass
class FillRun:
    """Per-pod samples of one fill experiment."""

    policy: str
    seed: int
    tune: float
    total_gpu_milli: int
    used: np.ndarray  # used GPU milli after each arrival
    arrived: np.ndarray  # cumulative requested GPU milli, failed pods included
    frag: np.ndarray  # cluster fragmentation (milli) after each arrival
    idle: np.ndarray  # idle GPU milli after each arrival
    failed: Counter = field(default_factory=Counter)  # reason -> pods
    failed_shapes: Counter = field(default_factory=Counter)  # (cpu, milli, gpus) -> pods
    pods: int = 0
    wall_seconds: float = 0.0
    migrations: int = 0  # shares moved by the defragmentation planner (defrag_max_moves > 0)
    migrated_milli: int = 0  # GPU milli of the shares moved (what checkpoint/stop/start interrupts)
    plans: int = 0  # plans applied (pods placed thanks to migrations)
    plan_seconds: list[float] = field(default_factory=list)  # wall time of each planner call


def arrival_order(requests: Sequence[Request], total_gpu_milli: int, tune: float, seed: int) -> list[Request]:
    """Shuffle the pods (sorted by name) with ``seed`` and inflate or trim them to
    ``tune`` x capacity, exactly as the protocol's step 1.3 (with NumPy's generator
    in place of Go's)."""
    rng = np.random.default_rng(seed)
    by_name = sorted(requests, key=lambda r: r.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    target = tune * total_gpu_milli
    total = sum(r.total_gpu_milli for r in order)
    if total < target:
        i = 0
        while True:
            clone = by_name[int(rng.integers(len(by_name)))]
            # The reference checks the per-GPU milli against the target but adds the
            # whole request to the total; kept, since it sets where inflation stops.
            if total + clone.milli_per_gpu > target:
                break
            order.append(clone)
            total += clone.total_gpu_milli
            i += 1
    else:
        while total > target:
            total -= order.pop(int(rng.integers(len(order)))).total_gpu_milli
    return order


def run_fill(
    nodes: Sequence[Node],
    requests: Sequence[Request],
    policy: str,
    seed: int = 42,
    tune: float = 1.3,
    progress: Callable[[int, int], None] | None = None,
    defrag_max_moves: int = 0,
    planner: str = "direct",
    moves_per_100_pods: float | None = None,
) -> FillRun:
    """Run one fill experiment; ``progress(done, total)`` is called now and then.

    With ``defrag_max_moves`` > 0, a whole-GPU pod that fails asks the
    defragmentation planner for at most that many migrations of placed shares; if
    a plan exists it is applied and the pod placed, and ``FillRun.migrations``
    counts the moves. ``planner`` picks the planner (``repack.PLANNERS``): "direct"
    (``defrag.plan_defrag``) or "repack" (``repack.plan_repack``, chains found by
    CP-SAT). With "repack", a request no smaller (same GPUs and models, no less CPU
    and memory) than one whose plan failed is not planned until some plan succeeds
    (nothing departs in a fill, so room only shrinks). ``moves_per_100_pods`` caps
    the run's migrations at that many per 100 pods placed so far (None: no cap)."""
    start = time.perf_counter()
    state = ClusterState(nodes)
    target = TargetWorkload.from_requests(requests)
    scheduler = Scheduler(make_policy(policy, target, seed), state, seed=seed)
    order = arrival_order(requests, state.total_gpu_milli, tune, seed)
    t = TargetArrays.build(target, state.models)
    node_frag = node_fragmentation(state.gpu_free, state.cpu_free, state.model_id, t)
    frag_total = float(node_frag.sum())
    n = len(order)
    run = FillRun(
        policy,
        seed,
        tune,
        state.total_gpu_milli,
        used=np.zeros(n, np.int64),
        arrived=np.zeros(n, np.int64),
        frag=np.zeros(n),
        idle=np.zeros(n, np.int64),
    )
    used = arrived = placed = 0
    movable = MovableSet(state) if defrag_max_moves > 0 else None
    hopeless: list | None = [] if planner != "direct" else None
    for k, req in enumerate(order):
        arrived += req.total_gpu_milli
        placement = scheduler.schedule(req) if movable is None else scheduler.schedule(req, key=k)
        alloc = placement.allocation
        if movable is not None:
            moves = run.migrations
            budget = defrag_max_moves
            if moves_per_100_pods is not None:
                budget = min(budget, int(moves_per_100_pods * (placed + 1) / 100) - run.migrations)
            alloc = _track_or_defrag(scheduler, req, k, alloc, movable, budget, run, node_frag, t, planner, hopeless)
            frag_total = float(node_frag.sum()) if run.migrations != moves else frag_total
        if alloc is None:
            run.failed[placement.reason] += 1
            run.failed_shapes[(req.cpu_milli, req.milli_per_gpu, req.gpus_used)] += 1
        else:
            placed += 1
            used += alloc.total_gpu_milli
            i = state.index[alloc.node]
            new = node_fragmentation(state.gpu_free[i : i + 1], state.cpu_free[i : i + 1], state.model_id[i : i + 1], t)[0]
            frag_total += new - node_frag[i]
            node_frag[i] = new
        run.used[k], run.arrived[k], run.frag[k] = used, arrived, frag_total
        run.idle[k] = run.total_gpu_milli - used
        if progress is not None and (k % 500 == 0 or k == n - 1):
            progress(k + 1, n)
    run.pods = n
    run.wall_seconds = time.perf_counter() - start
    return run


def _track_or_defrag(
    scheduler: Scheduler,
    req: Request,
    key: int,
    alloc: Allocation | None,
    movable: MovableSet,
    max_moves: int,
    run: FillRun,
    node_frag: np.ndarray,
    t: TargetArrays,
    planner: str = "direct",
    hopeless: list | None = None,
) -> Allocation | None:
    """Defrag path of ``run_fill``: record placed shares as migratable; for a failed
    whole-GPU pod, apply a migration plan and place the pod. Refreshes ``node_frag``
    of nodes the migrations touched (the caller refreshes the pod's own node)."""
    if alloc is not None:
        if req.is_sharing:
            movable.add(key, alloc, req.gpu_models)
        return alloc
    if not req.gpu_count or max_moves < 1:
        return None
    shape = (req.gpu_count, req.gpu_models, req.cpu_milli, req.memory_mib)
    if hopeless is not None and any(h[:2] == shape[:2] and h[2] <= shape[2] and h[3] <= shape[3] for h in hopeless):
        return None  # a request as big failed since the last plan
    began = time.perf_counter()
    plan = PLANNERS[planner](scheduler.state, req, movable, max_moves)
    run.plan_seconds.append(time.perf_counter() - began)
    if plan is None:
        if hopeless is not None:
            hopeless.append(shape)
        return None
    if hopeless is not None:
        hopeless.clear()
    apply_plan(scheduler, plan, movable)
    scheduler.reserve(key, plan.allocation)
    run.migrations += plan.moves
    run.migrated_milli += sum(m.old.milli_per_gpu for m in plan.migrations)
    run.plans += 1
    state = scheduler.state
    for i in {state.index[a.node] for m in plan.migrations for a in (m.old, m.new)}:
        rows = slice(i, i + 1)
        node_frag[i] = node_fragmentation(state.gpu_free[rows], state.cpu_free[rows], state.model_id[rows], t)[0]
    return plan.allocation
