"""The reclaim planner (``scheduler.reclaim``) on hand-built clusters: the recipe the
replay measures and the live control plane runs."""

from __future__ import annotations

import numpy as np
import pytest

from suanli.scheduler import Allocation, PriorityClass, Request
from suanli.scheduler.preemption import Candidate
from suanli.scheduler.reclaim import Claim, plan_reclaim, unclaimed
from tests.scheduler.factories import cluster, node

SPOT, OD = PriorityClass.SPOT, PriorityClass.ON_DEMAND


def running(state, *specs):
    """specs: (key, node, gpus, priority, lost_work), optionally with (started_at,
    milli per GPU) appended (default: 0, whole GPUs); binds each."""
    out = []
    for key, name, gpus, prio, lost, *extra in specs:
        started, milli = extra or (0.0, 1000)
        alloc = Allocation(name, gpus, milli, 0, 0)
        state.bind(alloc)
        out.append(Candidate(key, alloc, prio, lost, started))
    return out


def od(gpus: int = 1, prio: PriorityClass = OD) -> Request:
    return Request(gpu_count=gpus, priority=prio)


def ranks(state) -> np.ndarray:
    return np.arange(state.num_nodes)


def test_single_node_claim_gets_the_spot_victim_on_a_full_node():
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    cands = running(state, ("s", "a", (0,), SPOT, 10.0), ("o", "b", (0,), OD, 0.0))
    [plan] = plan_reclaim(state, [Claim("d", od())], cands, ranks(state))
    assert plan.beneficiary == "d" and plan.nodes == ("a",)
    assert [v.key for v in plan.victims] == ["s"] and plan.workloads == ("s",) and plan.lost_work == 10.0


def test_a_claim_that_fits_already_gets_no_plan():
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    cands = running(state, ("s", "a", (0,), SPOT, 10.0))
    assert plan_reclaim(state, [Claim("d", od())], cands, ranks(state)) == []
    # a gang fits already when enough nodes can host one member each
    state = cluster(node("a", gpus=2), node("b", gpus=2), node("c", gpus=2))
    cands = running(state, ("s", "a", (0,), SPOT, 10.0))
    assert plan_reclaim(state, [Claim("g", od(), num_nodes=3)], cands, ranks(state)) == []


def test_gang_gets_one_plan_per_missing_node_on_distinct_nodes():
    # a is free, b and c are full of spot work: a 3-node gang lacks two nodes.
    state = cluster(node("a", gpus=1), node("b", gpus=1), node("c", gpus=1))
    cands = running(state, ("s1", "b", (0,), SPOT, 5.0), ("s2", "c", (0,), SPOT, 7.0))
    [plan] = plan_reclaim(state, [Claim("g", od(), num_nodes=3)], cands, ranks(state))
    assert plan.beneficiary == "g" and sorted(plan.nodes) == ["b", "c"] and len(plan.plans) == 2
    assert set(plan.workloads) == {"s1", "s2"}
    assert plan.nodes[0] == "b"  # nodes are picked one at a time, cheapest first


def test_gang_gets_nothing_unless_it_can_be_made_whole():
    # Only b has spot work; a and c run on-demand work, which is never a victim. A 2-node
    # gang could get b but no second node: all or nothing, so no plan, and s stays
    # offered to the next claim.
    state = cluster(node("a", gpus=1), node("b", gpus=1), node("c", gpus=1))
    cands = running(state, ("o1", "a", (0,), OD, 0.0), ("s", "b", (0,), SPOT, 5.0), ("o2", "c", (0,), OD, 0.0))
    assert plan_reclaim(state, [Claim("g", od(), num_nodes=2)], cands, ranks(state)) == []
    waiting = [Claim("g", od(), num_nodes=2), Claim("d", od())]
    [plan] = plan_reclaim(state, waiting, cands, ranks(state))
    assert plan.beneficiary == "d" and plan.workloads == ("s",)


def test_a_victim_is_not_offered_to_a_later_claim():
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    cands = running(state, ("cheap", "a", (0,), SPOT, 10.0), ("dear", "b", (0,), SPOT, 100.0))
    waiting = [Claim("first", od()), Claim("second", od()), Claim("third", od())]
    plans = plan_reclaim(state, waiting, cands, ranks(state))
    # priority order: the first claim gets the cheaper victim, the second the other,
    # the third nothing (both victims are spoken for)
    assert [(p.beneficiary, p.workloads) for p in plans] == [("first", ("cheap",)), ("second", ("dear",))]


def test_every_allocation_of_a_victim_workload_leaves_the_pool():
    # A spot gang "g" has members on a and b; evicting one member stops the whole gang,
    # so a later claim is not offered its other member (it gets "s" on c instead).
    state = cluster(node("a", gpus=1), node("b", gpus=1), node("c", gpus=1))
    cands = running(
        state,
        (("g", 0), "a", (0,), SPOT, 1.0),
        (("g", 1), "b", (0,), SPOT, 1.0),
        (("s", 0), "c", (0,), SPOT, 50.0),
    )
    job = lambda key: key[0]  # noqa: E731
    plans = plan_reclaim(state, [Claim("d1", od()), Claim("d2", od())], cands, ranks(state), workload_of=job)
    assert [(p.beneficiary, p.nodes, p.workloads) for p in plans] == [("d1", ("a",), ("g",)), ("d2", ("c",), ("s",))]
    assert unclaimed(cands, plans[:1], job) == cands[2:]
    # Without workload_of each allocation is its own workload: d2 would get g's other member.
    plans = plan_reclaim(state, [Claim("d1", od()), Claim("d2", od())], cands, ranks(state))
    assert plans[1].nodes == ("b",)


def test_the_strategy_is_respected():
    # One 2-GPU node: GPU 0 holds two 500-milli spot jobs (lost 10 each, started 30
    # and 20), GPU 1 one 900-milli job (lost 15, started 10).
    state = cluster(node("a", gpus=2))
    cands = running(
        state,
        ("s1", "a", (0,), SPOT, 10.0, 30.0, 500),
        ("s2", "a", (0,), SPOT, 10.0, 20.0, 500),
        ("s3", "a", (1,), SPOT, 15.0, 10.0, 900),
    )
    [least] = plan_reclaim(state, [Claim("d", od())], cands, ranks(state), "least_lost_work")
    [lowest] = plan_reclaim(state, [Claim("d", od())], cands, ranks(state), "lowest_priority_first")
    assert least.workloads == ("s3",)  # one eviction: 15 + 300 < 10 + 10 + 2 * 300
    assert lowest.workloads == ("s1", "s2")  # most recently started first
    with pytest.raises(KeyError):
        plan_reclaim(state, [Claim("d", od())], cands, ranks(state), "no_such_strategy")


def test_spot_claims_get_no_victims():
    state = cluster(node("a", gpus=1))
    cands = running(state, ("s", "a", (0,), SPOT, 1.0))
    assert plan_reclaim(state, [Claim("t", od(prio=SPOT))], cands, ranks(state)) == []


def test_planning_changes_nothing():
    state = cluster(node("a", gpus=1), node("b", gpus=2))
    cands = running(state, ("s1", "a", (0,), SPOT, 1.0), ("s2", "b", (0, 1), SPOT, 2.0))
    before = [a.copy() for a in (state.cpu_free, state.mem_free, state.gpu_free, state.version)]
    given = list(cands)
    plans = plan_reclaim(state, [Claim("g", od(), num_nodes=2), Claim("d", od())], cands, ranks(state))
    assert [p.beneficiary for p in plans] == ["g"]
    assert cands == given
    for old, new in zip(before, (state.cpu_free, state.mem_free, state.gpu_free, state.version), strict=True):
        np.testing.assert_array_equal(old, new)


def test_deterministic_and_tie_broken_by_rank():
    # Two identical spot victims on two nodes: the seeded rank decides, the same way every time.
    state = cluster(node("a", gpus=1), node("b", gpus=1))
    cands = running(state, ("sa", "a", (0,), SPOT, 5.0), ("sb", "b", (0,), SPOT, 5.0))
    for r, want in ((np.array([0, 1]), "a"), (np.array([1, 0]), "b")):
        runs = {plan_reclaim(state, [Claim("d", od())], cands, r)[0].nodes for _ in range(3)}
        assert runs == {(want,)}


def test_claim_needs_a_node():
    with pytest.raises(ValueError):
        Claim("x", od(), num_nodes=0)
