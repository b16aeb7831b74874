"""Architectures: counts derived from shapes agree with models.csv; HF configs; --params."""

from __future__ import annotations

import csv
import json
from importlib import resources

import pytest

from suanli.advisor.catalog import find_gpu
from suanli.advisor.errors import AdvisorError
from suanli.advisor.models import bundled_models, find_model, from_hf_config, load_hf_config, parse_params, resolve_model


def _csv_rows():
    text = resources.files("suanli.advisor").joinpath("data/models.csv").read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


@pytest.mark.parametrize("row", _csv_rows(), ids=lambda r: r["model"])
def test_counts_match_models_csv(row):
    m = find_model(row["model"])
    assert m.params / 1e9 == pytest.approx(float(row["params_computed_B"]), abs=0.006)
    assert m.active_params / 1e9 == pytest.approx(float(row["params_active_computed_B"]), abs=0.006)
    assert m.kv_bytes_per_token_16bit == int(row["kv_bytes_per_token_bf16"])


def test_names_are_case_insensitive_and_aliased():
    assert find_model("qwen2.5-72b").name == "Qwen2.5-72B"
    assert find_model("LLAMA-3-70B").name == "Llama-3-70B"
    assert find_model("llama-3.1-8b").name == "Llama-3-8B"


def test_unknown_model_lists_the_bundled_ones():
    with pytest.raises(AdvisorError, match="unknown model 'gpt-5'.*Llama-2-7B"):
        find_model("gpt-5")


def test_hf_config_file(tmp_path):
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
    }
    path = tmp_path / "Qwen2.5-7B-Instruct" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    m = load_hf_config(path)
    assert m.name == "Qwen2.5-7B-Instruct"
    assert m.qkv_bias  # qwen2 configs do not say so, but the model has q/k/v biases
    assert m.params == find_model("Qwen2.5-7B").params


def test_hf_config_moe_and_mla_keys():
    cfg = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }
    m = from_hf_config(cfg)
    assert m.params / 1e9 == pytest.approx(671.03, abs=0.01)
    assert m.active_params / 1e9 == pytest.approx(37.55, abs=0.01)
    assert m.kv_bytes_per_token_16bit == 70_272


def test_bad_configs(tmp_path):
    with pytest.raises(AdvisorError, match="not found"):
        load_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "t5.json"
    bad.write_text(json.dumps({"d_model": 1024, "num_layers": 24}))
    with pytest.raises(AdvisorError, match="missing"):
        load_hf_config(bad)


@pytest.mark.parametrize("text,value", [("70B", 70e9), ("800M", 800e6), ("1.5e9", 1.5e9), ("7", 7e9), ("1.2T", 1.2e12)])
def test_parse_params(text, value):
    assert parse_params(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["-7B", "seventy", "0"])
def test_parse_params_rejects(text):
    with pytest.raises(AdvisorError):
        parse_params(text)


def test_resolve_needs_exactly_one_source():
    with pytest.raises(AdvisorError, match="exactly one"):
        resolve_model(name="Llama-2-7B", params="7B")
    with pytest.raises(AdvisorError, match="exactly one"):
        resolve_model()


def test_all_bundled_models_present():
    assert len(bundled_models()) == 11


@pytest.mark.parametrize(
    "query,name",
    [
        ("H100", "H100 SXM5 80GB"),
        ("h100-sxm", "H100 SXM5 80GB"),
        ("A100-80G", "A100 80GB SXM4"),
        ("4090", "RTX 4090"),
        ("910B", "Ascend 910B2"),
        ("mi300x", "MI300X"),
    ],
)
def test_gpu_lookup(query, name):
    assert find_gpu(query).name == name


def test_gpu_classes_and_mfu():
    assert find_gpu("A100").gpu_class == "nvidia-datacenter"
    assert find_gpu("A100").default_mfu == 0.40
    assert find_gpu("4090").gpu_class == "nvidia-consumer"
    assert find_gpu("L40S").gpu_class == "nvidia-pcie"
    assert find_gpu("MI300X").default_mfu == 0.25


def test_unknown_gpu():
    with pytest.raises(AdvisorError, match="unknown GPU model 'Z9000'"):
        find_gpu("Z9000")
