"""Invariants under random workloads: never over-allocate; unbind restores exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.scheduler import POLICIES, Request
from tests.scheduler.factories import cluster, node, scheduler

requests = st.one_of(
    st.builds(lambda m, c: Request(cpu_milli=c, gpu_milli=m), st.integers(1, 999), st.integers(0, 16_000)),
    st.builds(lambda k, c: Request(cpu_milli=c, gpu_count=k), st.integers(1, 8), st.integers(0, 32_000)),
    st.builds(lambda c: Request(cpu_milli=c), st.integers(1, 32_000)),
)


@settings(max_examples=40, deadline=None)
@given(
    policy=st.sampled_from(sorted(POLICIES)),
    shapes=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(4, 64)), min_size=1, max_size=6),
    reqs=st.lists(requests, min_size=1, max_size=60),
    seed=st.integers(0, 5),
)
def test_never_over_allocates_and_unbind_restores(policy, shapes, reqs, seed):
    state = cluster(*(node(f"n{i}", gpus=g, cpu=c * 1000) for i, (g, c) in enumerate(shapes)))
    initial = (state.gpu_free.copy(), state.cpu_free.copy(), state.mem_free.copy())
    s = scheduler(policy, state, target=reqs, seed=seed)
    for k, req in enumerate(reqs):
        p = s.schedule(req, key=k)
        assert (state.gpu_free >= 0).all() and (state.gpu_free <= 1000).all()
        assert (state.cpu_free >= 0).all()
        if p.allocation is None:
            assert p.reason in {"cpu", "memory", "gpu", "gpu_model", "unschedulable"}
        else:
            assert len(p.allocation.gpu_indices) == req.gpus_used
    for k in list(s.reservations):
        s.unreserve(k)
    assert (state.gpu_free == initial[0]).all()
    assert (state.cpu_free == initial[1]).all() and (state.mem_free == initial[2]).all()
    assert all((c == 0).all() for c in state.classes.values())
