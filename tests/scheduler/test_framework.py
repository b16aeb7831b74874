"""The scheduling cycle: filter, select, tie-break, reserve/unreserve."""

from __future__ import annotations

import numpy as np
import pytest

from suanli.scheduler import Allocation, OverAllocation, Request
from suanli.scheduler.framework import node_ranks
from tests.scheduler.factories import cluster, node, scheduler, share, whole


def test_filters_name_the_reason():
    state = cluster(node("a", gpus=2, cpu=4000, model="T4"))
    s = scheduler("best_fit", state)
    assert s.place(whole(1, cpu=8000)).reason == "cpu"
    assert s.place(Request(memory_mib=10**9)).reason == "memory"
    assert s.place(whole(4)).reason == "gpu"
    assert s.place(Request(gpu_count=1, gpu_models=frozenset({"A100"}))).reason == "gpu_model"
    state.set_schedulable("a", False)
    assert s.place(whole(1)).reason == "unschedulable"


def test_gpu_model_filter_is_case_insensitive():
    state = cluster(node("t4", model="T4"), node("h100", model="H100"))
    p = scheduler("best_fit", state).place(Request(gpu_count=1, gpu_models=frozenset({"h100"})))
    assert p.allocation.node == "h100"


def test_ties_follow_the_seeded_node_ranks():
    state = cluster(*(node(f"n{i}") for i in range(6)))
    ranks = node_ranks([n.name for n in state.nodes], seed=3)
    p = scheduler("best_fit", state, seed=3).place(whole(1))  # all nodes tie
    assert p.allocation.node == f"n{int(np.argmin(ranks))}"
    assert sorted(ranks.tolist()) == list(range(6))


def test_place_changes_nothing_and_reserve_is_idempotent():
    state = cluster(node("a", gpus=2))
    s = scheduler("fgd", state, target=[share(500)])
    before = state.gpu_free.copy()
    alloc = s.place(share(300)).allocation
    assert (state.gpu_free == before).all()
    s.reserve("job-1", alloc)
    s.reserve("job-1", alloc)
    assert state.used_gpu_milli == 300
    s.unreserve("job-1")
    s.unreserve("job-1")
    s.unreserve("never-reserved")
    assert (state.gpu_free == before).all()


def test_bind_rejects_over_allocation_and_changes_nothing():
    state = cluster(node("a", gpus=2, cpu=4000), used={"a": [800, 0]})
    snapshot = (state.gpu_free.copy(), state.cpu_free.copy(), state.version.copy())
    for bad in (
        Allocation("a", (0,), 300, 0, 0),  # only 200 free on GPU 0
        Allocation("a", (1,), 100, 5000, 0),  # CPU
        Allocation("a", (2,), 100, 0, 0),  # no GPU 2
        Allocation("a", (1, 1), 100, 0, 0),  # same GPU twice
    ):
        with pytest.raises(OverAllocation):
            state.bind(bad)
    with pytest.raises(OverAllocation):
        state.unbind(Allocation("a", (1,), 100, 0, 0))  # never bound
    assert all((x == y).all() for x, y in zip(snapshot, (state.gpu_free, state.cpu_free, state.version)))


def test_request_validation():
    with pytest.raises(ValueError, match="not both"):
        Request(gpu_count=1, gpu_milli=500)
    with pytest.raises(ValueError, match="gpu_milli"):
        Request(gpu_milli=1000)
    assert share(250).total_gpu_milli == 250 and whole(4).total_gpu_milli == 4000


def test_whole_gpu_requests_take_the_lowest_free_indices():
    state = cluster(node("a", gpus=4), used={"a": [0, 1000, 0, 0]})
    p = scheduler("best_fit", state).place(whole(2))
    assert p.allocation.gpu_indices == (0, 2)


def test_bind_all_takes_what_binding_each_in_turn_takes():
    """A snapshot's many allocations at once: the same free arrays and class counts as
    one ``bind`` each, and each touched node's version moves."""
    shapes = [node(f"n{i}", gpus=4, cpu=8000) for i in range(3)]
    allocs = [
        Allocation("n0", (0,), 300, 1000, 10),
        Allocation("n0", (0,), 700, 1000, 10),
        Allocation("n0", (1, 2), 1000, 2000, 20),
        Allocation("n2", (3,), 250, 500, 5),
        Allocation("n2", (), 0, 1500, 0),  # CPU only
    ]
    each, at_once = cluster(*shapes), cluster(*shapes)
    for a in allocs:
        each.bind(a)
    before = at_once.version.copy()
    at_once.bind_all(allocs)
    for name in ("gpu_free", "cpu_free", "mem_free"):
        assert (getattr(each, name) == getattr(at_once, name)).all(), name
    assert {k: v.tolist() for k, v in each.classes.items()} == {k: v.tolist() for k, v in at_once.classes.items()}
    assert (at_once.version != before).tolist() == [True, False, True]


def test_bind_all_rejects_what_does_not_fit_together_and_changes_nothing():
    state = cluster(node("a", gpus=2, cpu=4000), used={"a": [800, 0]})
    snapshot = (
        state.gpu_free.copy(),
        state.cpu_free.copy(),
        state.version.copy(),
        {k: v.copy() for k, v in state.classes.items()},
    )
    fits = Allocation("a", (1,), 600, 1000, 0)
    for bad in (
        [fits, Allocation("a", (1,), 600, 0, 0)],  # each fits alone, not both
        [fits, Allocation("a", (0,), 100, 3500, 0)],  # CPU, together
        [fits, Allocation("a", (2,), 100, 0, 0)],  # no GPU 2
        [fits, Allocation("a", (1, 1), 100, 0, 0)],  # same GPU twice
    ):
        with pytest.raises(OverAllocation):
            state.bind_all(bad)
    assert all((x == y).all() for x, y in zip(snapshot[:3], (state.gpu_free, state.cpu_free, state.version)))
    assert {k: v.tolist() for k, v in state.classes.items()} == {k: v.tolist() for k, v in snapshot[3].items()}
