"""The seed articles' own numbers, reproduced (or shown to be consistent)."""

from __future__ import annotations

import pytest

from suanli.advisor.cost import best_per_plan, cost_options
from suanli.advisor.fit import fit_training
from suanli.advisor.memory import weight_bytes
from suanli.advisor.models import find_model, from_param_count
from suanli.advisor.precision import find_precision
from suanli.advisor.pricebook import default_pricebook
from suanli.advisor.tco import GPU_PURCHASE_PRICE


def test_seed000_memory_claims():
    # "34B: FP16 ~70 GB, 4-bit 35-40 GB"; "70B: FP16 140 GB+, Q4_K_M still 40-50 GB"
    b34 = from_param_count("34B")
    assert weight_bytes(b34, find_precision("fp16"))["weights"] == pytest.approx(68e9)
    l70 = find_model("Llama-3-70B")
    assert weight_bytes(l70, find_precision("bf16"))["weights"] > 140e9
    assert 40e9 < weight_bytes(l70, find_precision("q4_k_m"))["weights"] < 50e9


def test_seed001_configuration_table():
    # "10B and below: 4-8 x RTX 4090 / 910B 64G"; "10B-70B: 16-32 x A100 80G"
    seven = {o.gpu: o.gpus for o in fit_training(find_model("Llama-2-7B"), "full", zero=3)}
    assert 4 <= seven["RTX 4090"] <= 8 and seven["Ascend 910B2"] <= 8
    seventy = {o.gpu: o.gpus for o in fit_training(find_model("Llama-3-70B"), "full", zero=3)}
    assert 16 <= seventy["A100 80GB SXM4"] <= 32


def test_seed003_three_month_h100_rental():
    # "H100 80G x 8 bare metal 84,480 a month; three months about 250 k"
    best = best_per_plan(cost_options(default_pricebook(), "H100", 8, 3 * 720))
    assert best["monthly"].total == pytest.approx(3 * 84_480)  # 253,440 CNY


def test_seed003_eight_h100_hardware_over_1_6_million():
    # "building the same scale costs over 1.6 M in hardware alone"
    price, _ = GPU_PURCHASE_PRICE["H100 SXM5 80GB"]
    assert 8 * price > 1.6e6


def test_seed004_price_table_is_in_the_book():
    a100 = {o.provider: o.price_per_gpu_hour for o in default_pricebook().for_gpu("A100 80GB SXM4", "on_demand") if not o.derived}
    assert sorted(v for k, v in a100.items() if "seed 000" not in k) == [18.6, 19.9, 20.1, 22.4, 25.8]
