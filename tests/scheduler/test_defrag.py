"""The defragmentation planner: hand-built cases with known plans (and none),
application on a scheduler, properties of every plan it returns."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.scheduler import Allocation, ClusterState, OverAllocation, Request
from suanli.scheduler.defrag import DefragPlan, Migration, MovableSet, apply_plan, plan_defrag
from tests.scheduler.factories import node, scheduler


def share(n: str, gpu: int, milli: int, cpu: int = 0) -> Allocation:
    return Allocation(n, (gpu,), milli, cpu, 0)


def whole(n: str, *gpus: int) -> Allocation:
    return Allocation(n, gpus, 1000, 0, 0)


def build(nodes, movable: dict, fixed: list[Allocation] = ()) -> ClusterState:
    state = ClusterState(nodes)
    for alloc in [*movable.values(), *fixed]:
        state.bind(alloc)
    return state


def need(g: int, cpu: int = 0) -> Request:
    return Request(cpu_milli=cpu, gpu_count=g)


def one_move_case():
    # a: GPU0 free, GPU1 s1=300, GPU2 s2=200 + s3=200, GPU3 whole (not movable).
    # b: GPU0 s4=600, GPUs 1-3 whole.
    movable = {"s1": share("a", 1, 300), "s2": share("a", 2, 200), "s3": share("a", 2, 200), "s4": share("b", 0, 600)}
    fixed = [whole("a", 3), whole("b", 1, 2, 3)]
    return build([node("a", gpus=4), node("b", gpus=4)], movable, fixed), movable


def test_one_move_frees_the_second_gpu():
    # 2 GPUs wanted. a has 1 free GPU and needs one more cleared: GPU1 (1 share) beats
    # GPU2 (2 shares) -> cost 1. b has 0 free and only GPU0 clearable -> not a candidate.
    # s1 (300) goes to its tightest fit: b.GPU0 has 400 free (slack 100), a.GPU2 has 600
    # (slack 300) -> b.GPU0.
    state, movable = one_move_case()
    plan = plan_defrag(state, need(2), movable, max_moves=4)
    assert plan == DefragPlan((Migration("s1", share("a", 1, 300), share("b", 0, 300)),), Allocation("a", (0, 1), 1000, 0, 0))
    assert plan.moves == 1


def test_budget_too_small_means_no_plan():
    state, movable = one_move_case()
    assert plan_defrag(state, need(2), movable, max_moves=0) is None
    # 3 GPUs on a: clear GPU1 (1 share) + GPU2 (2 shares) = 3 moves > 2.
    assert plan_defrag(state, need(3), movable, max_moves=2) is None
    # With 3 moves allowed it still fails: the shares hold 300 + 200 + 200 = 700 milli and
    # the only room outside a's GPUs 0-2 is b.GPU0's 400 (a.GPU3 is a whole-GPU job).
    assert plan_defrag(state, need(3), movable, max_moves=3) is None


def test_no_plan_when_the_shares_have_nowhere_to_go():
    # One node, 2 GPUs each holding a movable 500; the request wants both, and moved
    # shares may not land on the GPUs being freed: nowhere left.
    movable = {"x": share("a", 0, 500), "y": share("a", 1, 500)}
    state = build([node("a", gpus=2)], movable)
    before = state.gpu_free.copy()
    assert plan_defrag(state, need(2), movable, max_moves=8) is None
    assert (state.gpu_free == before).all()


def test_unmovable_work_blocks_a_gpu():
    # a: GPU0 holds a 500 share that is not in `movable` -> never clearable.
    state = build([node("a", gpus=1)], {}, [share("a", 0, 500)])
    assert plan_defrag(state, need(1), {}, max_moves=8) is None
    # With a free node b beside it, the answer is b with no moves at all.
    state = build([node("a", gpus=1), node("b", gpus=1)], {}, [share("a", 0, 500)])
    plan = plan_defrag(state, need(1), {}, max_moves=8)
    assert plan.allocation.node == "b" and plan.moves == 0


def test_moves_never_land_on_the_gpus_being_freed():
    # a (2 GPUs): s1=300 on GPU0, s2=600 on GPU1; c (1 GPU): 100 used, not movable.
    # Want 2 GPUs on a. s2 moves first (largest): a.GPU0 would fit it tightest (700 free,
    # slack 100) but is being freed, so c.GPU0 (900 free, slack 300). Then s1 (300) ->
    # c.GPU0 (300 free, slack 0). Two moves.
    movable = {"s1": share("a", 0, 300), "s2": share("a", 1, 600)}
    state = build([node("a", gpus=2), node("c", gpus=1)], movable, [share("c", 0, 100)])
    plan = plan_defrag(state, need(2), movable, max_moves=2)
    assert [(m.key, m.new) for m in plan.migrations] == [("s2", share("c", 0, 600)), ("s1", share("c", 0, 300))]
    assert plan.allocation.gpu_indices == (0, 1)
    assert plan_defrag(state, need(2), movable, max_moves=1) is None


def test_prefers_the_node_needing_fewest_moves():
    # a needs 2 moves (two shares on its one GPU), b needs 1; d takes them.
    movable = {"a1": share("a", 0, 100), "a2": share("a", 0, 100), "b1": share("b", 0, 100)}
    state = build([node("a", gpus=1), node("b", gpus=1), node("d", gpus=1)], movable, [share("d", 0, 500)])
    plan = plan_defrag(state, need(1), movable, max_moves=4)
    assert plan.allocation.node == "b" and [m.key for m in plan.migrations] == ["b1"]


def test_cpu_of_the_request_counts():
    # a has the only clearable GPU but 4000 of 8000 CPU is held by fixed work; the share
    # holds 1000 more. Free after the move: 8000 - 4000 = 4000 -> a 5000-CPU request fails.
    movable = {"s": share("a", 0, 300, cpu=1000)}
    state = build(
        [node("a", gpus=1, cpu=8000), node("b", gpus=1, cpu=8000)], movable, [Allocation("a", (), 0, 4000, 0), share("b", 0, 500)]
    )
    assert plan_defrag(state, need(1, cpu=4000), movable, max_moves=1).moves == 1
    assert plan_defrag(state, need(1, cpu=5000), movable, max_moves=1) is None


def test_apply_on_a_scheduler_then_reserve():
    state, movable = one_move_case()
    s = scheduler("best_fit", state)
    for key, alloc in movable.items():
        s._reserved[key] = alloc  # already bound by build(): record who holds what
    mset = MovableSet(state, movable)
    plan = plan_defrag(state, need(2), mset, 4)
    apply_plan(s, plan, mset)
    s.reserve("job", plan.allocation)
    assert s.reservations["s1"] == share("b", 0, 300) and mset["s1"] == share("b", 0, 300)
    assert state.gpu_free[state.index["a"]].tolist() == [0, 0, 600, 0]
    with pytest.raises(OverAllocation):  # the same plan again is stale
        apply_plan(s, plan)


def test_stale_plan_on_a_state_is_undone():
    movable = {"s1": share("a", 0, 300), "s2": share("a", 1, 600)}
    state = build([node("a", gpus=2), node("c", gpus=1)], movable, [share("c", 0, 100)])
    plan = plan_defrag(state, need(2), movable, 2)
    state.bind(share("c", 0, 500))  # c now has 400 free: s2 (600) still moves, s1 (300) does not fit
    before = state.gpu_free.copy()
    with pytest.raises(OverAllocation):
        apply_plan(state, plan)
    assert (state.gpu_free == before).all()


def test_rejects_requests_it_does_not_plan_for():
    state, movable = one_move_case()
    with pytest.raises(ValueError):
        plan_defrag(state, Request(gpu_milli=500), movable, 1)
    with pytest.raises(ValueError):
        MovableSet(state, {"w": whole("a", 3)})


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=5),
    shares=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 7), st.integers(1, 999)), max_size=30),
    g=st.integers(1, 8),
    max_moves=st.integers(0, 6),
)
def test_every_plan_applies_and_frees_the_request(gpus, shares, g, max_moves):
    nodes = [node(f"n{i}", gpus=k) for i, k in enumerate(gpus)]
    state = ClusterState(nodes)
    movable = {}
    for k, (n, gpu, milli) in enumerate(shares):
        if n < len(nodes) and gpu < gpus[n] and state.gpu_free[n, gpu] >= milli:
            alloc = share(f"n{n}", gpu, milli)
            state.bind(alloc)
            movable[k] = alloc
    used = state.used_gpu_milli
    plan = plan_defrag(state, need(g), movable, max_moves)
    if plan is None:
        assert state.used_gpu_milli == used
        return
    assert plan.moves <= max_moves
    apply_plan(state, plan)
    assert state.used_gpu_milli == used  # moves keep every share, only elsewhere
    targets = set(plan.allocation.gpu_indices)
    assert all(not (m.new.node == plan.allocation.node and m.new.gpu_indices[0] in targets) for m in plan.migrations)
    state.bind(plan.allocation)  # succeeds: the plan freed what it promised


@settings(max_examples=80, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=5),
    shares=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(1, 999), st.integers(0, 3)), max_size=24),
    cpu=st.lists(st.integers(1, 8), min_size=5, max_size=5),
    g=st.integers(1, 4),
    req_cpu=st.integers(0, 6),
)
def test_the_screen_never_changes_the_answer(gpus, shares, cpu, g, req_cpu):
    # The per-node screen is a necessary condition only: planning with it switched off
    # (every candidate node simulated) must give the same plan.
    from suanli.scheduler import defrag

    nodes = [node(f"n{i}", gpus=k, cpu=cpu[i] * 1000) for i, k in enumerate(gpus)]
    state = ClusterState(nodes)
    movable = {}
    for k, (n, gpu, milli, c) in enumerate(shares):
        alloc = share(f"n{n}", gpu, milli, cpu=c * 1000)
        if n < len(nodes) and gpu < gpus[n] and state.gpu_free[n, gpu] >= milli and state.cpu_free[n] >= c * 1000:
            state.bind(alloc)
            movable[k] = alloc
    screened = plan_defrag(state, need(g, cpu=req_cpu * 1000), movable, 6)
    with patch.object(defrag._Destinations, "possible", lambda self, node, target, keys: True):
        assert plan_defrag(state, need(g, cpu=req_cpu * 1000), movable, 6) == screened


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=9))
def test_prefix_top2_against_brute_force(values):
    from suanli.scheduler.defrag import _prefix_top2

    v = np.array(values)
    best, where, second = _prefix_top2(v)
    for k in range(v.size):
        prefix = v[: k + 1]
        rest = np.delete(prefix, where[k])
        assert best[k] == prefix.max() == v[where[k]] and where[k] <= k
        assert second[k] == (rest.max() if rest.size else -1)


@settings(max_examples=150, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=5),
    shares=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(1, 999), st.integers(0, 3)), max_size=24),
    cpu=st.lists(st.integers(1, 8), min_size=5, max_size=5),
)
def test_a_gpu_the_slot_screen_rejects_cannot_be_cleared(gpus, shares, cpu):
    # The per-GPU screen decides which GPUs count as clearable. A GPU it rejects must
    # hold a share that fits nowhere: not on another node (any model), not on its own
    # node's GPUs other than itself and the fully free ones (which the request takes).
    from suanli.scheduler import defrag

    nodes = [node(f"n{i}", gpus=k, cpu=cpu[i] * 1000) for i, k in enumerate(gpus)]
    state = ClusterState(nodes)
    movable = MovableSet(state)
    for k, (n, gpu, milli, c) in enumerate(shares):
        alloc = share(f"n{n}", gpu, milli, cpu=c * 1000)
        if n < len(nodes) and gpu < gpus[n] and state.gpu_free[n, gpu] >= milli and state.cpu_free[n] >= c * 1000:
            state.bind(alloc)
            movable.add(k, alloc, frozenset())
    idx = np.arange(len(nodes))
    ok = defrag._slot_screen(state, movable, idx)
    everywhere = np.ones(len(nodes), dtype=bool)
    for i in idx:
        for g in range(gpus[i]):
            keys = movable.on_gpu(int(i), g)
            if ok[i, g] or not keys:
                continue
            avoid = np.union1d(np.flatnonzero(state.gpu_free[i] == 1000), [g])
            smallest = min(keys, key=lambda k: movable[k].milli_per_gpu)
            trial = state.copy()
            trial.unbind(movable[smallest])
            assert defrag._tightest(trial, movable[smallest], everywhere, (int(i), avoid)) is None
