"""Node pinning (``Request.pin_nodes``, ``ignore_cordon``): a pinned request lands only on
its nodes, waits when they are busy, cordoned or down, and only a pinned request that
ignores the cordon lands on a cordoned node; feasibility judges it against its nodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.scheduler import Allocation, ClusterState, Node, PriorityClass, Request, Scheduler, make_policy
from suanli.scheduler.feasibility import never_fits
from suanli.scheduler.framework import failure_reason, feasible_mask
from suanli.scheduler.gang import plan_gang
from suanli.scheduler.preemption import Candidate, plan_preemption
from tests.scheduler.factories import cluster, node


def whole_node(name: str, gpus: int = 8, cordon: bool = False) -> Request:
    return Request(cpu_milli=96_000, memory_mib=393_216, gpu_count=gpus, pin_nodes=frozenset([name]), ignore_cordon=cordon)


@pytest.mark.parametrize("policy", ["suanli", "best_fit", "first_fit", "fgd"])
def test_a_pinned_request_lands_only_on_its_node_whatever_the_policy_prefers(policy: str) -> None:
    state = cluster(node("a"), node("b"), node("c"), used={"a": [500]})  # "a" is the packing policies' favourite
    sched = Scheduler(make_policy(policy), state)
    for target in ("c", "b", "a"):
        placed = sched.place(Request(cpu_milli=1000, gpu_count=1, pin_nodes=frozenset([target])))
        assert placed.ok and placed.allocation is not None and placed.allocation.node == target, (policy, target, placed)
    gang = plan_gang(state, make_policy(policy), Request(gpu_count=2, nodes=2, pin_nodes=frozenset(["a", "c"])))
    assert gang is not None and sorted(a.node for a in gang.allocations) == ["a", "c"], gang


def test_a_pinned_request_waits_while_its_node_is_busy_even_with_other_nodes_free() -> None:
    state = cluster(node("a"), node("b"), used={"a": [1000]})
    sched = Scheduler(make_policy("suanli"), state)
    req = whole_node("a")
    placed = sched.place(req)
    assert not placed.ok and placed.reason == "gpu", placed
    assert feasible_mask(state, req).tolist() == [False, False]
    state.unbind(Allocation("a", (0,), 1000, 0, 0))
    placed = sched.place(req)
    assert placed.allocation is not None and placed.allocation.node == "a" and len(placed.allocation.gpu_indices) == 8


def test_only_a_pinned_request_that_ignores_the_cordon_lands_on_a_cordoned_node() -> None:
    state = cluster(node("a"), node("b"))
    state.set_schedulable("a", False, cordoned=True)
    state.set_schedulable("b", False)  # down: not even a verification lands there
    sched = Scheduler(make_policy("suanli"), state)
    assert sched.place(Request(cpu_milli=1000, gpu_count=1)).reason == "unschedulable"  # a renter's work
    assert sched.place(whole_node("a")).reason == "pinned"  # pinned, but the cordon holds
    verify = sched.place(whole_node("a", cordon=True))
    assert verify.allocation is not None and verify.allocation.node == "a", verify
    assert sched.place(whole_node("b", cordon=True)).reason == "pinned"  # down is not a cordon
    state.set_schedulable("a", True)
    assert not state.cordoned.any()
    copy = state.copy()
    copy.set_schedulable("a", False, cordoned=True)
    assert copy.cordoned.tolist() == [True, False] and state.cordoned.tolist() == [False, False]


def test_ignoring_a_cordon_needs_a_pin() -> None:
    with pytest.raises(ValueError, match="ignore_cordon needs pin_nodes"):
        Request(gpu_count=1, ignore_cordon=True)


def test_preemption_for_a_pinned_request_evicts_only_on_its_node() -> None:
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    spot = []
    for i, name in enumerate(("a", "b")):
        alloc = Allocation(name, (0,), 1000, 0, 0)
        state.bind(alloc)
        spot.append(Candidate(f"spot-{name}", alloc, PriorityClass.SPOT, lost_work=10.0, started_at=float(i)))
    ranks = np.arange(2)
    anywhere = plan_preemption(state, Request(gpu_count=1), spot, ranks)
    assert anywhere is not None and anywhere.node == "a", anywhere
    pinned = plan_preemption(state, Request(gpu_count=1, pin_nodes=frozenset(["b"])), spot, ranks)
    assert pinned is not None and pinned.node == "b" and [v.key for v in pinned.victims] == ["spot-b"], pinned


def test_failure_reason_of_a_pin_to_a_name_the_cluster_does_not_have() -> None:
    state = cluster(node("a"))
    assert failure_reason(state, Request(gpu_count=1, pin_nodes=frozenset(["gone"]))) == "pinned"


def test_feasibility_refuses_an_unknown_pin_and_a_node_that_can_never_fit() -> None:
    inventory = [Node("h1", "H100", 8, 128_000, 2 * 1024 * 1024), Node("r1", "RTX4090", 4, 32_000, 256 * 1024)]
    assert never_fits(inventory, Request(gpu_count=1, pin_nodes=frozenset(["nope"]))) == (
        "no node named nope is registered (the request is pinned to it)"
    )
    assert never_fits(inventory, Request(gpu_count=8, pin_nodes=frozenset(["r1"]))) == (
        "pinned to r1: at most 4 × GPU per node; 8 never fit on one node"
    )
    assert never_fits(inventory, Request(gpu_count=1, gpu_models=frozenset(["H100"]), pin_nodes=frozenset(["r1"]))) == (
        "pinned to r1: no node has GPU model H100 (registered: RTX4090)"
    )
    assert never_fits(inventory, Request(gpu_count=1, nodes=2, pin_nodes=frozenset(["r1"]))) == (
        "pinned to r1: a gang of 2 nodes never fits: at most 1 nodes can each hold one member"
    )
    # the whole of a node fits it, whatever its state (feasibility judges an empty copy)
    assert (
        never_fits(inventory, Request(cpu_milli=32_000, memory_mib=256 * 1024, gpu_count=4, pin_nodes=frozenset(["r1"]))) is None
    )


@st.composite
def pinned(draw: st.DrawFn) -> tuple[list[Node], Request]:
    nodes = [
        Node(f"n{i}", draw(st.sampled_from(["H100", "A100"])), draw(st.sampled_from([0, 1, 4, 8])), 64_000, 256 * 1024)
        for i in range(draw(st.integers(1, 4)))
    ]
    names = draw(st.sets(st.sampled_from([n.name for n in nodes]), min_size=1))
    req = Request(
        cpu_milli=draw(st.sampled_from([1_000, 64_000, 100_000])),
        gpu_count=draw(st.integers(0, 9)),
        gpu_models=frozenset(draw(st.sets(st.sampled_from(["H100", "A100"]), max_size=1))),
        nodes=draw(st.integers(1, 3)),
        pin_nodes=frozenset(names),
    )
    return nodes, req


@settings(max_examples=200, deadline=None)
@given(case=pinned())
def test_a_pin_to_registered_nodes_is_refused_exactly_when_an_empty_copy_cannot_place_it(
    case: tuple[list[Node], Request],
) -> None:
    inventory, req = case
    why = never_fits(inventory, req)
    plan = plan_gang(ClusterState(inventory), make_policy("best_fit"), req)
    assert (why is None) == (plan is not None), f"never_fits said {why!r}, plan {plan}; {req} on {inventory}"
    if plan is not None:
        assert {a.node for a in plan.allocations} <= req.pin_nodes, plan
