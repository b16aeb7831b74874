"""The advisor's "on this platform" answers: this platform's price book (the offers
``suanli gpus`` and billing use) and its nodes, each price labelled with its plan, sorted
by what the heading says; the catalog's market quotes stay, labelled as references.

The interface contract scripts rely on: ``suanli advise fit ... --json`` has
``platform.answers[*].price_per_hour`` = GPUs x the model's on-demand price per
GPU-hour (``billing.offers``; ``suanli gpus --json``'s ``price_per_gpu_hour``) and
``platform.answers[*].plan`` = ``"on-demand"``."""

from __future__ import annotations

import json

import pytest

from suanli.billing.money import MICROS
from suanli.billing.offers import offers
from tests.control.control_helpers import Server


def _fit(cli, *args: str) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(cli("advise", "fit", "--model", "llama-3.1-70b", "--platform", "--json", *args))


def test_advise_fit_prices_this_platform_from_its_own_book(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    data = _fit(cli)
    platform, answers = data["platform"], data["platform"]["answers"]
    assert platform["plan"] == "on-demand" and platform["sorted_by"] == "price_per_hour"
    with server.ctx.db.transaction() as s:
        book = offers(s)
    listed = {g["model"]: g.get("price_per_gpu_hour") for g in json.loads(cli("gpus", "--json"))}
    assert {a["model"] for a in answers} <= set(listed)  # node models, as `suanli gpus` names them
    for a in answers:
        assert a["plan"] == "on-demand", a
        assert a["price_per_hour"] == pytest.approx(a["gpus"] * book[a["model"]].on_demand_per_hour / MICROS), a
        if listed[a["model"]] is not None:  # `suanli gpus --json` shows the same price per GPU-hour
            assert a["price_per_hour"] == pytest.approx(a["gpus"] * listed[a["model"]], abs=0.01), a
    by_model = {a["model"]: a for a in answers}
    assert by_model["H100"]["price_per_gpu_hour"] == pytest.approx(19.07, abs=0.005)  # not the market's 14.67 monthly
    assert by_model["Ascend-910B"]["price_per_gpu_hour"] == pytest.approx(3.52, abs=0.005)
    assert by_model["A100-80G"]["price_per_gpu_hour"] == pytest.approx(18.60, abs=0.005)
    prices = [a["price_per_hour"] for a in answers]
    assert prices == sorted(prices), prices  # "cheapest first" is by price
    assert data["options_are"].startswith("market reference prices") and data["options"]  # the market stays
    assert "price per hour" in data["options_ranked_by"]

    cli("prices", "set", "h100", "on-demand", "30")  # a new price is the advisor's price at once
    h100 = next(a for a in _fit(cli)["platform"]["answers"] if a["model"] == "H100")
    assert h100["price_per_gpu_hour"] == pytest.approx(30) and h100["price_per_hour"] == pytest.approx(30 * h100["gpus"])

    spot = _fit(cli, "--plan", "spot")["platform"]
    assert spot["plan"] == "spot" and all(a["plan"] == "spot" for a in spot["answers"])
    assert "unknown plan" in cli("advise", "fit", "--model", "llama-3.1-70b", "--platform", "--plan", "hourly", code=2)


def test_only_configurations_the_nodes_can_hold_are_on_this_platform(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    """Full fine-tuning a 70B model takes 32 x H100; the demo inventory has 16."""
    data = _fit(cli, "--task", "full-finetune")
    market = {o["gpu"]: o["gpus"] for o in data["options"]}
    assert market["H100 SXM5 80GB"] == 32
    assert all(a["model"] != "H100" for a in data["platform"]["answers"])
    small = json.loads(cli("advise", "fit", "--model", "llama-3.1-8b", "--task", "lora", "--platform", "--json"))["platform"]
    have = {g["model"]: g["total"] for g in json.loads(cli("gpus", "--json"))}
    assert small["answers"] and all(a["gpus"] <= have[a["model"]] and a["nodes"] == 1 for a in small["answers"])


def test_tables_say_the_plan_and_which_prices_are_the_market(server: Server, cli) -> None:  # type: ignore[no-untyped-def]
    out = cli("advise", "fit", "--model", "llama-3.1-70b", "--platform")
    text = " ".join(out.split())
    assert "on this platform (on-demand" in text and "market reference prices" in text, out
    assert "on_demand" not in out, out  # plans print as the flags take them
    off = json.loads(cli("advise", "fit", "--model", "llama-3.1-70b", "--json"))  # not logged in: market only
    assert off["platform"] is None and "not logged in" in off["platform_note"] and off["options"]


def test_the_api_answers_for_this_platform(server: Server) -> None:
    got = server.post("/v1/advise/platform", {"model": "llama-3.1-70b", "plan": "monthly"}, expect=200).json()
    assert got["plan"] == "monthly" and got["answers"] and all(a["plan"] == "monthly" for a in got["answers"])
    assert server.post("/v1/advise/platform", {"model": "llama-3.1-70b", "plan": "weekly"}).status_code == 422
    assert server.http.post("/v1/advise/platform", json={"model": "llama-3.1-70b"}).status_code == 401
