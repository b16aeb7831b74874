"""Prices where renters look, in a real browser: the GPUs view says each model's prices
now (on demand, spot now, monthly, reserved) and the spot price moves with utilisation;
the instances and jobs tables say each workload's cost so far and rate now."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.console.console_helpers import row, sign_in
from tests.control.control_helpers import LiveServer

pytestmark = pytest.mark.browser


def yuan(value: float) -> str:
    return f"¥{value:,.2f}"


def test_gpus_view_shows_the_prices_and_spot_follows_utilisation(page: Page, console_server: LiveServer) -> None:
    gpus = {g["model"]: g for g in console_server.client().gpus()}
    sign_in(page, console_server.token)
    page.click("a[href='#gpus']")
    expect(page.locator("#live thead")).to_contain_text("ON DEMAND /GPU-h")
    for model in ("H100", "RTX4090", "A100-80G"):
        g = gpus[model]
        r = row(page, model)
        expect(r.locator("td[data-price=on-demand]")).to_have_text(yuan(g["price_per_gpu_hour"]))
        expect(r.locator("td[data-price=spot]")).to_have_text(yuan(g["spot_price_per_gpu_hour"]))
        expect(r.locator("td[data-price=monthly]")).to_have_text(yuan(g["monthly_price_per_gpu"]))
        expect(r.locator("td[data-price=reserved]")).to_have_text(f"{yuan(g['reserved_price_per_gpu'])} / 1 y")
    expect(row(page, "A100-80G").locator("td[data-price=on-demand]")).to_have_text("¥18.60")  # the book's price

    # renting 4 of the RTX4090 raises their spot price; the view shows it on its next refresh
    client = console_server.client()
    inst = client.create_instance(gpu_model="RTX4090", gpu_count=4, disk_gib=10)
    spot = row(page, "RTX4090").locator("td[data-price=spot]")
    assert client.instance(inst["id"])["state"] in ("pending", "running")
    expect(spot).not_to_have_text(yuan(gpus["RTX4090"]["spot_price_per_gpu_hour"]), timeout=20_000)
    new = {g["model"]: g for g in client.gpus()}["RTX4090"]
    assert new["spot_price_per_gpu_hour"] > gpus["RTX4090"]["spot_price_per_gpu_hour"]
    expect(spot).to_have_text(yuan(new["spot_price_per_gpu_hour"]))


def test_instances_and_jobs_tables_show_cost_so_far_and_rate(page: Page, console_server: LiveServer) -> None:
    client = console_server.client()
    inst = client.create_instance(name="priced-box", gpu_model="RTX4090", gpu_count=1, disk_gib=10)
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    box = row(page, "priced-box")
    expect(box.locator(".state")).to_have_text("running")
    expect(page.locator("#live thead")).to_contain_text("COST")
    expect(box.locator("td.rate")).to_have_text("¥1.97/h")  # 1.96 for the GPU + 10 GiB of disk
    expect(box.locator("td.rate")).to_have_attribute("title", re.compile(r"GPUs ¥1\.96/h \+ disk ¥0\.01/h"))
    expect(box.locator("td.cost")).to_have_text(re.compile(r"^¥\d"))
    first = int(box.locator("td.cost").get_attribute("data-cost") or 0)
    expect(box.locator("td.cost")).not_to_have_attribute("data-cost", str(first), timeout=20_000)  # it grows
    assert int(box.locator("td.cost").get_attribute("data-cost") or 0) > first
    client.stop_instance(inst["id"])
    expect(box.locator(".state")).to_have_text("stopped")
    expect(box.locator("td.rate")).to_have_text("¥0.01/h")  # the disk only

    job = client.launch({"name": "priced-job", "run": "sleep 30", "resources": {"accelerators": "H100:2"}})
    page.click("a[href='#jobs']")
    j = row(page, "priced-job")
    expect(j.locator(".state")).to_have_text("running")
    h100 = {g["model"]: g for g in client.gpus()}["H100"]["price_per_gpu_hour"]
    expect(j.locator("td.rate")).to_have_text(f"{yuan(2 * h100)}/h")
    client.cancel_job(job["id"])
