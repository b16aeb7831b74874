"""Service entry points (shared by CLI and API) and whole-node billing."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from suanli.advisor import service, to_jsonable
from suanli.advisor.cost import best_per_plan, cost_options
from suanli.advisor.errors import AdvisorError
from suanli.advisor.memory import InferenceEstimate
from suanli.advisor.pricebook import default_pricebook
from suanli.advisor.training import TrainingEstimate
from suanli.cli import app


def test_memory_dispatches_on_task():
    inf = service.memory(model="llama-2-7b", task="inference", precision="bf16")
    train = service.memory(model="llama-2-7b", task="full-finetune", gpus=8, zero=3)
    assert isinstance(inf, InferenceEstimate) and isinstance(train, TrainingEstimate)
    assert train.zero == 3 and train.gpus == 8
    json.dumps(to_jsonable(train))  # serialisable for the API


def test_unknown_task_and_tco_keys():
    with pytest.raises(AdvisorError, match="rlhf"):
        service.memory(model="llama-2-7b", task="rlhf")
    with pytest.raises(AdvisorError, match="warp_drive"):
        service.tco(warp_drive=1)
    assert service.tco(utilization=0.3).build_cost_per_gpu_hour == pytest.approx(2 * 14.4924, rel=1e-3)


def test_bare_metal_nodes_bill_whole():
    # one H100 from an 8-GPU bare-metal monthly offer still pays the node: 84,480 CNY
    best = best_per_plan(cost_options(default_pricebook(), "H100", 1, 100))
    assert best["monthly"].total == pytest.approx(84_480)
    assert "8-GPU nodes" in best["monthly"].note
    # derived on-demand is per GPU: 100 h x 19.07
    assert best["on_demand"].total == pytest.approx(100 * 84480 / 8 / 720 * 1.3)


def test_config_costs_for_training_use_each_configs_time():
    rows = service.config_costs(model="llama-3-8b", task="lora", tokens=1e9, top=3)
    assert len(rows) == 3
    for row in rows:
        assert row["hours"] == pytest.approx(row["option"].training_hours)
        assert set(row["best_per_plan"]) == {"on_demand", "monthly", "reserved", "spot"}
    with pytest.raises(AdvisorError, match="hours"):
        service.config_costs(model="qwen2.5-72b", task="inference")


def test_cost_cli_per_configuration():
    res = CliRunner().invoke(app, ["advise", "cost", "--model", "qwen2.5-72b", "--precision", "awq", "--hours", "720", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["configurations"] and all(c["hours"] == 720 for c in data["configurations"])
    res = CliRunner().invoke(app, ["advise", "cost", "--gpu", "H100"])
    assert res.exit_code == 2 and "--hours" in res.output
