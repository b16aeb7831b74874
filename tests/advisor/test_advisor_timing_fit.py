"""Training time, decode bound and fitting configurations."""

from __future__ import annotations

import pytest

from suanli.advisor.catalog import find_gpu
from suanli.advisor.errors import AdvisorError
from suanli.advisor.fit import fit_inference, fit_training
from suanli.advisor.models import find_model
from suanli.advisor.timing import decode_throughput, training_flops, training_time


def test_llama2_7b_training_time_by_hand():
    # 6 x 6,738,415,616 x 2e12 = 8.0861e22 FLOPs; 1024 x 312e12 x 0.40 = 1.277952e17 FLOP/s
    # -> 632,739 s = 7.32 days = 179,979 GPU-hours (Meta: 184,320)
    t = training_time(find_model("Llama-2-7B"), 2e12, find_gpu("A100"), 1024)
    assert t.flops == pytest.approx(6 * 6_738_415_616 * 2e12)
    assert t.seconds == pytest.approx(8.0860987392e22 / 1.277952e17, rel=1e-9)
    assert t.days == pytest.approx(7.323, abs=0.001)
    assert t.gpu_hours == pytest.approx(184_320, rel=0.03)


def test_mfu_override_and_moe_active_params():
    m = find_model("Mixtral-8x7B")
    t = training_time(m, 1e9, find_gpu("H100"), 8, mfu=0.5)
    assert t.flops == pytest.approx(6 * m.active_params * 1e9)  # 12.88 B active, not 46.7 B
    assert t.seconds == pytest.approx(t.flops / (8 * 989e12 * 0.5))
    assert t.mfu_source == "given"


def test_lora_flops_are_4nd():
    m = find_model("Llama-2-7B")
    assert training_flops(m, 1e9, "lora") == pytest.approx(4 * m.params * 1e9)


def test_decode_bound_by_hand():
    # Qwen2.5-7B BF16 on A100 80GB: weights 15,231,233,024 B + KV 57,344 x 1024 B per step,
    # streamed at 2,039 GB/s x 0.65 -> 86.7 tokens/s (vLLM measured 84.28)
    d = decode_throughput(find_model("Qwen2.5-7B"), find_gpu("A100"), "bf16", context=1024)
    step = 15_231_233_024 + 57_344 * 1024
    assert d.bytes_per_step == step
    assert d.tokens_per_second_per_sequence == pytest.approx(2039e9 * 0.65 / step)
    batched = decode_throughput(find_model("Qwen2.5-7B"), find_gpu("A100"), "bf16", batch=16, context=1024)
    assert batched.tokens_per_second_total > 10 * d.tokens_per_second_total


def test_bad_time_input():
    with pytest.raises(AdvisorError, match="mfu"):
        training_time(find_model("Llama-2-7B"), 1e9, find_gpu("A100"), 8, mfu=1.5)
    with pytest.raises(AdvisorError, match="tokens"):
        training_time(find_model("Llama-2-7B"), -1, find_gpu("A100"), 8)


def test_fit_inference_70b_bf16():
    opts = fit_inference(find_model("Llama-3-70B"), "bf16", context=8192)
    by_gpu = {o.gpu: o for o in opts}
    # 141 GB of weights: two 80 GB GPUs with TP=2, one 141 GB H200 is not enough, one B200 is
    assert by_gpu["H100 SXM5 80GB"].gpus == 2 and by_gpu["H100 SXM5 80GB"].tp == 2
    assert by_gpu["H200 SXM 141GB"].gpus == 2
    assert by_gpu["B200 (HGX, per GPU)"].gpus == 1
    assert all(o.per_gpu_bytes <= o.gpu_memory_bytes for o in opts)
    assert [o.rank for o in opts] == list(range(1, len(opts) + 1))
    priced = [o.hourly_cost for o in opts if o.hourly_cost is not None]
    assert priced == sorted(priced)  # cheapest replica first


def test_fit_training_full_finetune_zero3():
    opts = fit_training(find_model("Llama-3-70B"), "full", zero=3)
    h100 = next(o for o in opts if o.gpu == "H100 SXM5 80GB")
    # 18 B/param x 70.55e9 / 32 = 39.7 GB of states per GPU + activations: needs 32 x 80 GB
    assert h100.gpus == 32 and h100.dp == 32 and "ZeRO-3" in h100.parallelism
    assert h100.per_gpu_bytes <= 80e9


def test_fit_training_with_tokens_ranks_by_total_cost():
    opts = fit_training(find_model("Llama-3-8B"), "lora", tokens=1e9)
    costs = [o.total_cost for o in opts if o.total_cost is not None]
    assert costs == sorted(costs) and costs
    assert all(o.training_hours and o.training_hours > 0 for o in opts)
