"""Training memory: bytes per parameter, ZeRO partitioning, offload, LoRA/QLoRA, activations."""

from __future__ import annotations

import pytest

from suanli.advisor.errors import AdvisorError
from suanli.advisor.memory import GIB
from suanli.advisor.models import find_model, from_hf_config
from suanli.advisor.training import activation_bytes, estimate_training, lora_params, model_state_bytes, state_bytes


def _gpu(states: dict[str, float]) -> float:
    return sum(v for k, v in states.items() if k != "host_offload")


def test_adamw_mixed_precision_is_16_bytes_per_param():
    # 2 (fp16 weights) + 2 (fp16 grads) + 4 (fp32 master) + 4 (m) + 4 (v) = 16
    s = state_bytes("adamw", "mixed")
    assert (s.weights, s.grads, s.master, s.moments) == (2, 2, 4, 8)
    assert s.total_unsharded == 16
    assert _gpu(model_state_bytes(1e9, 0, zero=0)) == 16e9


@pytest.mark.parametrize(
    "optimizer,mode,total",
    [
        ("adamw", "bf16", 8),  # pure BF16: 2 + 2 + 4 (m, v in bf16); LLaMA-Factory's 8x rule
        ("adamw8bit", "mixed", 10),  # 2 + 2 + 4 master + 2 (8-bit m, v)
        ("sgd", "mixed", 12),  # 2 + 2 + 4 master + 4 momentum
    ],
)
def test_other_optimizers(optimizer, mode, total):
    assert state_bytes(optimizer, mode).total_unsharded == total


def test_zero3_partitioning_by_hand():
    # P = 8e9 params, N = 8 GPUs, largest layer L = 0.5e9
    # paper: 16P/N = 16e9 (+ 4L gathered = 2e9) ; DeepSpeed: 18P/N + 4L = 18e9 + 2e9
    paper = model_state_bytes(8e9, 0.5e9, zero=3, dp=8, accounting="paper")
    ds = model_state_bytes(8e9, 0.5e9, zero=3, dp=8)
    assert _gpu(paper) == pytest.approx(16e9 + 2e9)
    assert _gpu(ds) == pytest.approx(20e9)
    assert ds["gathered_layer"] == 2e9


def test_zero_stages_1_and_2():
    p, n = 8e9, 8
    # ZeRO paper: stage 1 = 4P + 12P/N = 44e9; stage 2 = 2P + 14P/N = 30e9
    assert _gpu(model_state_bytes(p, 0, zero=1, dp=n, accounting="paper")) == pytest.approx(44e9)
    assert _gpu(model_state_bytes(p, 0, zero=2, dp=n, accounting="paper")) == pytest.approx(30e9)
    # DeepSpeed estimator: 4P + 16P/N = 48e9 for stage 2
    assert _gpu(model_state_bytes(p, 0, zero=2, dp=n)) == pytest.approx(48e9)


def test_deepspeed_t5_3b_examples():
    # docs memory.rst, t5-3b (2,851 M params, 32 M largest layer), 8 GPUs on one node
    p, layer = 2.851e9, 32128 * 1024
    assert _gpu(model_state_bytes(p, layer, zero=2, dp=8)) / GIB == pytest.approx(15.93, abs=0.01)
    assert _gpu(model_state_bytes(p, layer, zero=2, dp=8, offload="optimizer")) / GIB == pytest.approx(5.31, abs=0.01)
    assert _gpu(model_state_bytes(p, layer, zero=3, dp=8)) / GIB == pytest.approx(6.10, abs=0.01)
    assert _gpu(model_state_bytes(p, layer, zero=3, dp=8, offload="optimizer")) / GIB == pytest.approx(0.79, abs=0.01)
    assert _gpu(model_state_bytes(p, layer, zero=3, dp=8, offload="all")) / GIB == pytest.approx(0.12, abs=0.01)


def test_offload_needs_zero():
    with pytest.raises(AdvisorError, match="needs ZeRO"):
        model_state_bytes(1e9, 0, zero=0, offload="optimizer")
    with pytest.raises(AdvisorError, match="stage 3"):
        model_state_bytes(1e9, 0, zero=2, offload="all")
    with pytest.raises(AdvisorError, match="zero stage"):
        model_state_bytes(1e9, 0, zero=4)


def test_activations_llama2_7b_by_hand():
    m = find_model("Llama-2-7B")  # h 4096, I 11008, MHA (kv/a = 1), 32 layers, vocab 32000
    # FlashAttention, no recompute: per layer s*b*h*(12 + 4) + 8*s*b*I
    #   = 4096*4096*16 + 8*4096*11008 = 268,435,456 + 360,710,144 = 629,145,600 B; x 32
    a = activation_bytes(m, 4096, 1, "none", flash_attention=True)
    assert a["activations"] == 629_145_600 * 32
    # full recompute: 2*s*b*h per layer + one layer's working set
    full = activation_bytes(m, 4096, 1, "full")
    assert full["activations"] == 2 * 4096 * 4096 * 32 + 629_145_600
    # without FlashAttention the paper's 5*a*s^2*b per layer is added
    eager = activation_bytes(m, 4096, 1, "none", flash_attention=False)
    assert eager["activations"] - a["activations"] == 5 * 32 * 4096 * 4096 * 32
    # logits: 28 B per logit per token by default (>= 12 for an unfused FP32 cross-entropy)
    assert a["logits"] == 28 * 4096 * 32000
    fused = activation_bytes(m, 4096, 1, "none", logit_bytes=0)
    assert fused["logits"] == 0 and fused["activations"] == a["activations"]
    # tensor parallel with sequence parallel divides by t
    assert activation_bytes(m, 4096, 1, "none", tp=4)["activations"] == a["activations"] / 4


def test_lora_parameter_count_by_hand():
    m = find_model("Llama-2-7B")
    # r=8 on q and v: 2 x 8 x (4096 + 4096) x 32 layers = 4,194,304 (LoRA paper's setting)
    assert lora_params(m, 8, "qv") == 4_194_304
    # all linear, r=16: per layer 16 x (4 x 8192 + 3 x (4096 + 11008)) = 16 x 78,080; x 32
    assert lora_params(m, 16) == 16 * (4 * 8192 + 3 * 15104) * 32


def test_qlora_65b_fits_48gb():
    # QLoRA paper: finetuning a 65B model on a single 48 GB GPU
    cfg = {
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "intermediate_size": 22016,
        "vocab_size": 32000,
        "model_type": "llama",
    }
    est = estimate_training(from_hf_config(cfg, "llama-65b"), "qlora", lora_rank=64, seq_len=512, checkpointing="full")
    assert 40e9 < est.per_gpu_bytes < 48e9
    # NF4 base: 4.127 bits over the matrices plus BF16 embeddings, ~34.5 GB
    assert est.components["weights"] == pytest.approx(34.46e9, rel=0.01)


def test_full_finetune_components_sum():
    est = estimate_training(find_model("Llama-3-8B"), "full", gpus=8, zero=3, checkpointing="full")
    assert sum(est.components.values()) == pytest.approx(est.per_gpu_bytes)
    assert est.total_bytes == pytest.approx(8 * est.per_gpu_bytes)
    # 16 B/param sharded 8 ways plus the DeepSpeed FP32 grad partition: 18 x 8.03e9 / 8
    states = est.components["weights"] + est.components["gradients"] + est.components["optimizer_states"]
    assert states == pytest.approx(18 * 8.03e9 / 8, rel=0.001)


def test_lora_is_far_smaller_than_full():
    m = find_model("Llama-3-8B")
    full = estimate_training(m, "full", checkpointing="full")
    lora = estimate_training(m, "lora", checkpointing="full")
    qlora = estimate_training(m, "qlora", checkpointing="full")
    assert qlora.per_gpu_bytes < lora.per_gpu_bytes < full.per_gpu_bytes / 4


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"method": "dpo"}, "method"),
        ({"gpus": 6, "tp": 4}, "multiple"),
        ({"seq_len": -1}, "seq_len"),
        ({"checkpointing": "some"}, "checkpointing"),
        ({"optimizer": "lion"}, "optimizer"),
    ],
)
def test_bad_training_input(kwargs, needle):
    with pytest.raises(AdvisorError, match=needle):
        estimate_training(find_model("Llama-2-7B"), **kwargs)
