"""The preemption planner on hand-built clusters, and its safety invariant."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.scheduler import Allocation, PriorityClass, Request
from suanli.scheduler.preemption import Candidate, plan_preemption
from tests.scheduler.factories import cluster, node, whole

SPOT, OD, RES = PriorityClass.SPOT, PriorityClass.ON_DEMAND, PriorityClass.RESERVED


def running(state, *specs):
    """specs: (key, node, gpus, milli, priority, lost_work, started_at); binds each."""
    out = []
    for key, name, gpus, milli, prio, lost, started in specs:
        alloc = Allocation(name, gpus, milli, 0, 0)
        state.bind(alloc)
        out.append(Candidate(key, alloc, prio, lost, started))
    return out


def od(count=1):
    return Request(cpu_milli=0, gpu_count=count, priority=OD)


def test_least_lost_work_picks_the_cheapest_set():
    # GPU 0 holds two 500-milli spot jobs (lost 10 + 10 = 20), GPU 1 one 900-milli job
    # (lost 15). A whole GPU: evicting the single job loses 15 < 20.
    state = cluster(node("a", gpus=2))
    cands = running(
        state, ("s1", "a", (0,), 500, SPOT, 10, 0), ("s2", "a", (0,), 500, SPOT, 10, 0), ("s3", "a", (1,), 900, SPOT, 15, 0)
    )
    plan = plan_preemption(state, od(), cands, np.zeros(1, np.int64), eviction_cost=0)
    assert [v.key for v in plan.victims] == ["s3"] and plan.lost_work == 15
    # Make s3 dearer (25): two victims losing 20 in total now win...
    cands[2] = Candidate("s3", cands[2].allocation, SPOT, 25, 0)
    plan = plan_preemption(state, od(), cands, np.zeros(1, np.int64), eviction_cost=0)
    assert sorted(v.key for v in plan.victims) == ["s1", "s2"] and plan.lost_work == 20
    # ...unless each eviction also costs its restart: 25 + 300 < 10 + 10 + 2 * 300.
    plan = plan_preemption(state, od(), cands, np.zeros(1, np.int64), eviction_cost=300)
    assert [v.key for v in plan.victims] == ["s3"]


def test_lowest_priority_first_ignores_lost_work():
    # Same node; the baseline evicts the most recently started spot job first:
    # s1 (started 30) then s2 (20) -> frees GPU 0 with two victims, losing 20 where 15 was possible.
    state = cluster(node("a", gpus=2))
    cands = running(
        state, ("s1", "a", (0,), 500, SPOT, 10, 30), ("s2", "a", (0,), 500, SPOT, 10, 20), ("s3", "a", (1,), 900, SPOT, 15, 10)
    )
    plan = plan_preemption(state, od(), cands, np.zeros(1, np.int64), "lowest_priority_first")
    assert [v.key for v in plan.victims] == ["s1", "s2"]


def test_across_nodes_the_cheaper_node_wins():
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    cands = running(state, ("x", "a", (0,), 1000, SPOT, 100, 0), ("y", "b", (0,), 1000, SPOT, 50, 0))
    plan = plan_preemption(state, od(), cands, np.array([0, 1]))
    assert plan.node == "b" and [v.key for v in plan.victims] == ["y"]


def test_no_plan_when_only_protected_work_blocks():
    state = cluster(node("a", gpus=1), node("b", gpus=2))
    cands = running(
        state, ("od", "a", (0,), 1000, OD, 0, 0), ("res", "b", (0,), 1000, RES, 0, 0), ("spot", "b", (1,), 1000, SPOT, 5, 0)
    )
    assert plan_preemption(state, od(2), cands, np.zeros(2, np.int64)) is None  # b would need the reserved GPU
    assert plan_preemption(state, od(8), cands, np.zeros(2, np.int64)) is None  # fits nowhere at all
    spot_req = Request(gpu_count=1, priority=SPOT)
    assert plan_preemption(state, spot_req, cands, np.zeros(2, np.int64)) is None  # spot never preempts
    assert plan_preemption(state, od(1), cands, np.zeros(2, np.int64)).node == "b"


def test_planning_does_not_touch_the_state():
    state = cluster(node("a", gpus=1))
    cands = running(state, ("x", "a", (0,), 1000, SPOT, 1, 0))
    before = (state.gpu_free.copy(), state.version.copy())
    assert plan_preemption(state, whole(1, cpu=0), cands, np.zeros(1, np.int64)) is not None
    assert (state.gpu_free == before[0]).all() and (state.version == before[1]).all()


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.integers(0, 3),
            st.sampled_from([250, 500, 1000]),
            st.sampled_from([SPOT, OD, RES]),
            st.floats(0, 100),
        ),
        min_size=1,
        max_size=14,
    ),
    want=st.integers(1, 4),
    strategy=st.sampled_from(["least_lost_work", "lowest_priority_first"]),
)
def test_plans_only_evict_spot_and_make_room(jobs, want, strategy):
    state = cluster(node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=4))
    cands = []
    for k, (n, g, milli, prio, lost) in enumerate(jobs):
        alloc = Allocation(f"n{n}", (g,), milli, 0, 0)
        if state.gpu_free[n, g] >= milli:
            state.bind(alloc)
            cands.append(Candidate(k, alloc, prio, lost, float(k)))
    plan = plan_preemption(state, od(want), cands, np.arange(3), strategy)
    if plan is None:
        return
    assert all(v.priority is SPOT for v in plan.victims)
    for v in plan.victims:
        state.unbind(v.allocation)
    i = state.index[plan.node]
    assert (state.gpu_free[i] == 1000).sum() >= want
