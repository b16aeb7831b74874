"""``gang.bind_gang``: plan and bind a gang on a bare state, all or nothing (the live
scheduling pass's gang placement)."""

from __future__ import annotations

import numpy as np
import pytest

from suanli.scheduler import Allocation, ClusterState, Node, OverAllocation, Request, make_policy
from suanli.scheduler.gang import bind_gang, plan_gang


def nodes(n: int, leaf=lambda i: "L0") -> list[Node]:
    return [Node(f"n{i}", "G", 8, 96_000, 393_216, ib_leaf=leaf(i)) for i in range(n)]


def frozen(state: ClusterState) -> tuple:
    return state.gpu_free.copy(), state.cpu_free.copy(), state.mem_free.copy()


def test_binds_what_plan_gang_plans():
    state = ClusterState(nodes(4, leaf=lambda i: f"L{i // 2}"))
    req = Request(cpu_milli=1000, gpu_count=8, nodes=2)
    policy = make_policy("best_fit")
    plan = plan_gang(state, policy, req)
    allocs = bind_gang(state, policy, req)
    assert allocs == list(plan.allocations) and len({a.node for a in allocs}) == 2
    assert state.used_gpu_milli == 16_000


def test_nothing_fits_leaves_the_state_as_it_was():
    state = ClusterState(nodes(2))
    state.bind(Allocation("n0", (0,), 1000, 0, 0))
    before = frozen(state)
    assert bind_gang(state, make_policy("best_fit"), Request(gpu_count=8, nodes=2)) is None
    assert all(np.array_equal(a, b) for a, b in zip(before, frozen(state), strict=True))


def test_a_failing_bind_unbinds_the_members_bound_and_reraises():
    # A policy bug: the second member gets a GPU its node does not have -> its bind
    # fails; the first is unbound again, so a fallback policy starts from the state as
    # it was.
    state = ClusterState(nodes(2))
    policy = make_policy("best_fit")
    picks = iter([(0,), (99,)])
    policy.pick_gpus = lambda state, req, node: next(picks)  # type: ignore[method-assign]
    before = frozen(state)
    with pytest.raises(OverAllocation):
        bind_gang(state, policy, Request(gpu_milli=600, nodes=2), ranks=np.zeros(2, np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(before, frozen(state), strict=True))
