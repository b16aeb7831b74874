"""Price book, cost per plan, TCO (seed 003) and purchase plans (seed 004)."""

from __future__ import annotations

import numpy as np
import pytest

from suanli.advisor.cost import best_per_plan, cost_options, spot_overhead
from suanli.advisor.errors import AdvisorError
from suanli.advisor.plan import PlanPrices, decision_tree_plan, mix_saving, optimal_plan, plan_prices, read_demand_csv
from suanli.advisor.pricebook import default_pricebook, parse_pricebook
from suanli.advisor.tco import TCOAssumptions, compute_tco


def test_pricebook_normalises_seed003_h100_to_14_7():
    # 84,480 CNY per 8-GPU node-month / 8 / 720 h = 14.667 CNY per GPU-hour
    book = default_pricebook()
    offer = book.cheapest("H100 SXM5 80GB", "monthly")
    assert offer.price_per_gpu_hour == pytest.approx(84480 / 8 / 720)
    assert not offer.derived and "84,480" in offer.source


def test_derived_plans_follow_seed004_rules():
    book = default_pricebook()
    od = next(o for o in book.for_gpu("A100 80GB SXM4", "on_demand") if o.provider.startswith("zhixingyun"))
    res = next(o for o in book.for_gpu("A100 80GB SXM4", "reserved") if o.provider.startswith("zhixingyun"))
    spot = next(o for o in book.for_gpu("A100 80GB SXM4", "spot") if o.provider.startswith("zhixingyun"))
    assert od.price_per_gpu_hour == 18.6 and not od.derived
    assert res.price_per_gpu_hour == pytest.approx(18.6 * 0.45) and res.derived  # 55 % off
    assert spot.price_per_gpu_hour == pytest.approx(18.6 * 0.20) and spot.derived
    usd = next(o for o in book.for_gpu("A100 80GB SXM4", "on_demand") if "seed 000" in o.provider)
    assert usd.price_per_gpu_hour == pytest.approx(1.5 * 7.2)  # 1.5 USD at the book's 7.2


def test_pricebook_rejects_bad_entries():
    with pytest.raises(AdvisorError, match="plan"):
        parse_pricebook({"offers": [{"provider": "x", "gpu": "H100", "plan": "lease", "price": 1}]})
    with pytest.raises(AdvisorError, match="negative"):
        parse_pricebook({"offers": [{"provider": "x", "gpu": "H100", "plan": "spot", "price": -1}]})
    with pytest.raises(AdvisorError, match="GPU"):
        parse_pricebook({"offers": [{"provider": "x", "gpu": "Z9", "plan": "spot", "price": 1}]})


def test_spot_overhead_grows_with_gang_size():
    rules = default_pricebook().rules
    # 0.01 reclaims per GPU-hour x 8 GPUs x (1 h / 2 + 0.25 h restart) = 6 %
    assert spot_overhead(rules, 8) == pytest.approx(0.06)
    assert spot_overhead(rules, 64) == pytest.approx(0.48)


def test_cost_options_bill_monthly_in_whole_months():
    lines = cost_options(default_pricebook(), "H100", 8, 1000)
    best = best_per_plan(lines)
    # 1000 h -> 2 months of 720 h: 8 x 1440 x 14.667 = 168,960 CNY (2 x 84,480)
    assert best["monthly"].total == pytest.approx(168_960)
    assert best["on_demand"].total == pytest.approx(8 * 1000 * 84480 / 8 / 720 * 1.3)
    assert best["spot"].billed_gpu_hours == pytest.approx(8 * 1000 * 1.06)
    assert [line.total for line in lines] == sorted(line.total for line in lines)


def test_cost_rejects_bad_input():
    with pytest.raises(AdvisorError, match="hours"):
        cost_options(default_pricebook(), "H100", 8, -5)
    with pytest.raises(AdvisorError, match="plan"):
        cost_options(default_pricebook(), "H100", 8, 5, plans=("lease",))


def test_tco_reproduces_seed003():
    r = compute_tco()
    # annual: (55 M + 10 M) x (1 - 0.4) / 3 + 4 M + 2.5 M = 19.5 M CNY
    # used GPU-hours: 256 x 8760 x 0.6 = 1,345,536 -> 14.49 CNY/GPU-h (seed: 12-15)
    assert r.annual_cost == pytest.approx(19.5e6)
    assert r.build_cost_per_gpu_hour == pytest.approx(19.5e6 / 1_345_536)
    assert 12 <= r.build_cost_per_gpu_hour <= 15
    assert r.rent_cost_per_gpu_hour == pytest.approx(14.67, abs=0.01)  # seed: 14.7
    # break-even: 19.5 M / (256 x 8760 x 14.667) = 59 % (seed: "below 60 % renting wins")
    assert r.break_even_utilization == pytest.approx(0.593, abs=0.001)
    # the seed's 3-year total of 80-100 M CNY: 65 M capex + 3 x 6.5 M = 84.5 M
    assert 80e6 <= r.total_cost_of_ownership <= 100e6
    assert r.currency == "CNY"
    assert sum(r.components_per_gpu_hour.values()) == pytest.approx(r.build_cost_per_gpu_hour)


def test_tco_without_resale_value():
    # same line items, nothing left after 3 years: 28.17 M / 1,345,536 = 20.93 CNY/GPU-h
    r = compute_tco(TCOAssumptions(residual_fraction=0.0))
    assert r.build_cost_per_gpu_hour == pytest.approx((65e6 / 3 + 6.5e6) / 1_345_536)
    assert r.break_even_utilization == pytest.approx(0.856, abs=0.001)
    assert r.cheaper == "rent"


def test_tco_bad_input():
    with pytest.raises(AdvisorError, match="utilization"):
        compute_tco(TCOAssumptions(utilization=1.5))
    with pytest.raises(AdvisorError, match="purchase price"):
        compute_tco(TCOAssumptions(gpu_model="A100"))
    with pytest.raises(AdvisorError, match="gpus"):
        compute_tco(TCOAssumptions(gpus=-1))


PRICES = PlanPrices(
    provider="test", gpu="A100 80GB SXM4", on_demand=10.0, monthly=10 / 1.3, reserved=4.5, spot=2.0, spot_overhead=0.0, sources={}
)


def _demand():
    d = np.full(100, 2.0)
    d[:10] = 3.0  # 2 GPUs for 100 h, a third for the first 10 h
    return d


def test_optimal_plan_by_hand():
    # R=0: 90 h x (1 spot 2 + 1 od 10) + 10 h x (1.5 spot 3 + 1.5 od 15)        = 1,260
    # R=1: 450 + 90 h x (1 spot) 2 + 10 h x (1.5 spot 3 + 0.5 od 5)            =   710
    # R=2: 900 + 10 h x (1 spot) 2                                              =   920
    # monthly: 10/1.3 x 720 = 5,538 per GPU, never worth it. All on-demand: 210 GPU-h x 10 = 2,100
    plan = optimal_plan(_demand(), PRICES, tolerance=0.5)
    assert plan.reserved_gpus == 1
    assert plan.monthly_gpus == [0]
    assert plan.total_cost == pytest.approx(710)
    assert plan.all_on_demand_cost == pytest.approx(2100)
    assert plan.saving_fraction == pytest.approx(1 - 710 / 2100)


def test_decision_tree_plan_by_hand():
    # slots 1 and 2 busy 24 h/day (> 16) -> reserved; slot 3 busy 10 % -> on-demand + spot:
    # 900 + 10 h x 1 spot GPU x 2 = 920
    plan = decision_tree_plan(_demand(), PRICES, tolerance=0.5)
    assert plan.reserved_gpus == 2
    assert plan.total_cost == pytest.approx(920)
    spot_only = decision_tree_plan(_demand(), PRICES, tolerance=0.5, needs_elastic=False)
    assert spot_only.on_demand_gpu_hours == 0 and spot_only.spot_gpu_hours == pytest.approx(10)


def test_zero_tolerance_means_no_spot():
    plan = optimal_plan(_demand(), PRICES, tolerance=0.0)
    assert plan.spot_gpu_hours == pytest.approx(0)
    # R=2 (900) + 10 h x 1 od (100) = 1,000 beats R=3 (1,350) and R=1 (450 + 90 x 10 + 10 x 20 = 1,550)
    assert plan.total_cost == pytest.approx(1000)


def test_seed004_mix_saving():
    # 30 % reserved at 45 % + 50 % spot at 20 % + 20 % on-demand = 43.5 % of on-demand
    assert mix_saving() == pytest.approx(0.565)
    # the seed's 42 % needs spot at ~49 % of on-demand
    assert mix_saving(spot_ratio=0.49) == pytest.approx(0.42)


def test_plan_prices_default_provider():
    p = plan_prices(default_pricebook(), "A100")
    assert p.provider.startswith("zhixingyun") and p.on_demand == 18.6
    assert p.spot_overhead == pytest.approx(0.06)


def test_demand_csv_parsing():
    assert list(read_demand_csv("hour,gpus\n0,3\n1,4\n")) == [3.0, 4.0]
    assert list(read_demand_csv("5\n6\n")) == [5.0, 6.0]
    with pytest.raises(AdvisorError, match="line 3"):
        read_demand_csv("hour,gpus\n0,3\n1,-4\n")
    with pytest.raises(AdvisorError, match="not a number"):
        read_demand_csv("hour,gpus\n0,three\n")
    with pytest.raises(AdvisorError, match="tolerance"):
        optimal_plan(_demand(), PRICES, tolerance=2)
