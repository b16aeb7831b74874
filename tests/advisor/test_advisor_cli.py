"""CLI in-process: JSON contracts of ``suanli advise memory`` and ``suanli tco``, tables,
and bad input that exits non-zero with a message naming the value (no traceback)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from suanli.cli import app

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8", "int8", "int4", "gptq-int4", "awq", "q4_k_m"])
def test_memory_json_contract(precision):
    res = run(
        "advise",
        "memory",
        "--model",
        "Qwen2.5-72B",
        "--task",
        "inference",
        "--precision",
        precision,
        "--context",
        "32768",
        "--batch",
        "2",
        "--json",
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert isinstance(data["total_bytes"], (int, float))
    assert set(data["components"]) >= {"weights", "kv_cache"}
    assert sum(data["components"].values()) == pytest.approx(data["total_bytes"])
    # 80 layers x 8 KV heads x 128 x 2 x 2 B = 327,680 B/token x 32768 x 2 sequences
    assert data["components"]["kv_cache"] == 327_680 * 32768 * 2


def test_memory_model_name_is_case_insensitive():
    a = json.loads(run("advise", "memory", "--model", "qwen2.5-72b", "--precision", "int4", "--json").output)
    b = json.loads(run("advise", "memory", "--model", "QWEN2.5-72B", "--precision", "INT4", "--json").output)
    assert a["total_bytes"] == b["total_bytes"] > 0


def test_memory_table_and_training_task():
    res = run("advise", "memory", "--model", "qwen2.5-72b", "--task", "inference", "--precision", "int4", "--context", "32768")
    assert res.exit_code == 0 and "kv_cache" in res.output and "total" in res.output
    res = run(
        "advise",
        "memory",
        "--model",
        "llama-3-70b",
        "--task",
        "full-finetune",
        "--gpus",
        "32",
        "--zero",
        "3",
        "--checkpointing",
        "full",
        "--json",
    )
    data = json.loads(res.output)
    assert data["zero"] == 3 and data["per_gpu_bytes"] < 80e9


def test_memory_from_params_and_config(tmp_path):
    data = json.loads(run("advise", "memory", "--params", "70B", "--json").output)
    assert data["components"]["weights"] == 140e9 and data["rough"]
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "intermediate_size": 11008,
                "vocab_size": 32000,
            }
        )
    )
    data = json.loads(run("advise", "memory", "--config", str(cfg), "--json").output)
    assert data["components"]["weights"] == 13_476_831_232  # = Llama-2-7B


def test_tco_json_contract_reproduces_seed003():
    res = run("tco", "--gpus", "256", "--model", "H100-SXM", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert 12 <= data["build_cost_per_gpu_hour"] <= 15
    assert data["rent_cost_per_gpu_hour"] == pytest.approx(14.7, abs=0.05)
    assert 0.55 <= data["break_even_utilization"] <= 0.62
    assert data["currency"] == "CNY"


def test_tco_utilization_option_and_table():
    low = json.loads(run("tco", "--gpus", "256", "--model", "H100", "--utilization", "0.3", "--json").output)
    assert low["build_cost_per_gpu_hour"] == pytest.approx(2 * 14.4924, rel=1e-3)
    assert low["cheaper"] == "rent"
    res = run("tco")
    assert res.exit_code == 0 and "break-even" in res.output


def test_fit_time_cost_commands():
    data = json.loads(run("advise", "fit", "--model", "llama-3-70b", "--task", "full-finetune", "--zero", "3", "--json").output)
    assert data["options"] and data["options"][0]["rank"] == 1
    assert run("advise", "fit", "--model", "llama-3-70b", "--task", "full-finetune", "--zero", "3").exit_code == 0
    t = json.loads(
        run("advise", "time", "--model", "llama-2-7b", "--gpu", "A100", "--gpus", "1024", "--tokens", "2T", "--json").output
    )
    assert t["days"] == pytest.approx(7.32, abs=0.01)
    d = json.loads(run("advise", "time", "--model", "qwen2.5-7b", "--gpu", "A100", "--task", "inference", "--json").output)
    assert d["tokens_per_second_per_sequence"] > 50
    c = json.loads(run("advise", "cost", "--gpu", "H100", "--gpus", "8", "--hours", "1000", "--json").output)
    assert c["best_per_plan"]["monthly"]["total"] == pytest.approx(168_960)


def test_plan_command(tmp_path):
    csv = tmp_path / "demand.csv"
    csv.write_text("hour,gpus\n" + "".join(f"{h},{3 if h < 10 else 2}\n" for h in range(100)))
    data = json.loads(run("plan", "--demand", str(csv), "--json").output)
    assert data["mode"] == "optimal" and 0 < data["saving_fraction"] < 1
    simple = json.loads(run("plan", "--demand", str(csv), "--mode", "simple", "--json").output)
    assert simple["mode"] == "decision-tree" and simple["reserved_gpus"] == 2
    assert run("plan", "--demand", str(csv)).exit_code == 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (("advise", "memory", "--model", "gpt-9"), "gpt-9"),
        (("advise", "memory", "--model", "llama-2-7b", "--precision", "int3"), "int3"),
        (("advise", "memory", "--model", "llama-2-7b", "--context", "-4096"), "-4096"),
        (("advise", "memory", "--model", "llama-2-7b", "--task", "rlhf"), "rlhf"),
        (("advise", "fit", "--model", "llama-2-7b", "--task", "full", "--zero", "7"), "7"),
        (("advise", "time", "--model", "llama-2-7b", "--gpu", "Z9000", "--tokens", "1T"), "Z9000"),
        (("advise", "time", "--model", "llama-2-7b", "--tokens", "lots"), "lots"),
        (("advise", "cost", "--gpu", "H100", "--hours", "-3"), "-3"),
        (("tco", "--utilization", "1.7"), "1.7"),
        (("tco", "--model", "A100"), "A100"),
        (("tco", "--gpus", "-8"), "-8"),
        (("plan", "--demand", "/nonexistent/demand.csv"), "demand.csv"),
    ],
)
def test_bad_input_exits_nonzero_with_message(args, needle):
    res = runner.invoke(app, list(args))
    assert res.exit_code != 0
    assert isinstance(res.exception, SystemExit)  # no traceback
    assert needle in res.output
    assert "Traceback" not in res.output


def test_memory_on_gpu_option():
    data = json.loads(
        run(
            "advise", "memory", "--model", "qwen2.5-72b", "--precision", "awq", "--context", "32768", "--gpu", "H100", "--json"
        ).output
    )
    assert data["total_bytes"] > 0 and data["on_gpu"]["fits"] and data["on_gpu"]["max_batch"] >= 1
    res = run("advise", "memory", "--model", "qwen2.5-72b", "--gpu", "H100")
    assert res.exit_code == 0 and "does not fit" in res.output
