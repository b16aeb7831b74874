"""Training and fine-tuning memory per GPU: model states, ZeRO, offload, LoRA/QLoRA,
activations with and without checkpointing and FlashAttention.

Model states (shared/reference/memory_formulas.md §1.4-1.5), bytes per trained parameter:

* mixed-precision AdamW: 2 (16-bit weights) + 2 (16-bit grads) + 4 (FP32 master)
  + 8 (FP32 momentum, variance) = 16 (ZeRO paper §3.1); pure BF16: 2 + 2 + 4 = 8;
  8-bit AdamW: moments 2 instead of 8; SGD with momentum: 4 (2 in pure BF16).
* ZeRO partitions over the data-parallel group N. ``accounting="deepspeed"`` (default)
  follows DeepSpeed's implementation and its ``memory.rst`` estimator, which also keeps an
  FP32 gradient partition: stage 1/2 = 4P + 16P/N, stage 3 = 18P/N + 4L (L = the
  largest layer, gathered as 16-bit params and grads). ``accounting="paper"`` gives the
  ZeRO paper's ideal 4P + 12P/N, 2P + 14P/N and 16P/N.
* Offload: optimizer offload leaves 2P (stage 1/2) or 2P/N + 4L (stage 3) on the GPU;
  parameter + optimizer offload (stage 3) leaves 4L. Host memory per node follows the
  DeepSpeed estimator (1.5 x buffer factor).
* LoRA: the frozen base stays at 2 B/param (NF4 ~0.52 B/param for QLoRA, embeddings in
  16 bit); adapters r x (in + out) per targeted matrix, FP32 (PEFT default) with FP32
  Adam = 16 B/param, or BF16 adapters with paged FP32 Adam for QLoRA = 12 B/param.

Activations (Korthikanti et al. 2022, §1.6), per layer, 16-bit: the paper's 34·s·b·h is
for GPT's 4h GeLU MLP with dropout. Counting the same saved tensors for a SwiGLU, GQA
block gives s·b·h·(12 + 4·kv/a) + 8·s·b·I (37.5·sbh for Llama-2-7B). Without
FlashAttention add the paper's 5·a·s²·b; full recomputation keeps 2·s·b·h per layer plus
one layer's working set. Tensor parallelism with sequence parallelism divides by t.
Logits add 28·s·b·V. By construction an unfused cross-entropy (HF transformers) needs at
least 12 B per logit at its peak: it upcasts the logits to FP32 and, entering backward,
holds the saved log-probabilities, their gradient and the logits' gradient (3 x 4 B).
ms-swift's published LoRA runs (Qwen 1.8B/7B/14B, 512-8,192 tokens) grow by ~28 B per
logit per token, allocator caching and framework copies included, so 28 is the default:
one constant calibrated on those runs (BENCHMARKS.md says so). Fused/chunked kernels
(Liger, Megatron's vocab-parallel loss) need far less; pass ``logit_bytes`` to model them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from suanli.advisor.errors import AdvisorError, require_positive
from suanli.advisor.memory import DEFAULT_RUNTIME_OVERHEAD_GIB, GIB, weight_bytes
from suanli.advisor.models import ModelArch
from suanli.advisor.precision import find_precision

METHODS = ("full", "lora", "qlora")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd")
MODES = ("mixed", "bf16")
OFFLOADS = ("none", "optimizer", "all")
CHECKPOINTING = ("none", "full")
ACCOUNTING = ("deepspeed", "paper")


@dataclass(frozen=True)
class StateBytes:
    """Bytes per trained parameter, by role."""

    weights: float  # 16-bit working copy
    grads: float  # 16-bit gradients
    master: float  # FP32 master weights (0 in pure BF16)
    moments: float  # optimizer state (Adam m and v, SGD momentum)
    fp32_grads: float  # DeepSpeed's FP32 gradient partition (ZeRO >= 1, mixed)

    @property
    def total_unsharded(self) -> float:
        return self.weights + self.grads + self.master + self.moments


def state_bytes(optimizer: str = "adamw", mode: str = "mixed", zero: int = 0, accounting: str = "deepspeed") -> StateBytes:
    """Per-parameter state sizes for an optimizer and precision mode."""
    _choice("optimizer", optimizer, OPTIMIZERS)
    _choice("mode", mode, MODES)
    _choice("accounting", accounting, ACCOUNTING)
    mixed = mode == "mixed"
    moments = {"adamw": 8.0 if mixed else 4.0, "adamw8bit": 2.0, "sgd": 4.0 if mixed else 2.0}[optimizer]
    fp32_grads = 4.0 if (mixed and zero >= 1 and accounting == "deepspeed") else 0.0
    return StateBytes(weights=2.0, grads=2.0, master=4.0 if mixed else 0.0, moments=moments, fp32_grads=fp32_grads)


def model_state_bytes(
    params: float,
    largest_layer: float,
    *,
    zero: int = 0,
    dp: int = 1,
    optimizer: str = "adamw",
    mode: str = "mixed",
    offload: str = "none",
    accounting: str = "deepspeed",
) -> dict[str, float]:
    """Per-GPU bytes of weights, gradients and optimizer state for ``params`` parameters
    trained data-parallel over ``dp`` GPUs with ZeRO ``zero``; and host bytes if offloaded.

    Worked check (DeepSpeed docs, t5-3b, P = 2.851e9, 8 GPUs): stage 2 = 4P + 16P/8 =
    17.1e9 B = 15.93 GiB; stage 3 = 18P/8 + 4 x 32.9e6 = 6.55e9 B = 6.10 GiB.
    """
    if zero not in (0, 1, 2, 3):
        raise AdvisorError(f"zero stage must be 0, 1, 2 or 3, got {zero!r}")
    _choice("offload", offload, OFFLOADS)
    require_positive("dp", dp)
    if offload == "all" and zero != 3:
        raise AdvisorError("offload 'all' (parameters + optimizer) needs ZeRO stage 3")
    if offload != "none" and zero == 0:
        raise AdvisorError(f"offload {offload!r} needs ZeRO stage 1, 2 or 3")
    s = state_bytes(optimizer, mode, zero, accounting)
    p, n = params, dp
    gathered = 4.0 * largest_layer if zero == 3 else 0.0
    if zero == 0:
        gpu = {"weights": s.weights * p, "gradients": s.grads * p, "optimizer_states": (s.master + s.moments) * p}
    elif zero in (1, 2) and (accounting == "deepspeed" or zero == 1):
        gpu = {
            "weights": s.weights * p,
            "gradients": s.grads * p + s.fp32_grads * p / n,
            "optimizer_states": (s.master + s.moments) * p / n,
        }
    elif zero == 2:  # paper accounting: gradients partitioned too
        gpu = {"weights": s.weights * p, "gradients": s.grads * p / n, "optimizer_states": (s.master + s.moments) * p / n}
    else:  # stage 3: everything partitioned, one layer gathered at a time
        grads = (s.fp32_grads if accounting == "deepspeed" else s.grads) * p / n
        gpu = {"weights": s.weights * p / n, "gradients": grads, "optimizer_states": (s.master + s.moments) * p / n}
    gpu["gathered_layer"] = gathered
    host = 0.0
    if offload == "optimizer":
        moved = gpu["optimizer_states"] + gpu["gradients"]
        gpu["optimizer_states"] = 0.0
        gpu["gradients"] = 0.0
        host = moved
    elif offload == "all":
        host = gpu["weights"] + gpu["gradients"] + gpu["optimizer_states"]
        gpu["weights"] = gpu["gradients"] = gpu["optimizer_states"] = 0.0
    gpu["host_offload"] = host
    return gpu


def host_bytes_per_node(params: float, zero: int, offload: str, gpus_per_node: int = 8, nodes: int = 1) -> float:
    """CPU memory per node that DeepSpeed's estimator asks for when offloading."""
    if offload == "none":
        return 0.0
    if zero in (1, 2):
        return params * max(4 * gpus_per_node, 16) * 1.5
    per_param = 16 if offload == "optimizer" else 18
    return per_param * params * 1.5 / nodes


def lora_params(model: ModelArch, rank: int = 16, targets: str = "all-linear") -> float:
    """Adapter parameters: r x (in + out) for each targeted matrix in every layer."""
    require_positive("lora rank", rank)
    h, a, kv, hd = model.hidden, model.heads, model.kv_heads, model.head_dim
    q, k, v, o = (h, a * hd), (h, kv * hd), (h, kv * hd), (a * hd, h)
    if targets == "qv":
        mats = [q, v]
    elif targets == "all-linear":
        width = model.moe_intermediate or model.intermediate
        experts = model.n_routed_experts + model.n_shared_experts if model.is_moe else 1
        mats = [q, k, v, o] + [(h, width), (h, width), (width, h)] * experts
    else:
        raise AdvisorError(f"unknown LoRA targets {targets!r}; choose all-linear or qv")
    return float(model.layers * sum(rank * (i + j) for i, j in mats))


#: Bytes per logit per token at the loss's peak (see module doc): >= 12 by construction for
#: an unfused FP32 cross-entropy; 28 observed in ms-swift's LoRA measurements (the default).
LOGIT_BYTES = 28.0


def activation_bytes(
    model: ModelArch,
    seq_len: int,
    micro_batch: int = 1,
    checkpointing: str = "none",
    flash_attention: bool = True,
    tp: int = 1,
    logit_bytes: float = LOGIT_BYTES,
) -> dict[str, float]:
    """Saved activations for one micro-batch (all layers) and the logits, per GPU."""
    _choice("checkpointing", checkpointing, CHECKPOINTING)
    s, b, h, a = seq_len, micro_batch, model.hidden, model.heads
    width = (
        (model.experts_per_token + model.n_shared_experts) * (model.moe_intermediate or model.intermediate)
        if model.is_moe
        else model.intermediate
    )
    kv_ratio = model.kv_heads / model.heads
    layer = s * b * h * (12 + 4 * kv_ratio) + 8 * s * b * width
    if not flash_attention:
        layer += 5 * a * s * s * b
    if checkpointing == "full":
        acts = 2 * s * b * h * model.layers + layer
    else:
        acts = layer * model.layers
    logits = logit_bytes * s * b * model.vocab
    return {"activations": acts / tp, "logits": logits / tp}


@dataclass(frozen=True)
class TrainingEstimate:
    """Per-GPU memory for a training set-up; ``components`` sum to ``per_gpu_bytes``."""

    model: str
    method: str
    gpus: int
    zero: int
    offload: str
    tp: int
    pp: int
    seq_len: int
    micro_batch: int
    components: dict[str, float]
    per_gpu_bytes: float
    total_bytes: float  # summed over all GPUs
    host_bytes_per_node: float
    trainable_params: float
    notes: list[str] = field(default_factory=list)

    @property
    def per_gpu_gib(self) -> float:
        return self.per_gpu_bytes / GIB


def estimate_training(
    model: ModelArch,
    method: str = "full",
    *,
    gpus: int = 1,
    zero: int = 0,
    offload: str = "none",
    optimizer: str = "adamw",
    mode: str = "mixed",
    tp: int = 1,
    pp: int = 1,
    seq_len: int = 4096,
    micro_batch: int = 1,
    checkpointing: str = "none",
    flash_attention: bool = True,
    lora_rank: int = 16,
    lora_targets: str = "all-linear",
    accounting: str = "deepspeed",
    gpus_per_node: int = 8,
    runtime_overhead_gib: float = DEFAULT_RUNTIME_OVERHEAD_GIB,
    logit_bytes: float = LOGIT_BYTES,
) -> TrainingEstimate:
    """Memory per GPU to train ``model`` (full fine-tune, LoRA or QLoRA)."""
    _choice("method", method, METHODS)
    for name, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("seq_len", seq_len), ("micro_batch", micro_batch)):
        require_positive(name, value)
    if gpus % (tp * pp):
        raise AdvisorError(f"gpus ({gpus}) must be a multiple of tp x pp ({tp} x {pp})")
    dp = gpus // (tp * pp)
    shard = tp * pp  # model-parallel degree: each GPU holds 1/shard of the layers' weights
    notes: list[str] = []

    if method == "full":
        trainable = model.params
        states = model_state_bytes(
            model.params / shard,
            model.largest_layer_params / tp,
            zero=zero,
            dp=dp,
            optimizer=optimizer,
            mode=mode,
            offload=offload,
            accounting=accounting,
        )
        components = {k: v for k, v in states.items() if k != "host_offload"}
    else:
        trainable = lora_params(model, lora_rank, lora_targets)
        base_prec = find_precision("nf4" if method == "qlora" else "bf16")
        base = weight_bytes(model, base_prec)["weights"] / shard
        if zero == 3 and method == "lora":
            base /= dp
        # PEFT keeps LoRA adapters in FP32 (16 B/param with FP32 Adam); the QLoRA recipe
        # keeps them in BF16 with paged FP32 Adam (12 B/param). 8-bit Adam: moments 2 B.
        adapter_dtype = 2.0 if method == "qlora" else 4.0
        moments = 2.0 if optimizer == "adamw8bit" else (4.0 if optimizer == "sgd" else 8.0)
        adapters = trainable / shard * (2 * adapter_dtype + moments)
        components = {"weights": base, "gradients": 0.0, "optimizer_states": adapters, "gathered_layer": 0.0}
        notes.append(f"{method}: {trainable / 1e6:.1f} M trainable adapter parameters (rank {lora_rank}, {lora_targets})")
    require_positive("logit_bytes", logit_bytes, allow_zero=True)
    acts = activation_bytes(model, seq_len, micro_batch, checkpointing, flash_attention, tp, logit_bytes)
    components.update(acts)
    components["runtime_overhead"] = runtime_overhead_gib * GIB
    per_gpu = sum(components.values())
    nodes = max(1, -(-gpus // gpus_per_node))
    host = host_bytes_per_node(model.params / shard, zero, offload, gpus_per_node, nodes) if method == "full" else 0.0
    if model.rough:
        notes.append("rough architecture from a parameter count: activations are indicative")
    if checkpointing == "none" and seq_len * micro_batch >= 4096:
        notes.append(
            "activation checkpointing (--checkpointing full) trades ~33 % more compute for most of the activation memory"
        )
    return TrainingEstimate(
        model=model.name,
        method=method,
        gpus=gpus,
        zero=zero,
        offload=offload,
        tp=tp,
        pp=pp,
        seq_len=seq_len,
        micro_batch=micro_batch,
        components=components,
        per_gpu_bytes=per_gpu,
        total_bytes=per_gpu * gpus,
        host_bytes_per_node=host,
        trainable_params=trainable,
        notes=notes,
    )


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise AdvisorError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
