"""Weight precisions and quantisation formats, as effective bits per weight.

A format is more than its nominal width: GPTQ and AWQ store one FP16 scale and a packed
zero point per group of 128 weights (+0.156 bit) and keep ``embed_tokens``/``lm_head``
in 16 bit, which for a 152k-vocabulary Qwen2.5-7B is 1.09 B parameters (2.2 GB). GGUF
k-quants mix block types: Q4_K is 144 bytes per 256 weights (4.5 bpw) but Q4_K_M stores
half of ``attn_v``/``ffn_down`` and the output matrix as Q6_K, landing at ~4.85 bpw over
a whole Llama file (TheBloke's Llama-2 7B/13B/70B Q4_K_M files: 4.80-4.84 bpw).

The plain ``int8``/``int4``/``fp8`` entries are the naive N x bits/8 convention of the
HF Llama 3.1 blog table; use ``gptq-int4``/``awq`` for what a real checkpoint occupies.
"""

from __future__ import annotations

from dataclasses import dataclass

from suanli.advisor.errors import AdvisorError

_GROUP_128_INT4 = (16 + 4) / 128  # FP16 scale + 4-bit zero per group of 128 weights
_GROUP_128_INT8 = (16 + 8) / 128


@dataclass(frozen=True)
class Precision:
    """How many bits one weight costs, and whether embeddings are quantised too."""

    name: str
    bits: float  # effective bits per quantised weight, block metadata included
    embeddings_16bit: bool  # True: token embedding and LM head stay BF16/FP16
    note: str

    @property
    def bytes_per_param(self) -> float:
        return self.bits / 8


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", 32, False, "4 bytes per parameter"),
        Precision("bf16", 16, False, "2 bytes per parameter"),
        Precision("fp16", 16, False, "2 bytes per parameter"),
        Precision("fp8", 8, False, "1 byte per parameter, all tensors (HF Llama 3.1 table convention)"),
        Precision("int8", 8, False, "1 byte per parameter, all tensors (naive; see gptq-int8)"),
        Precision("int4", 4, False, "0.5 byte per parameter, all tensors (naive; see gptq-int4/awq)"),
        Precision("gptq-int8", 8 + _GROUP_128_INT8, True, "GPTQ 8-bit, group 128; embeddings and LM head stay 16-bit"),
        Precision("gptq-int4", 4 + _GROUP_128_INT4, True, "GPTQ 4-bit, group 128; embeddings and LM head stay 16-bit"),
        Precision("awq", 4 + _GROUP_128_INT4, True, "AWQ 4-bit, group 128; embeddings and LM head stay 16-bit"),
        Precision("nf4", 4.127, True, "bitsandbytes NF4 with double quantisation (QLoRA); embeddings 16-bit"),
        Precision("q8_0", 8.5, False, "GGUF Q8_0: 34 bytes per 32 weights"),
        Precision("q6_k", 6.5625, False, "GGUF Q6_K: 210 bytes per 256 weights"),
        Precision("q5_k_m", 5.67, False, "GGUF Q5_K_M: Q5_K (5.5 bpw) with some Q6_K tensors"),
        Precision("q4_k_m", 4.85, False, "GGUF Q4_K_M: Q4_K (4.5 bpw) with some Q6_K tensors"),
        Precision("q4_0", 4.5, False, "GGUF Q4_0: 18 bytes per 32 weights"),
    )
}

_ALIASES = {
    "gptq": "gptq-int4",
    "awq-int4": "awq",
    "int4-awq": "awq",
    "int4-gptq": "gptq-int4",
    "int8-gptq": "gptq-int8",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "half": "fp16",
    "qlora": "nf4",
    "bnb-4bit": "nf4",
    "fp8-e4m3": "fp8",
}

#: KV cache element widths the engines offer.
KV_BITS: dict[str, int] = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "fp32": 32}


def find_precision(name: str) -> Precision:
    """Look up a precision case-insensitively (``Q4_K_M``, ``GPTQ-Int4``, ``awq``)."""
    key = name.strip().lower().replace("gptq_int", "gptq-int")
    key = _ALIASES.get(key, key)
    if key in PRECISIONS:
        return PRECISIONS[key]
    raise AdvisorError(f"unknown precision {name!r}; choose one of: {', '.join(PRECISIONS)}")


def kv_bits(name: str) -> int:
    """Bits per KV-cache element for a cache dtype name."""
    key = name.strip().lower()
    if key not in KV_BITS:
        raise AdvisorError(f"unknown KV cache dtype {name!r}; choose one of: {', '.join(KV_BITS)}")
    return KV_BITS[key]
