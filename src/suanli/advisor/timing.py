"""Time: training from 6·N·D over GPUs x dense peak x MFU; decode from memory bandwidth.

* Training FLOPs C = 6·N·D (forward 2ND + backward 4ND; EleutherAI Transformer Math
  101, Kaplan et al.), N = *active* parameters for MoE. LoRA/QLoRA skip the weight-
  gradient GEMMs of the frozen base: 4·N·D. MFU is defined on 6ND, so activation
  recomputation lowers the achieved MFU rather than adding FLOPs here.
* T = C / (GPUs x dense BF16 peak x MFU). Default MFU per GPU class is in
  ``catalog.MFU_BY_CLASS`` (0.40 for NVIDIA datacenter parts: Llama 2 7B's 184,320
  A100-hours for 2 T tokens imply 0.41).
* Decode is memory bound: each step streams the weights once and every sequence's KV
  cache, so tokens/s per sequence <= HBM_BW x GPUs x MBU / (weights + batch x KV).
  MBU defaults: 0.65 for 16-bit/FP8 weights (vLLM bs=1 on A100: 56-71 %), 0.45 for 4/8-bit
  integer kernels that dequantise on the fly (Qwen2.5-7B GPTQ-Int4: ~45-50 %).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from suanli.advisor.catalog import GPU
from suanli.advisor.errors import AdvisorError, require_fraction, require_positive
from suanli.advisor.memory import kv_bytes_per_token, weight_bytes
from suanli.advisor.models import ModelArch
from suanli.advisor.precision import find_precision

SECONDS_PER_HOUR = 3600.0

#: Memory-bandwidth utilisation during decode, by weight format.
MBU_BY_FORMAT: dict[str, float] = {"float": 0.65, "integer": 0.45}


@dataclass(frozen=True)
class TrainingTime:
    """Wall-clock and GPU-hours for a training run."""

    model: str
    gpu: str
    gpus: int
    tokens: float
    flops: float
    mfu: float
    mfu_source: str
    seconds: float
    gpu_hours: float
    days: float
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DecodeThroughput:
    """Upper bound on decode speed from memory bandwidth."""

    model: str
    gpu: str
    gpus: int
    precision: str
    batch: int
    context: int
    mbu: float
    bytes_per_step: float
    tokens_per_second_per_sequence: float
    tokens_per_second_total: float
    prefill_seconds: float  # for one context-long prompt, compute bound at the given MFU


def training_flops(model: ModelArch, tokens: float, method: str = "full") -> float:
    """6·N·D for full training, 4·N·D for LoRA/QLoRA (frozen base, no weight gradients)."""
    require_positive("tokens", tokens)
    factor = 6.0 if method == "full" else 4.0
    if method not in ("full", "lora", "qlora"):
        raise AdvisorError(f"unknown method {method!r}; choose one of: full, lora, qlora")
    return factor * model.active_params * tokens


def training_time(
    model: ModelArch, tokens: float, gpu: GPU, gpus: int = 1, mfu: float | None = None, method: str = "full"
) -> TrainingTime:
    """Time to train on ``tokens`` tokens with ``gpus`` GPUs of one model."""
    require_positive("gpus", gpus)
    if mfu is not None:
        require_fraction("mfu", mfu, allow_zero=False)
    used_mfu = mfu if mfu is not None else gpu.default_mfu
    source = "given" if mfu is not None else f"default for {gpu.gpu_class}: {gpu.mfu_reason}"
    if gpu.bf16_tflops <= 0:
        raise AdvisorError(f"{gpu.name} has no usable 16-bit tensor throughput in the catalog")
    flops = training_flops(model, tokens, method)
    seconds = flops / (gpus * gpu.bf16_tflops * 1e12 * used_mfu)
    notes = []
    if gpu.bf16_tflops < 1:
        notes.append(f"{gpu.name} has almost no FP16 throughput; train elsewhere")
    if method == "qlora":
        notes.append("QLoRA dequantises NF4 weights every step: expect 1.5-2.5x slower than LoRA")
    if model.is_moe:
        notes.append(f"MoE: FLOPs use {model.active_params / 1e9:.1f} B active parameters")
    return TrainingTime(
        model=model.name,
        gpu=gpu.name,
        gpus=gpus,
        tokens=tokens,
        flops=flops,
        mfu=used_mfu,
        mfu_source=source,
        seconds=seconds,
        gpu_hours=seconds * gpus / SECONDS_PER_HOUR,
        days=seconds / 86400,
        notes=notes,
    )


def default_mbu(precision: str) -> float:
    """0.65 for float weights, 0.45 for integer kernels that dequantise while decoding."""
    p = find_precision(precision)
    integer = p.name.startswith(("int", "gptq", "awq", "nf4", "q"))
    return MBU_BY_FORMAT["integer" if integer else "float"]


def decode_throughput(
    model: ModelArch,
    gpu: GPU,
    precision: str = "bf16",
    gpus: int = 1,
    batch: int = 1,
    context: int = 4096,
    mbu: float | None = None,
    kv_cache_dtype: str = "bf16",
    prefill_mfu: float = 0.5,
) -> DecodeThroughput:
    """Bandwidth-bound decode speed; KV read per step counts the full ``context``."""
    for name, value in (("gpus", gpus), ("batch", batch), ("context", context)):
        require_positive(name, value)
    used_mbu = mbu if mbu is not None else default_mbu(precision)
    require_fraction("mbu", used_mbu, allow_zero=False)
    prec = find_precision(precision)
    weights = weight_bytes(model, prec)["weights"]
    if model.is_moe and batch == 1:  # one token reads only its experts
        weights *= model.active_params / model.params
    kv = kv_bytes_per_token(model, kv_cache_dtype) * context * batch
    step_bytes = weights + kv
    bandwidth = gpu.mem_bandwidth_gbps * 1e9 * gpus * used_mbu
    step = step_bytes / bandwidth
    prefill = 2 * model.active_params * context / (gpus * gpu.bf16_tflops * 1e12 * prefill_mfu)
    return DecodeThroughput(
        model=model.name,
        gpu=gpu.name,
        gpus=gpus,
        precision=prec.name,
        batch=batch,
        context=context,
        mbu=used_mbu,
        bytes_per_step=step_bytes,
        tokens_per_second_per_sequence=1 / step,
        tokens_per_second_total=batch / step,
        prefill_seconds=prefill,
    )
