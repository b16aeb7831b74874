"""Published reference points, and how far the estimator is from each.

This is how the advisor "knows": every row is a number someone measured or published,
with its source, the advisor's estimate for the same set-up, and the relative error.
``tests/advisor/test_advisor_validation.py`` asserts each row within its tolerance and
the median within 10 %; ``bench/advisor_accuracy.py`` prints the table for BENCHMARKS.md.

Confidence: V = value read from the source (or a verbatim copy of it) while writing this;
R = recalled from the named source, not re-read here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from suanli.advisor.catalog import find_gpu
from suanli.advisor.memory import GIB, estimate_inference, weight_bytes
from suanli.advisor.models import find_model, from_hf_config, from_param_count
from suanli.advisor.precision import find_precision
from suanli.advisor.timing import decode_throughput, training_time
from suanli.advisor.training import estimate_training, host_bytes_per_node, model_state_bytes

QWEN_BENCH = (
    "QwenLM/Qwen2.5 docs/source/benchmark/speed_benchmark.rst @010c37c3 "
    "(HF transformers, A100 80GB, bs 1, 2048 generated; 'GB' columns are GiB)"
)
QWEN_VLLM = "QwenLM/Qwen2.5 speed_benchmark.rst @010c37c3 (vLLM 0.6.3, A100 80GB, bs 1, 1-token prompt, 2048 generated)"
HF_LLAMA31 = "huggingface.co/blog/llama31, 'Inference memory requirements' table (GB)"
THEBLOKE = "TheBloke GGUF model cards, 'Provided files' table (GB)"
DS_MEMORY = "DeepSpeed docs memory.rst (deepspeedai/DeepSpeed @0cca5393), estimator examples"
LLAMA2 = "Llama 2 paper (arXiv:2307.09288) Table 2: A100-80GB GPU-hours for 2 T tokens"
LLAMA3 = "Meta Llama 3 model card: H100-80GB GPU-hours for 15 T+ tokens"
SWIFT = (
    "modelscope/ms-swift docs/source_en/LLM/Benchmark.md @46922151 (A100 80GB, torch 2.1.1, "
    "flash-attn 2.3.4; LoRA r=8 on c_attn, batch 1, checkpointing + flash unless stated; "
    "GiB as reported by the framework)"
)

#: Qwen-1 (remote-code) architectures used by the ms-swift benchmark; the MLP width is half
#: of config.json's intermediate_size (w1 and w2 each take half).
QWEN1 = {
    "qwen-1_8b-chat": {
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 5504,
        "vocab_size": 151936,
        "attention_bias": True,
    },
    "qwen-7b-chat": {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 151936,
        "attention_bias": True,
    },
    "qwen-14b-chat": {
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "intermediate_size": 13696,
        "vocab_size": 152064,
        "attention_bias": True,
    },
}


@dataclass(frozen=True)
class ReferencePoint:
    """One published number and the estimator's answer for the same set-up."""

    kind: str  # memory | weights | training-memory | time | decode
    case: str
    published: float
    unit: str
    source: str
    confidence: str
    tolerance: float  # relative error the test allows for this row
    estimate: Callable[[], float]
    in_median: bool = True  # False: a bound or a sanity check, reported but not averaged

    @property
    def estimated(self) -> float:
        return self.estimate()

    @property
    def relative_error(self) -> float:
        return (self.estimated - self.published) / self.published


def _qwen_points() -> list[ReferencePoint]:
    table: dict[str, dict[int, tuple[float | None, ...]]] = {  # input length -> BF16, GPTQ-Int8, GPTQ-Int4, AWQ (GiB)
        "Qwen2.5-7B": {
            1: (14.38, 8.42, 5.52, 5.39),
            6144: (15.38, 9.43, 6.52, 6.39),
            14336: (16.91, 10.96, 8.05, 7.92),
            30720: (19.97, 14.01, 11.11, 10.98),
        },
        "Qwen2.5-14B": {
            1: (28.08, 16.11, 9.94, 9.79),
            6144: (29.50, 17.61, 11.36, 11.22),
            14336: (31.95, 19.98, 13.81, 13.67),
            30720: (36.85, 24.88, 18.71, 18.57),
        },
        "Qwen2.5-32B": {
            1: (61.58, 33.56, 18.94, 18.67),
            6144: (63.72, 35.86, 21.09, 20.81),
            14336: (67.31, 39.28, 24.67, 24.39),
            30720: (74.47, 46.45, 31.84, 31.56),
        },
        "Qwen2.5-72B": {1: (136.20, 72.61, 39.91, 39.44), 6144: (140.00, 77.81, 42.50, None)},
    }
    points = []
    for model, rows in table.items():
        for prompt, values in rows.items():
            for prec, value in zip(("bf16", "gptq-int8", "gptq-int4", "awq"), values):
                if value is None:
                    continue

                def est(m=model, p=prec, n=prompt) -> float:
                    e = estimate_inference(find_model(m), p, context=n + 2048, prefill_tokens=n)
                    return e.allocated_bytes / GIB

                points.append(
                    ReferencePoint("memory", f"{model} {prec} prompt {prompt}+2048", value, "GiB", QWEN_BENCH, "V", 0.08, est)
                )
    return points


def _weight_points() -> list[ReferencePoint]:
    points = []
    hf: dict[tuple[str, str], float] = {
        ("Llama-3-8B", "bf16"): 16,
        ("Llama-3-8B", "fp8"): 8,
        ("Llama-3-8B", "int4"): 4,
        ("Llama-3-70B", "bf16"): 140,
        ("Llama-3-70B", "fp8"): 70,
        ("Llama-3-70B", "int4"): 35,
        ("405B", "bf16"): 810,
        ("405B", "fp8"): 405,
        ("405B", "int4"): 203,
    }
    for (model, prec), value in hf.items():

        def est(m=model, p=prec) -> float:
            arch = from_param_count("405.85B") if m == "405B" else find_model(m)
            return weight_bytes(arch, find_precision(p))["weights"] / 1e9

        name = "Llama-3.1-405B (405.85 B params)" if model == "405B" else model.replace("3", "3.1")
        points.append(ReferencePoint("weights", f"{name} {prec}", value, "GB", HF_LLAMA31, "V", 0.05, est))
    gguf = {
        ("Llama-2-7B", "q4_k_m"): (4.08, "R"),
        ("Llama-2-7B", "q5_k_m"): (4.78, "R"),
        ("Llama-2-7B", "q6_k"): (5.53, "R"),
        ("Llama-2-7B", "q8_0"): (7.16, "R"),
        ("Llama-2-13B", "q4_k_m"): (7.87, "V"),
        ("Llama-2-13B", "q4_0"): (7.32, "V"),
        ("Llama-2-13B", "q5_k_m"): (9.23, "R"),
        ("Llama-2-13B", "q6_k"): (10.68, "R"),
        ("Llama-2-13B", "q8_0"): (13.83, "R"),
        ("Llama-2-70B", "q4_k_m"): (41.42, "R"),
        ("Llama-2-70B", "q5_k_m"): (48.75, "R"),
        ("Llama-2-70B", "q8_0"): (73.29, "R"),
        ("Mixtral-8x7B", "q4_k_m"): (26.44, "R"),
        ("Mixtral-8x7B", "q5_k_m"): (32.23, "R"),
        ("Mixtral-8x7B", "q6_k"): (38.38, "R"),
        ("Mixtral-8x7B", "q8_0"): (49.62, "R"),
    }
    for (model, prec), (value, conf) in gguf.items():

        def est(m=model, p=prec) -> float:
            return weight_bytes(find_model(m), find_precision(p))["weights"] / 1e9

        source = THEBLOKE + (" (13B: localmodels/Llama-2-13B-ggml card, same k-quants)" if conf == "V" else "")
        points.append(ReferencePoint("weights", f"{model} GGUF {prec.upper()}", value, "GB", source, conf, 0.10, est))
    return points


def _training_points() -> list[ReferencePoint]:
    t5_3b, t5_3b_layer = 2.851e9, 32128 * 1024  # DeepSpeed docs: 2,851 M params, 32 M largest layer
    t5_large = 737.67e6

    def states(p: float, layer: float, zero: int, dp: int, offload: str = "none") -> float:
        d = model_state_bytes(p, layer, zero=zero, dp=dp, offload=offload)
        return sum(v for k, v in d.items() if k != "host_offload")

    ds = [
        ("t5-3b ZeRO-2, 8 GPUs", 15.93, lambda: states(t5_3b, t5_3b_layer, 2, 8) / GIB),
        ("t5-3b ZeRO-2 + optimizer offload", 5.31, lambda: states(t5_3b, t5_3b_layer, 2, 8, "optimizer") / GIB),
        ("t5-3b ZeRO-2 offload: host per node", 127.48, lambda: host_bytes_per_node(t5_3b, 2, "optimizer") / GIB),
        ("t5-3b ZeRO-3, 8 GPUs", 6.10, lambda: states(t5_3b, t5_3b_layer, 3, 8) / GIB),
        ("t5-3b ZeRO-3 + optimizer offload", 0.79, lambda: states(t5_3b, t5_3b_layer, 3, 8, "optimizer") / GIB),
        ("t5-3b ZeRO-3 offload: host per node", 63.74, lambda: host_bytes_per_node(t5_3b, 3, "optimizer") / GIB),
        ("t5-3b ZeRO-3 + param & optimizer offload", 0.12, lambda: states(t5_3b, t5_3b_layer, 3, 8, "all") / GIB),
        ("t5-3b ZeRO-3 full offload: host per node", 71.71, lambda: host_bytes_per_node(t5_3b, 3, "all") / GIB),
        ("t5-large ZeRO-3, 4 GPUs (MiB)", 3291, lambda: states(t5_large, 32128 * 1024, 3, 4) / 2**20),
    ]
    points = [
        ReferencePoint("training-memory", case, value, "GiB" if "MiB" not in case else "MiB", DS_MEMORY, "V", 0.05, fn)
        for case, value, fn in ds
    ]
    points.append(
        ReferencePoint(
            "training-memory",
            "GPT-2 1.5B mixed-precision Adam model states",
            24.0,
            "GB",
            "ZeRO paper (arXiv:1910.02054) §3.1: 'at least 24 GB'",
            "V",
            0.02,
            lambda: states(1.5e9, 0, 0, 1) / 1e9,
        )
    )

    def qlora_65b() -> float:
        cfg = {
            "hidden_size": 8192,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "intermediate_size": 22016,
            "vocab_size": 32000,
            "model_type": "llama",
        }
        est = estimate_training(from_hf_config(cfg, "llama-65b"), "qlora", lora_rank=64, seq_len=512, checkpointing="full")
        return est.per_gpu_bytes / 1e9

    points.append(
        ReferencePoint(
            "training-memory",
            "QLoRA LLaMA-65B, r=64 all linear, seq 512, checkpointing (bound: < 48 GB)",
            48.0,
            "GB",
            "QLoRA paper (arXiv:2305.14314): 65B finetuning '<48 GB' on one GPU",
            "V",
            0.15,
            qlora_65b,
            in_median=False,
        )
    )
    return points


def _swift_points() -> list[ReferencePoint]:
    """ms-swift's LoRA training measurements: totals (reported, not in the median) and the
    differences between its flash/checkpointing runs, which isolate the activation terms."""

    def lora(model: str, seq: int, batch: int = 1, checkpointing: str = "full", flash: bool = True) -> float:
        arch = from_hf_config(QWEN1[model], model)
        est = estimate_training(
            arch,
            "lora",
            seq_len=seq,
            micro_batch=batch,
            lora_rank=8,
            lora_targets="qv",
            checkpointing=checkpointing,
            flash_attention=flash,
        )
        return est.per_gpu_bytes / GIB

    lengths = {
        "qwen-1_8b-chat": (6.99, 10.71, 16.35, 23.80, 37.03),
        "qwen-7b-chat": (18.01, 21.73, 27.74, 35.31, 48.41),
        "qwen-14b-chat": (30.14, 34.43, 40.14, 47.95, 60.74),
    }
    points = []
    for model, values in lengths.items():
        for seq, value in zip((512, 1024, 2048, 4096, 8192), values):
            points.append(
                ReferencePoint(
                    "training-total",
                    f"{model} LoRA, max length {seq}",
                    value,
                    "GiB",
                    SWIFT,
                    "V",
                    0.30,
                    partial(lora, model, seq),
                    in_median=False,
                )
            )
    for batch, value in ((2, 43.11), (4, 63.81)):
        points.append(
            ReferencePoint(
                "training-total",
                f"qwen-7b-chat LoRA, length 2048, batch {batch}",
                value,
                "GiB",
                SWIFT,
                "V",
                0.30,
                partial(lora, "qwen-7b-chat", 2048, batch),
                in_median=False,
            )
        )
    for flash, ckpt, value in ((True, "none", 37.70), (False, "full", 27.71), (False, "none", 57.67)):
        label = f"flash {'on' if flash else 'off'}, checkpointing {'on' if ckpt == 'full' else 'off'}"
        points.append(
            ReferencePoint(
                "training-total",
                f"qwen-7b-chat LoRA, length 2048, {label}",
                value,
                "GiB",
                SWIFT,
                "V",
                0.30,
                partial(lora, "qwen-7b-chat", 2048, checkpointing=ckpt, flash=flash),
                in_median=False,
            )
        )
    # Differences between runs cancel the framework's fixed and per-token overheads and leave
    # the activation terms the formulas predict: dropping checkpointing (flash on) adds the
    # saved tensors of every layer; dropping flash (no checkpointing) adds 5·a·s²·b per layer.
    points.append(
        ReferencePoint(
            "activations (difference)",
            "qwen-7b-chat 2048: no checkpointing minus checkpointing (flash on)",
            37.70 - 27.74,
            "GiB",
            SWIFT,
            "V",
            0.20,
            lambda: lora("qwen-7b-chat", 2048, checkpointing="none") - lora("qwen-7b-chat", 2048),
        )
    )
    points.append(
        ReferencePoint(
            "activations (difference)",
            "qwen-7b-chat 2048: no flash minus flash (no checkpointing)",
            57.67 - 37.70,
            "GiB",
            SWIFT,
            "V",
            0.10,
            lambda: (
                lora("qwen-7b-chat", 2048, checkpointing="none", flash=False) - lora("qwen-7b-chat", 2048, checkpointing="none")
            ),
        )
    )
    return points


def _time_points() -> list[ReferencePoint]:
    a100, h100 = find_gpu("A100"), find_gpu("H100")
    rows = [
        ("Llama-2-7B", 2e12, a100, 184_320, LLAMA2),
        ("Llama-2-13B", 2e12, a100, 368_640, LLAMA2),
        ("Llama-2-70B", 2e12, a100, 1_720_320, LLAMA2),
        ("Llama-3-8B", 15e12, h100, 1_300_000, LLAMA3),
        ("Llama-3-70B", 15e12, h100, 6_400_000, LLAMA3),
    ]
    points = []
    for model, tokens, gpu, hours, source in rows:

        def est(m=model, d=tokens, g=gpu) -> float:
            return training_time(find_model(m), d, g, 1024).gpu_hours

        points.append(
            ReferencePoint(
                "time",
                f"{model}, {tokens / 1e12:g} T tokens on {gpu.name}",
                hours,
                "GPU-h",
                source,
                "R",
                0.10 if source == LLAMA2 else 0.70,
                est,
                in_median=False,
            )
        )
    return points


def _decode_points() -> list[ReferencePoint]:
    a100 = find_gpu("A100")
    rows = {
        ("Qwen2.5-7B", "bf16"): 84.28,
        ("Qwen2.5-14B", "bf16"): 46.30,
        ("Qwen2.5-32B", "bf16"): 22.13,
        ("Qwen2.5-7B", "gptq-int4"): 154.05,
        ("Qwen2.5-14B", "gptq-int4"): 98.02,
        ("Qwen2.5-32B", "gptq-int4"): 55.83,
        ("Qwen2.5-7B", "awq"): 148.10,
        ("Qwen2.5-14B", "awq"): 92.66,
        ("Qwen2.5-32B", "awq"): 51.92,
    }
    points = []
    for (model, prec), tps in rows.items():

        def est(m=model, p=prec) -> float:
            return decode_throughput(find_model(m), a100, p, context=1024).tokens_per_second_per_sequence

        points.append(
            ReferencePoint(
                "decode", f"{model} {prec} decode tokens/s", tps, "tokens/s", QWEN_VLLM, "V", 0.20, est, in_median=False
            )
        )
    return points


def reference_points() -> list[ReferencePoint]:
    """Every reference row, memory first."""
    return _qwen_points() + _weight_points() + _training_points() + _swift_points() + _time_points() + _decode_points()


@dataclass(frozen=True)
class AccuracySummary:
    kind: str
    count: int
    median_abs_error: float
    worst_abs_error: float
    worst_case: str


def summarise(points: list[ReferencePoint]) -> list[AccuracySummary]:
    """Median and worst |relative error| per kind, plus 'memory (all)' over in-median rows."""
    out = []
    groups: dict[str, list[ReferencePoint]] = {}
    for p in points:
        groups.setdefault(p.kind, []).append(p)
    memory_rows = [p for p in points if p.in_median and p.kind in ("memory", "weights", "training-memory")]
    groups["memory (all)"] = memory_rows
    for kind, rows in groups.items():
        errors = [abs(p.relative_error) for p in rows]
        worst = max(rows, key=lambda p: abs(p.relative_error))
        out.append(AccuracySummary(kind, len(rows), statistics.median(errors), max(errors), worst.case))
    return out
