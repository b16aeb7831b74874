"""Properties that must hold for any input (Hypothesis): more context or sequences never
need less memory, more ZeRO-3 GPUs never need more per GPU, the optimal purchase plan is
never dearer than seed 004's tree, which is never dearer than all on-demand."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from suanli.advisor.memory import estimate_inference
from suanli.advisor.models import bundled_models
from suanli.advisor.plan import PlanPrices, decision_tree_plan, optimal_plan
from suanli.advisor.tco import TCOAssumptions, compute_tco
from suanli.advisor.training import estimate_training

MODELS = st.sampled_from(sorted(bundled_models()))
PRECISIONS = st.sampled_from(["bf16", "fp8", "int4", "gptq-int4", "awq", "q4_k_m", "q8_0"])


@settings(max_examples=60, deadline=None)
@given(MODELS, PRECISIONS, st.integers(1, 200_000), st.integers(1, 200_000), st.integers(1, 64))
def test_inference_memory_monotone_in_context_and_batch(name, precision, c1, c2, batch):
    m = bundled_models()[name]
    lo, hi = sorted((c1, c2))
    small = estimate_inference(m, precision, context=lo, batch=batch)
    large = estimate_inference(m, precision, context=hi, batch=batch)
    more = estimate_inference(m, precision, context=lo, batch=batch + 1)
    assert small.total_bytes <= large.total_bytes
    assert small.total_bytes <= more.total_bytes
    assert abs(sum(small.components.values()) - small.total_bytes) < 1


@settings(max_examples=40, deadline=None)
@given(MODELS, st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]), st.sampled_from([512, 2048, 8192]))
def test_zero3_per_gpu_memory_never_grows_with_gpus(name, gpus, seq):
    m = bundled_models()[name]
    a = estimate_training(m, "full", gpus=gpus, zero=3, seq_len=seq, checkpointing="full")
    b = estimate_training(m, "full", gpus=gpus * 2, zero=3, seq_len=seq, checkpointing="full")
    assert b.per_gpu_bytes <= a.per_gpu_bytes


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.floats(0.0, 0.9))
def test_tco_build_cost_falls_with_utilisation(u1, u2, residual):
    lo, hi = sorted((u1, u2))
    a = compute_tco(TCOAssumptions(utilization=lo, residual_fraction=residual))
    b = compute_tco(TCOAssumptions(utilization=hi, residual_fraction=residual))
    assert b.build_cost_per_gpu_hour <= a.build_cost_per_gpu_hour + 1e-9
    assert abs(a.break_even_utilization - b.break_even_utilization) < 1e-12
    # at the break-even utilisation building costs exactly the rent
    at = compute_tco(TCOAssumptions(utilization=min(1.0, a.break_even_utilization), residual_fraction=residual))
    if a.break_even_utilization <= 1:
        assert abs(at.build_cost_per_gpu_hour - at.rent_cost_per_gpu_hour) < 1e-6


PRICES = PlanPrices(
    provider="p",
    gpu="A100 80GB SXM4",
    on_demand=18.6,
    monthly=18.6 / 1.3,
    reserved=18.6 * 0.45,
    spot=18.6 * 0.2,
    spot_overhead=0.06,
    sources={},
)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=72), st.floats(0.0, 1.0))
@example([0, 1, 1, 2], 1e-05)  # HiGHS's default MIP gap let "optimal" cost more than the tree
def test_optimal_plan_beats_tree_beats_on_demand(demand, tolerance):
    d = np.asarray(demand, dtype=float)
    if d.sum() == 0:
        d[0] = 1
    best = optimal_plan(d, PRICES, tolerance=tolerance)
    tree = decision_tree_plan(d, PRICES, tolerance=tolerance)
    assert best.total_cost <= tree.total_cost + 1e-6
    assert tree.total_cost <= tree.all_on_demand_cost + 1e-6
    # every hour's demand is covered and spot stays within the tolerance
    assert best.spot_gpu_hours <= tolerance * d.sum() + 1e-6
