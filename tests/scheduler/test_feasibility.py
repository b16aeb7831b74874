"""Feasibility at submission (issue 19): a request is refused exactly when the scheduler
itself cannot place it on an empty copy of the inventory, and one that is accepted
always starts on that empty cluster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.scheduler import ClusterState, Node, PriorityClass, Request, Scheduler, make_policy
from suanli.scheduler.feasibility import never_fits
from suanli.scheduler.gang import bind_gang

MODELS = ("H100", "A100", "RTX4090")


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    out = []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        split = draw(st.integers(0, gpus)) if gpus else 0
        islands = tuple(g for g in (tuple(range(split)), tuple(range(split, gpus))) if g) if split else ()
        out.append(
            Node(
                name=f"n{i}",
                gpu_model=draw(st.sampled_from(MODELS)),
                gpu_count=gpus,
                cpu_milli=draw(st.sampled_from([4_000, 16_000, 64_000, 128_000])),
                memory_mib=draw(st.sampled_from([16 * 1024, 256 * 1024, 2 * 1024 * 1024])),
                nvlink_islands=islands,
                ib_leaf=draw(st.sampled_from(["", "leaf-a", "leaf-b"])),
            )
        )
    return out


@st.composite
def requests(draw: st.DrawFn) -> Request:
    kind = draw(st.sampled_from(["whole", "share", "cpu"]))
    return Request(
        cpu_milli=draw(st.sampled_from([0, 1_000, 8_000, 64_000, 200_000])),
        memory_mib=draw(st.sampled_from([0, 8 * 1024, 200 * 1024, 3 * 1024 * 1024])),
        gpu_count=draw(st.integers(1, 9)) if kind == "whole" else 0,
        gpu_milli=draw(st.integers(1, 999)) if kind == "share" else 0,
        gpu_models=frozenset(draw(st.sets(st.sampled_from(MODELS), max_size=2))),
        priority=draw(st.sampled_from(list(PriorityClass))),
        nodes=draw(st.integers(1, 4)),
    )


def scheduler_places(inventory: list[Node], req: Request, policy: str) -> bool:
    """The scheduler's own answer on an empty copy: the ordinary cycle for one node,
    the gang planner (binding every member) for a gang."""
    state = ClusterState(inventory)
    if req.nodes == 1:
        sched = Scheduler(make_policy(policy), state)
        placement = sched.schedule(req)
        return placement.ok
    return bind_gang(state, make_policy(policy), req) is not None


@settings(max_examples=400, deadline=None)
@given(inventory=nodes(), req=requests(), policy=st.sampled_from(["best_fit", "suanli", "first_fit"]))
def test_refused_exactly_when_an_empty_copy_cannot_place_it(inventory: list[Node], req: Request, policy: str) -> None:
    why = never_fits(inventory, req)
    placed = scheduler_places(inventory, req, policy)
    assert (why is None) == placed, f"never_fits said {why!r}, the scheduler ({policy}) placed it: {placed}; {req} on {inventory}"


def test_the_refusal_names_the_limit_and_the_largest_that_fits() -> None:
    inventory = [
        Node("h1", "H100", 8, 128_000, 2 * 1024 * 1024),
        Node("r1", "RTX4090", 4, 32_000, 256 * 1024),
        Node("r2", "RTX4090", 4, 64_000, 128 * 1024),
    ]
    cases = [
        (Request(gpu_count=9, gpu_models=frozenset({"H100"})), "at most 8 × H100 per node; 9 never fit on one node"),
        (
            Request(gpu_count=1, gpu_models=frozenset({"RTX4090"}), memory_mib=999999 * 1024),
            "no RTX4090 node has 999999 GiB of memory; the largest has 256 GiB",
        ),
        (Request(gpu_count=1, cpu_milli=1_000_000), "no GPU node has 1000 CPUs; the largest has 128 CPUs"),
        (
            # CPU and memory are judged together: the 64-CPU node has only 128 GiB
            Request(gpu_count=1, gpu_models=frozenset({"RTX4090"}), cpu_milli=40_000, memory_mib=200 * 1024),
            "no RTX4090 node has 200 GiB of memory; the largest has 128 GiB",
        ),
        (Request(gpu_count=4, nodes=50), "a gang of 50 nodes never fits: at most 3 nodes can each hold one member"),
        (Request(gpu_count=1, gpu_models=frozenset({"B300"})), "no node has GPU model B300 (registered: H100, RTX4090)"),
    ]
    for req, said in cases:
        assert never_fits(inventory, req) == said, req
    assert never_fits(inventory, Request(gpu_count=8, memory_mib=2 * 1024 * 1024)) is None
    assert never_fits([], Request(cpu_milli=1)) == "no nodes are registered"
