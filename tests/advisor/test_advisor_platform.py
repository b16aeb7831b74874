"""``advisor.platform``: fitting configurations priced from the platform's own book and
placed on its own nodes, from plain data (no billing, no database)."""

from __future__ import annotations

import pytest

from suanli.advisor import AdvisorError, service
from suanli.advisor.platform import NodeGpus, PlatformGpu, free_now, nodes_needed, on_platform, plan_name

TWO_EIGHTS = (NodeGpus(8, 8), NodeGpus(8, 8))


def _h100(nodes: tuple[NodeGpus, ...] = TWO_EIGHTS) -> PlatformGpu:
    prices = {"on-demand": 19.07, "spot": 3.81, "monthly": 14.67, "reserved": 8.58}
    return PlatformGpu("H100", "H100 SXM5 80GB", "CNY", prices, nodes)


def _ascend() -> PlatformGpu:
    prices = {"on-demand": 3.52, "spot": 0.70, "monthly": 2.71, "reserved": 1.58}
    return PlatformGpu("Ascend-910B", "Ascend 910B2", "CNY", prices, (NodeGpus(8, 8),))


def test_counts_the_nodes_cannot_hold_are_no_answer() -> None:
    assert nodes_needed(2, TWO_EIGHTS) == 1
    assert nodes_needed(16, TWO_EIGHTS) == 2  # a gang of two whole nodes
    assert nodes_needed(32, TWO_EIGHTS) is None  # 32 x H100 where 16 exist
    assert nodes_needed(12, TWO_EIGHTS) is None  # not whole nodes
    assert nodes_needed(8, (NodeGpus(4, 4), NodeGpus(4, 4)), tp=8) is None  # TP=8 across two 4-GPU nodes
    assert nodes_needed(8, (NodeGpus(4, 4), NodeGpus(4, 4)), tp=4) == 2
    assert nodes_needed(1, ()) is None
    assert free_now(8, (NodeGpus(8, 7), NodeGpus(8, 8)))
    assert not free_now(16, (NodeGpus(8, 7), NodeGpus(8, 8)))


def test_answers_are_this_platforms_price_for_the_gpus_they_need_cheapest_first() -> None:
    options = service.fit(model="llama-3.1-70b")
    answers = on_platform(options, [_h100(), _ascend()])
    assert [a.model for a in answers] == ["Ascend-910B", "H100"]
    assert [a.rank for a in answers] == [1, 2]
    h100 = answers[1]
    assert h100.gpus == 2 and h100.plan == "on-demand" and h100.price_per_gpu_hour == 19.07
    assert h100.price_per_hour == pytest.approx(2 * 19.07) and h100.prices_per_hour["monthly"] == pytest.approx(2 * 14.67)
    assert h100.free_now and (h100.free, h100.total) == (16, 16)
    prices = [a.price_per_hour for a in answers]
    assert prices == sorted(prices)
    monthly = on_platform(options, [_h100()], plan="monthly")
    assert monthly[0].plan == "monthly" and monthly[0].price_per_hour == pytest.approx(2 * 14.67)


def test_training_that_needs_more_gpus_than_exist_is_not_offered_here() -> None:
    options = service.fit(model="llama-3.1-70b", task="full-finetune", zero=3)
    need = next(o.gpus for o in options if o.gpu == "H100 SXM5 80GB")
    assert need > 16
    assert on_platform(options, [_h100()]) == []
    big = _h100(tuple(NodeGpus(8, 8) for _ in range(need // 8)))
    (answer,) = on_platform(options, [big])
    assert answer.gpus == need and answer.nodes == need // 8


def test_with_tokens_answers_are_sorted_by_the_runs_cost() -> None:
    options = service.fit(model="llama-3.1-8b", task="full-finetune", zero=3, tokens=1e9)
    result = service.platform(here=[_h100(), _ascend()], model="llama-3.1-8b", task="full-finetune", zero=3, tokens=1e9)
    assert result["sorted_by"] == "total_cost" and options
    totals = [a.total_cost for a in result["answers"]]
    assert totals == sorted(totals) and all(t and t > 0 for t in totals)


def test_plan_names_are_the_flags() -> None:
    assert plan_name("on_demand") == plan_name("On-Demand") == "on-demand"
    with pytest.raises(AdvisorError, match="choose one of: on-demand, spot, monthly, reserved"):
        plan_name("hourly")
    with pytest.raises(AdvisorError, match="unknown plan"):
        on_platform([], [_h100()], plan="weekly")
