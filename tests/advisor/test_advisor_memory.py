"""Inference memory: hand-checked weights, KV cache (GQA and MLA), workspace, TP split."""

from __future__ import annotations

import pytest

from suanli.advisor.errors import AdvisorError
from suanli.advisor.memory import GIB, estimate_inference, kv_bytes_per_token, max_context_for, weight_bytes
from suanli.advisor.models import find_model, from_param_count
from suanli.advisor.precision import find_precision


def test_llama2_7b_parameter_count_by_hand():
    # embeddings 32000*4096 = 131,072,000, untied head doubles it: 262,144,000
    # per layer: attention 4*4096^2 = 67,108,864; SwiGLU 3*4096*11008 = 135,266,304; 2 norms 8,192
    #   -> 202,383,360 x 32 layers = 6,476,267,520; final norm 4,096
    # total 262,144,000 + 6,476,267,520 + 4,096 = 6,738,415,616 (HF's count)
    assert find_model("Llama-2-7B").params == 6_738_415_616


def test_llama2_7b_bf16_weights():
    # 6,738,415,616 params x 2 bytes = 13,476,831,232 B (13.48 GB, 12.55 GiB)
    w = weight_bytes(find_model("llama-2-7b"), find_precision("bf16"))["weights"]
    assert w == 13_476_831_232


def test_llama2_7b_kv_cache_at_4k():
    # 2 (K,V) x 32 layers x 32 KV heads x 128 dims x 2 bytes = 524,288 B/token
    # x 4096 tokens = 2,147,483,648 B = exactly 2 GiB
    est = estimate_inference(find_model("llama-2-7b"), "bf16", context=4096)
    assert est.kv_bytes_per_token == 524_288
    assert est.components["kv_cache"] == 2 * GIB


def test_gqa_kv_cache_llama3_70b_and_fp8_cache():
    # 2 x 80 x 8 x 128 x 2 = 327,680 B/token; an FP8 cache halves it
    m = find_model("Llama-3-70B")
    assert kv_bytes_per_token(m) == 327_680
    assert kv_bytes_per_token(m, "fp8") == 163_840


def test_deepseek_v3_mla_kv_per_token():
    # MLA caches the latent: 61 layers x (512 kv_lora_rank + 64 rope dims) x 2 B = 70,272 B
    assert kv_bytes_per_token(find_model("DeepSeek-V3")) == 70_272


def test_kv_scales_with_context_and_batch():
    m = find_model("Qwen2.5-7B")
    one = estimate_inference(m, "bf16", context=1000, batch=1).components["kv_cache"]
    many = estimate_inference(m, "bf16", context=1000, batch=8).components["kv_cache"]
    assert one == 57_344 * 1000  # 2 x 28 x 4 x 128 x 2 = 57,344 B/token
    assert many == 8 * one


def test_gptq_keeps_embeddings_in_16_bit():
    # Qwen2.5-7B: embeddings + untied head = 2 x 152064 x 3584 = 1,090,011,136 params in BF16
    m = find_model("Qwen2.5-7B")
    gptq = weight_bytes(m, find_precision("gptq-int4"))["weights"]
    naive = weight_bytes(m, find_precision("int4"))["weights"]
    emb = 2 * 152_064 * 3_584
    assert m.embedding_params == emb
    # the gap is the embeddings at 2 B instead of 0.5 B, plus 0.156 bit/weight of group scales
    assert gptq - naive == pytest.approx(emb * 1.5 + m.linear_params * (20 / 128) / 8, rel=1e-3)
    assert gptq / 1e9 == pytest.approx(5.57, abs=0.02)


@pytest.mark.parametrize(
    "name,bits",
    [("q8_0", 8.5), ("q6_k", 6.5625), ("Q4_K_M", 4.85), ("q5_k_m", 5.67), ("GPTQ-Int4", 4 + 20 / 128), ("awq", 4 + 20 / 128)],
)
def test_precision_bits(name, bits):
    assert find_precision(name).bits == pytest.approx(bits)


def test_llama3_70b_q4_k_m_is_in_seed000_range():
    # seed 000: a 70B model at Q4_K_M "still needs 40-50 GB"; 70.55e9 x 4.85 / 8 = 42.8 GB
    # (norms, 161 x 8192 = 1,318,912 params, stay 16-bit)
    m = find_model("Llama-3-70B")
    w = weight_bytes(m, find_precision("q4_k_m"))["weights"]
    assert 40e9 < w < 50e9
    norms = 161 * 8192
    assert m.params == 70_553_706_496
    assert w == pytest.approx((70_553_706_496 - norms) * 4.85 / 8 + norms * 2, rel=1e-9)


def test_activation_workspace_matches_qwen_prefill():
    # 30,720-token prefill of Qwen2.5-7B: 30720 x (3 x 18944 + 4 x 3584) x 2 B = 4.37e9 B,
    # plus FP32 logits for one position (152064 x 4 B)
    est = estimate_inference(find_model("Qwen2.5-7B"), "bf16", context=32768, prefill_tokens=30720)
    assert est.components["activations"] == 30720 * (3 * 18944 + 4 * 3584) * 2 + 152064 * 4


def test_components_sum_to_total_and_overhead_per_gpu():
    est = estimate_inference(find_model("Llama-3-8B"), "bf16", context=8192, gpus=2)
    assert sum(est.components.values()) == pytest.approx(est.total_bytes)
    assert est.components["runtime_overhead"] == 2 * GIB
    assert est.allocated_bytes == pytest.approx(est.total_bytes - 2 * GIB)


def test_tensor_parallel_splits_weights_and_replicates_few_kv_heads():
    m = find_model("Qwen2.5-7B")  # 4 KV heads
    one = estimate_inference(m, "bf16", context=4096, gpus=1)
    eight = estimate_inference(m, "bf16", context=4096, gpus=8)
    # 8 GPUs over 4 KV heads: each GPU keeps one head = 1/4 of the cache, so total KV doubles
    assert eight.components["kv_cache"] == pytest.approx(2 * one.components["kv_cache"])
    assert eight.per_gpu_bytes < one.per_gpu_bytes / 4
    assert any("replicated" in n for n in eight.notes)


def test_rough_model_from_params():
    m = from_param_count("70B")
    assert m.rough and m.params == 70e9
    est = estimate_inference(m, "bf16")
    assert est.components["weights"] == 140e9  # 70e9 x 2 B
    assert est.rough


def test_max_context_for_fits_the_gpu():
    m = find_model("Llama-3-8B")
    ctx = max_context_for(m, "bf16", 24e9)  # a 24 GB card
    at = estimate_inference(m, "bf16", context=ctx).per_gpu_bytes
    over = estimate_inference(m, "bf16", context=ctx + 1).per_gpu_bytes
    assert at <= 24e9 < over


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"precision": "int3"}, "int3"),
        ({"context": -1}, "context"),
        ({"batch": 0}, "batch"),
        ({"kv_cache_dtype": "fp4"}, "fp4"),
        ({"gpus": -2}, "gpus"),
    ],
)
def test_bad_input_names_the_value(kwargs, needle):
    with pytest.raises(AdvisorError, match=needle):
        estimate_inference(find_model("Llama-2-7B"), **kwargs)


def test_fit_on_gpu_reports_room_left():
    from suanli.advisor.memory import fit_on_gpu, max_batch_for

    m = find_model("Qwen2.5-72B")
    fit = fit_on_gpu(m, "awq", "H100 SXM5 80GB", 80e9, context=32768)
    assert fit.fits and fit.headroom_bytes == pytest.approx(80e9 - fit.per_gpu_bytes)
    n = max_batch_for(m, "awq", 80e9, context=32768)
    assert n == fit.max_batch
    assert estimate_inference(m, "awq", context=32768, batch=n).per_gpu_bytes <= 80e9
    assert estimate_inference(m, "awq", context=32768, batch=n + 1).per_gpu_bytes > 80e9
    # BF16 weights alone (145 GB) cannot fit one 80 GB GPU
    assert not fit_on_gpu(m, "bf16", "H100 SXM5 80GB", 80e9).fits
    assert max_batch_for(m, "bf16", 80e9) == 0
