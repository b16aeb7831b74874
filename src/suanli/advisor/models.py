"""Model architectures: bundled ``data/models.csv``, any HF ``config.json``, or ``--params 70B``.

Memory and time depend on a handful of architecture numbers (layers, hidden size, KV
heads, head dim, MLP width, vocabulary, MoE and MLA shapes), so ``ModelArch`` carries
exactly those and derives parameter counts from them. Counting from the shapes rather
than trusting a model card is what lets the advisor split embeddings from the rest (GPTQ
and AWQ keep them in 16 bit) and count MoE active parameters for FLOPs.

A bare parameter count (``--params 70B``) gives a *rough* architecture (Llama-like
aspect ratio, 8 KV heads of 128): good for weights, only indicative for the KV cache.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from suanli.advisor.errors import AdvisorError

#: Names renters use for bundled rows with the same architecture.
MODEL_ALIASES: dict[str, str] = {
    "llama3.18b": "Llama-3-8B",
    "llama3.170b": "Llama-3-70B",
    "metallama38b": "Llama-3-8B",
    "metallama370b": "Llama-3-70B",
    "deepseekr1": "DeepSeek-V3",
}


@dataclass(frozen=True)
class ModelArch:
    """Decoder-only transformer shape; counts are derived, not copied from model cards."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    qkv_bias: bool = False
    # Mixture of experts (0 routed experts means dense).
    n_routed_experts: int = 0
    n_shared_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    first_dense_layers: int = 0
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0 means plain MHA/GQA.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    max_context: int = 0
    rough: bool = False  # True when synthesised from a bare parameter count
    params_override: float | None = None  # exact total when only the count is known

    # ---- derived counts -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def embedding_params(self) -> int:
        """Token embedding plus an untied LM head: the tensors GPTQ/AWQ keep in 16 bit."""
        return self.vocab * self.hidden * (1 if self.tie_embeddings else 2)

    def _attention_params(self) -> int:
        h, a = self.hidden, self.heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * qk
            else:
                q = h * a * qk
            kv = (
                h * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank
                + self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            )
            return q + kv + a * self.v_head_dim * h
        q_out, kv_out = a * self.head_dim, self.kv_heads * self.head_dim
        bias = (q_out + 2 * kv_out) if self.qkv_bias else 0
        return h * q_out + 2 * h * kv_out + q_out * h + bias

    def _moe_width(self) -> int:
        return self.moe_intermediate or self.intermediate

    def _mlp_params(self, active: bool) -> int:
        """MLP parameters summed over layers (SwiGLU: gate, up, down)."""
        h = self.hidden
        if not self.is_moe:
            return self.layers * 3 * h * self.intermediate
        dense = self.first_dense_layers * 3 * h * self.intermediate
        experts = self.experts_per_token if active else self.n_routed_experts
        per_moe_layer = (experts + self.n_shared_experts) * 3 * h * self._moe_width() + h * self.n_routed_experts  # router
        return dense + (self.layers - self.first_dense_layers) * per_moe_layer

    def _count(self, active: bool) -> float:
        norms = self.layers * 2 * self.hidden + self.hidden
        return float(self.embedding_params + self.layers * self._attention_params() + self._mlp_params(active) + norms)

    @property
    def params(self) -> float:
        """Total parameters (what must be stored)."""
        return self.params_override if self.params_override else self._count(active=False)

    @property
    def active_params(self) -> float:
        """Parameters used per token (what FLOPs and decode reads scale with for MoE)."""
        if self.params_override:
            return self.params_override
        return self._count(active=True)

    @property
    def linear_params(self) -> float:
        """Parameters in the transformer blocks' matrices: what weight quantisers touch."""
        return self.params - self.embedding_params - (self.layers * 2 + 1) * self.hidden

    @property
    def largest_layer_params(self) -> int:
        """Largest single parameter tensor: ZeRO-3 gathers one at a time (DeepSpeed's L)."""
        h = self.hidden
        widths = [self.vocab * h, h * self.intermediate, h * self.heads * self.head_dim]
        if self.is_moe:
            widths.append(h * self._moe_width())
        return max(widths)

    @property
    def kv_bytes_per_token_16bit(self) -> int:
        """KV cache bytes per token at 2 bytes per element (MLA caches the latent)."""
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * 2
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


# ---- constructors ---------------------------------------------------------------------


def _int(row: dict[str, Any], key: str, default: int = 0) -> int:
    value = row.get(key)
    if value in (None, ""):
        return default
    return int(float(value))


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


@lru_cache(maxsize=1)
def bundled_models() -> dict[str, ModelArch]:
    """Architectures from the bundled models.csv, keyed by their display name."""
    text = resources.files("suanli.advisor").joinpath("data/models.csv").read_text("utf-8")
    out: dict[str, ModelArch] = {}
    for row in csv.DictReader(text.splitlines()):
        heads = _int(row, "num_attention_heads")
        out[row["model"]] = ModelArch(
            name=row["model"],
            layers=_int(row, "num_hidden_layers"),
            hidden=_int(row, "hidden_size"),
            heads=heads,
            kv_heads=_int(row, "num_key_value_heads", heads),
            head_dim=_int(row, "head_dim"),
            intermediate=_int(row, "intermediate_size"),
            vocab=_int(row, "vocab_size"),
            tie_embeddings=_bool(row["tie_word_embeddings"]),
            qkv_bias=_bool(row["qkv_bias"]),
            n_routed_experts=_int(row, "n_routed_experts"),
            n_shared_experts=_int(row, "n_shared_experts"),
            experts_per_token=_int(row, "experts_per_token"),
            moe_intermediate=_int(row, "moe_intermediate_size"),
            first_dense_layers=_int(row, "first_dense_layers"),
            q_lora_rank=_int(row, "q_lora_rank"),
            kv_lora_rank=_int(row, "kv_lora_rank"),
            qk_rope_head_dim=_int(row, "qk_rope_head_dim"),
            max_context=_int(row, "max_position_embeddings"),
        )
    return out


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


def find_model(name: str) -> ModelArch:
    """Bundled architecture by name, case-insensitive (``qwen2.5-72b``, ``Llama-3-70B``)."""
    models = bundled_models()
    key = _key(name)
    for model_name, arch in models.items():
        if _key(model_name) == key:
            return arch
    if key in MODEL_ALIASES:
        return models[MODEL_ALIASES[key]]
    known = ", ".join(models)
    raise AdvisorError(f"unknown model {name!r}; bundled models: {known} (or give --config path/to/config.json, or --params 70B)")


def from_hf_config(config: dict[str, Any], name: str = "config.json") -> ModelArch:
    """Architecture from a Hugging Face config.json dict (Llama, Qwen2, Mistral/Mixtral,
    DeepSeek-V2/V3 and similar decoder-only models)."""
    cfg = config.get("text_config") or config
    needed = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
    missing = [k for k in needed if k not in cfg]
    if missing:
        raise AdvisorError(
            f"{name}: not a decoder-only transformer config I can read (missing {', '.join(missing)}); use --params instead"
        )
    h, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    experts = int(cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
    model_type = str(cfg.get("model_type", ""))
    return ModelArch(
        name=name,
        layers=int(cfg["num_hidden_layers"]),
        hidden=h,
        heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or h // heads),
        intermediate=int(cfg.get("intermediate_size") or 4 * h),
        vocab=int(cfg["vocab_size"]),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", model_type.startswith("qwen2"))),
        n_routed_experts=experts,
        n_shared_experts=int(cfg.get("n_shared_experts") or 0),
        experts_per_token=int(cfg.get("num_experts_per_tok") or 0) if experts else 0,
        moe_intermediate=int(cfg.get("moe_intermediate_size") or 0),
        first_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=int(cfg.get("kv_lora_rank") or 0),
        qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0),
        qk_nope_head_dim=int(cfg.get("qk_nope_head_dim") or 128),
        v_head_dim=int(cfg.get("v_head_dim") or 128),
        max_context=int(cfg.get("max_position_embeddings") or 0),
    )


def load_hf_config(path: str | Path) -> ModelArch:
    """Read a config.json from disk (the only I/O in this module)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text("utf-8"))
    except FileNotFoundError:
        raise AdvisorError(f"config file not found: {str(p)!r}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise AdvisorError(f"cannot read config {str(p)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise AdvisorError(f"config {str(p)!r} is not a JSON object")
    return from_hf_config(data, name=p.parent.name or p.name)


_SUFFIX = {"": 1e9, "b": 1e9, "m": 1e6, "t": 1e12, "k": 1e3}


def parse_params(text: str | float) -> float:
    """'70B' -> 7e10, '800M' -> 8e8, '1.5e9' -> 1.5e9, a bare '70' means billions."""
    if isinstance(text, (int, float)):
        value = float(text)
        count = value * 1e9 if value < 1e5 else value
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([bmtk]?)\s*", text.lower())
        if not m:
            raise AdvisorError(f"cannot read parameter count {text!r}; write e.g. 70B or 800M")
        value = float(m.group(1))
        suffix = m.group(2)
        count = value * (_SUFFIX[suffix] if suffix or value < 1e5 else 1)
    if count <= 0:
        raise AdvisorError(f"parameter count must be > 0, got {text!r}")
    return count


def from_param_count(text: str | float) -> ModelArch:
    """Rough Llama-like shape for a bare parameter count: N ~ 12 L h^2 with h/L ~ 128,
    GQA with 8 KV heads of 128 (64 x 128 for 1B and below), 128k vocabulary."""
    n = parse_params(text)
    hidden = max(512, int(round((n * 128 / 12) ** (1 / 3) / 128)) * 128)
    layers = max(2, 4 * round(hidden / 512))
    heads = hidden // 128
    arch = ModelArch(
        name=f"{n / 1e9:g}B (rough)",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=min(8, heads),
        head_dim=128,
        intermediate=int(hidden * 3.5),
        vocab=128256,
        rough=True,
    )
    return replace(arch, params_override=n)


def resolve_model(name: str | None = None, config: str | Path | None = None, params: str | float | None = None) -> ModelArch:
    """Exactly one of a bundled name, a config.json path or a parameter count."""
    given = [x for x in (name, config, params) if x not in (None, "")]
    if len(given) != 1:
        raise AdvisorError("give exactly one of --model NAME, --config PATH or --params N")
    if name:
        return find_model(name)
    if config:
        return load_hf_config(config)
    return from_param_count(params)  # type: ignore[arg-type]
