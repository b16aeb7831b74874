"""Inference memory: weights, KV cache, activation workspace and runtime overhead.

Formulas (shared/reference/memory_formulas.md §1.1-1.3):

* weights = quantised matrices x bits/8 + embeddings/LM head (16 bit for GPTQ/AWQ/NF4)
  + norms in 16 bit;
* KV cache per token = 2 x layers x kv_heads x head_dim x bytes (GQA/MHA), or
  layers x (kv_lora_rank + qk_rope_head_dim) x bytes for MLA, which caches the latent;
  times context tokens times concurrent sequences;
* activation workspace = the transient tensors of one prefill chunk: per token the MLP's
  gate, up and product (3 x intermediate) and the attention's q, k, v, out (4 x hidden),
  in 16 bit, plus FP32 logits for the last position. This reproduces the ~4 GiB that
  Qwen2.5-7B needs beyond weights and KV at a 30,720-token prompt in HF transformers;
* runtime overhead: CUDA context, cuBLAS/NCCL workspaces and allocator slack, a fixed
  1 GiB per GPU by default (not seen by ``torch.cuda.max_memory_allocated``).

With tensor parallelism the matrices, KV heads and MLP workspace split across GPUs; KV
heads fewer than the TP degree are replicated, and an MLA latent is replicated on every
rank (how vLLM shards them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from suanli.advisor.errors import AdvisorError, require_positive
from suanli.advisor.models import ModelArch
from suanli.advisor.precision import Precision, find_precision, kv_bits

GIB = 2**30

#: Default prefill chunk: vLLM/SGLang chunk long prompts; HF transformers does not
#: (pass prefill_tokens=context to model it).
DEFAULT_PREFILL_CHUNK = 8192
DEFAULT_RUNTIME_OVERHEAD_GIB = 1.0


@dataclass(frozen=True)
class InferenceEstimate:
    """Memory for one serving replica; ``components`` sum to ``total_bytes``."""

    model: str
    precision: str
    context: int
    batch: int
    kv_cache_dtype: str
    gpus: int
    components: dict[str, float]
    total_bytes: float
    allocated_bytes: float  # tensors only: what torch.cuda.max_memory_allocated reports
    per_gpu_bytes: float
    kv_bytes_per_token: float
    rough: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB


def weight_bytes(model: ModelArch, precision: Precision) -> dict[str, float]:
    """Weights split into quantised matrices, embeddings/LM head and norms."""
    emb_bytes = 2.0 if precision.embeddings_16bit else precision.bytes_per_param
    norms = (model.layers * 2 + 1) * model.hidden
    if model.params_override:  # rough model: no reliable split, quantise everything
        return {"weights": model.params * precision.bytes_per_param}
    matrices = model.linear_params * precision.bytes_per_param
    embeddings = model.embedding_params * emb_bytes
    norm_bytes = norms * (4.0 if precision.bits >= 32 else 2.0)  # norms are never quantised
    return {"weights": matrices + embeddings + norm_bytes}


def kv_bytes_per_token(model: ModelArch, kv_dtype: str = "bf16") -> float:
    """KV cache bytes for one token of one sequence (all layers)."""
    return model.kv_bytes_per_token_16bit * kv_bits(kv_dtype) / 16


def activation_workspace_bytes(model: ModelArch, tokens: int, act_bytes: float = 2.0) -> float:
    """Transient tensors of one forward pass over ``tokens`` tokens (see module doc)."""
    if model.is_moe:
        width = (model.experts_per_token + model.n_shared_experts) * (model.moe_intermediate or model.intermediate)
        width = max(width, model.intermediate if model.first_dense_layers else 0)
    else:
        width = model.intermediate
    return tokens * (3 * width + 4 * model.hidden) * act_bytes


def estimate_inference(
    model: ModelArch,
    precision: str = "bf16",
    context: int = 4096,
    batch: int = 1,
    kv_cache_dtype: str = "bf16",
    gpus: int = 1,
    prefill_tokens: int | None = None,
    runtime_overhead_gib: float = DEFAULT_RUNTIME_OVERHEAD_GIB,
) -> InferenceEstimate:
    """Memory to serve ``batch`` concurrent sequences of ``context`` tokens on ``gpus``
    GPUs (tensor parallel). ``prefill_tokens`` is the largest forward pass (default: the
    whole prompt up to an 8,192-token chunk)."""
    require_positive("context", context)
    require_positive("batch", batch)
    require_positive("gpus", gpus)
    require_positive("runtime_overhead_gib", runtime_overhead_gib, allow_zero=True)
    if prefill_tokens is not None:
        require_positive("prefill_tokens", prefill_tokens)
    prec = find_precision(precision)
    kv_dtype = kv_cache_dtype.lower()
    per_token = kv_bytes_per_token(model, kv_dtype)

    weights = weight_bytes(model, prec)["weights"]
    kv = per_token * context * batch
    tokens = prefill_tokens if prefill_tokens is not None else min(context * batch, DEFAULT_PREFILL_CHUNK)
    activations = activation_workspace_bytes(model, tokens) + batch * model.vocab * 4
    overhead = runtime_overhead_gib * GIB * gpus

    # Per-GPU share under tensor parallelism.
    if model.is_mla:
        kv_share = 1.0
    else:
        kv_share = math.ceil(model.kv_heads / gpus) / model.kv_heads if gpus > 1 else 1.0
    per_gpu = weights / gpus + kv * kv_share + activations / gpus + runtime_overhead_gib * GIB
    kv_total = kv * kv_share * gpus  # replicated heads count once per GPU

    components = {
        "weights": weights,
        "kv_cache": kv_total,
        "activations": activations,
        "runtime_overhead": overhead,
    }
    notes = [prec.note]
    if model.rough:
        notes.append("rough architecture from a parameter count: KV cache and activations are indicative only")
    if model.max_context and context > model.max_context:
        notes.append(f"context {context} exceeds the model's {model.max_context} positions")
    if kv_share * gpus > 1.0 + 1e-9:
        notes.append(f"KV heads replicated: {model.kv_heads} KV heads over {gpus} GPUs")
    allocated = weights + kv_total + activations
    return InferenceEstimate(
        model=model.name,
        precision=prec.name,
        context=context,
        batch=batch,
        kv_cache_dtype=kv_dtype,
        gpus=gpus,
        components=components,
        total_bytes=allocated + overhead,
        allocated_bytes=allocated,
        per_gpu_bytes=per_gpu,
        kv_bytes_per_token=per_token,
        rough=model.rough,
        notes=notes,
    )


def max_context_for(
    model: ModelArch, precision: str, gpu_bytes: float, gpus: int = 1, batch: int = 1, kv_cache_dtype: str = "bf16"
) -> int:
    """Longest context that fits ``gpus`` GPUs of ``gpu_bytes`` each (0 if the weights don't)."""
    base = estimate_inference(model, precision, context=1, batch=batch, kv_cache_dtype=kv_cache_dtype, gpus=gpus)
    if base.per_gpu_bytes > gpu_bytes:
        return 0
    lo, hi = 1, 10_000_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        est = estimate_inference(model, precision, context=mid, batch=batch, kv_cache_dtype=kv_cache_dtype, gpus=gpus)
        if est.per_gpu_bytes <= gpu_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_batch_for(
    model: ModelArch, precision: str, gpu_bytes: float, gpus: int = 1, context: int = 4096, kv_cache_dtype: str = "bf16"
) -> int:
    """Most concurrent sequences of ``context`` tokens that fit (0 if one does not)."""

    def fits(batch: int) -> bool:
        return (
            estimate_inference(
                model, precision, context=context, batch=batch, kv_cache_dtype=kv_cache_dtype, gpus=gpus
            ).per_gpu_bytes
            <= gpu_bytes
        )

    if not fits(1):
        return 0
    lo, hi = 1, 1_000_000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


@dataclass(frozen=True)
class GPUFit:
    """Whether an inference set-up fits ``gpus`` GPUs of one model, and how much room is left:
    the longest context at the requested concurrency, and the most sequences at the context."""

    gpu: str
    gpus: int
    fits: bool
    per_gpu_bytes: float
    gpu_memory_bytes: float
    headroom_bytes: float
    max_context: int
    max_batch: int


def fit_on_gpu(
    model: ModelArch,
    precision: str,
    gpu_name: str,
    gpu_memory_bytes: float,
    gpus: int = 1,
    context: int = 4096,
    batch: int = 1,
    kv_cache_dtype: str = "bf16",
) -> GPUFit:
    """Check one set-up against one GPU model (capacity in bytes, from the catalog)."""
    est = estimate_inference(model, precision, context, batch, kv_cache_dtype, gpus)
    return GPUFit(
        gpu=gpu_name,
        gpus=gpus,
        fits=est.per_gpu_bytes <= gpu_memory_bytes,
        per_gpu_bytes=est.per_gpu_bytes,
        gpu_memory_bytes=gpu_memory_bytes,
        headroom_bytes=gpu_memory_bytes - est.per_gpu_bytes,
        max_context=max_context_for(model, precision, gpu_memory_bytes, gpus, batch, kv_cache_dtype),
        max_batch=max_batch_for(model, precision, gpu_memory_bytes, gpus, context, kv_cache_dtype),
    )


__all__ = [
    "AdvisorError",
    "InferenceEstimate",
    "estimate_inference",
    "weight_bytes",
    "kv_bytes_per_token",
    "activation_workspace_bytes",
    "max_context_for",
    "max_batch_for",
    "GPUFit",
    "fit_on_gpu",
    "GIB",
]
