"""The web console in a real browser against a real server: sign in, see the GPUs,
rent and stop an instance, launch a job and read its logs, refuse bad input, and show
a member only what a member may do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.console.console_helpers import row, sign_in
from tests.control.control_helpers import LiveServer

pytestmark = pytest.mark.browser


def test_sign_in_is_required_and_a_bad_token_is_refused(page: Page, console_server: LiveServer) -> None:
    page.goto("/")
    assert page.url.endswith("/console/")
    expect(page.locator("#login")).to_be_visible()
    sign_in(page, "not-a-token")
    expect(page.locator("#flash")).to_contain_text("not accepted")
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#tabs")).to_be_hidden()
    sign_in(page, console_server.token)
    expect(page.locator("#who")).to_contain_text("admin (admin)")
    page.click("a[href='#gpus']")
    expect(row(page, "H100")).to_contain_text("virtual")  # the demo inventory's GPUs, said to be virtual


def test_rent_an_instance_then_stop_and_delete_it(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    form = page.locator("#create-instance")
    form.locator("input[name=name]").fill("console-box")
    form.locator("select[name=gpu_model]").select_option("RTX4090")
    form.locator("select[name=share]").select_option("500")  # half a GPU
    expect(page.locator("#instance-price")).to_contain_text("per hour")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_have_text("Instance requested.")
    box = row(page, "console-box")
    expect(box.locator(".state")).to_have_text("running")
    expect(box).to_contain_text("RTX4090 × 0.5")
    assert "false" not in box.inner_text()  # a left-out button leaves nothing behind
    [inst] = console_server.client().instances()
    assert inst["gpu_milli"] == 500 and inst["allocations"][0]["milli_per_gpu"] == 500
    box.get_by_role("button", name="Stop").click()
    expect(box.locator(".state")).to_have_text("stopped")
    page.once("dialog", lambda d: d.accept())
    box.get_by_role("button", name="Delete").click()
    expect(box).to_have_count(0)
    assert [i["state"] for i in console_server.client().instances(include_deleted=True)] == ["deleted"]


def test_rent_a_spot_instance_with_a_max_price(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    form = page.locator("#create-instance")
    bid = form.locator("input[name=max_price]")
    expect(bid).to_be_hidden()  # a bid only means something for spot
    form.locator("input[name=name]").fill("spot-box")
    form.locator("select[name=gpu_model]").select_option("RTX4090")
    form.locator("select[name=priority]").select_option("spot")
    expect(bid).to_be_visible()
    bid.fill("-1")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("max_price: must not be negative")
    assert console_server.client().instances() == []
    bid.fill("0.01")  # below the RTX 4090's spot floor: it could never start, so it is refused
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("is below the spot price floor (RTX4090 ¥0.40")
    assert console_server.client().instances() == []
    bid.fill("0.41")  # above the floor, below the price with this GPU busy: it waits
    bid.dispatch_event("change")
    expect(page.locator("#instance-price")).to_contain_text("above max_price ¥0.41: it would wait")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_have_text("Instance requested.")
    box = row(page, "spot-box")
    expect(box).to_contain_text("spot ≤ 0.41/GPU-h")
    expect(box.locator("[data-waiting=price-above-bid]")).to_contain_text("spot price above the bid")
    expect(box).to_contain_text("spot price ¥")
    [inst] = console_server.client().instances()
    assert inst["max_price"] == "0.41" and inst["state"] == "pending"


def test_launch_a_job_and_read_its_logs(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#jobs']")
    form = page.locator("#launch-job")
    form.locator("input[name=name]").fill("<img src=x onerror=alert(1)>")  # shown as text, never as HTML
    form.locator("select[name=gpu_model]").select_option("H100")
    form.locator("input[name=count]").fill("2")
    form.locator("textarea[name=run]").fill("echo hello from $SUANLI_NODE_NAME with $CUDA_VISIBLE_DEVICES")
    form.locator("button[type=submit]").click()
    job = row(page, "<img src=x onerror=alert(1)>")
    expect(job.locator(".state")).to_have_text("succeeded")
    assert page.locator("#live img").count() == 0
    job.get_by_role("button", name="Logs").click()
    expect(page.locator("pre.logs")).to_contain_text(re.compile(r"hello from h100-\d with \d,\d"))


def test_bad_input_gets_the_api_message_and_changes_nothing(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#jobs']")
    form = page.locator("#launch-job")
    form.locator("select[name=gpu_model]").select_option("RTX4090")
    form.locator("input[name=count]").fill("16")  # the largest RTX4090 node has 4
    form.locator("textarea[name=run]").fill("true")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("never fits")
    assert console_server.client().jobs() == []


def test_a_member_sees_billing_but_not_operator_controls(page: Page, console_server: LiveServer) -> None:
    admin = console_server.client()
    admin.create_tenant("lab")
    admin.topup("lab", "1000")  # prepaid: a new tenant rents nothing without a balance
    member = admin.create_user("renter", role="member", tenant="lab")
    sign_in(page, member["token"])
    expect(page.locator("#who")).to_contain_text("renter (member)")
    expect(page.locator("a[href='#events']")).to_be_hidden()
    page.click("a[href='#billing']")
    expect(page.locator("#balance")).to_be_visible()
    page.click("a[href='#nodes']")
    expect(row(page, "h100-0")).to_be_visible()
    assert page.get_by_role("button", name="Cordon").count() == 0
    page.goto("/console/#events")  # typed by hand: the API still says no
    expect(page.locator("#flash")).to_contain_text("(forbidden)")


def test_an_operator_tops_up_a_prepaid_tenant_and_its_member_sees_what_is_left(page: Page, console_server: LiveServer) -> None:
    admin = console_server.client()
    admin.create_tenant("lab")
    member = admin.create_user("renter", role="member", tenant="lab")
    sign_in(page, console_server.token)
    page.click("a[href='#billing']")
    form = page.locator("#topup")
    form.locator("input[name=tenant]").fill("lab")
    form.locator("input[name=amount]").fill("12.50")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("Topped up lab by 12.50")
    expect(page.locator("#left")).to_have_text("post-paid")  # the operator's own tenant
    terms = page.locator("#terms")
    terms.locator("input[name=tenant]").fill("lab")
    terms.locator("input[name=storage_debt_limit]").fill("25")
    terms.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("Terms of lab: prepaid")
    assert admin.request("GET", "/v1/billing/terms", params={"tenant": "lab"})["storage_debt_limit"] == 25.0
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, member["token"])
    page.click("a[href='#billing']")
    expect(page.locator("#left")).to_have_text("¥12.50 left")
    assert page.locator("#topup").count() == 0  # members do not top up
    page.locator("#low-balance input[name=low_balance]").fill("5")
    page.locator("#low-balance button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("Low-balance alert set at 5")
    assert admin.request("GET", "/v1/billing/terms", params={"tenant": "lab"})["low_balance"] == 5.0


def test_the_advisor_says_what_fits_here_and_what_it_costs(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#advisor']")
    form = page.locator("#advise")
    form.locator("input[name=model]").fill("no-such-model")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("no-such-model")
    form.locator("input[name=model]").fill("llama-3.1-70b")
    form.locator("button[type=submit]").click()
    expect(page.locator("#memory-total")).to_contain_text("GiB")
    expect(page.locator("#advice h2").first).to_contain_text("On this platform: on-demand")
    h100 = page.locator("#advice table").first.locator("tr", has_text="H100")
    expect(h100).to_contain_text("TP=2")
    expect(h100).to_contain_text("16 of 16 (virtual)")
    expect(h100).to_contain_text("on-demand")
    expect(h100).to_contain_text("19.07")  # this platform's price book, per GPU-hour
    expect(h100).to_contain_text("38.13")  # 2 x 19.07, not the market's monthly 117.33
    expect(page.locator("#advice h2").nth(1)).to_contain_text("Market reference prices")


def test_an_operator_cordons_a_node(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#nodes']")
    node = row(page, "rtx4090-0")
    node.get_by_role("button", name="Cordon").click()
    expect(node.locator(".state")).to_have_text("cordoned")
    assert next(n for n in console_server.client().nodes() if n["name"] == "rtx4090-0")["state"] == "cordoned"
    page.click("a[href='#events']")
    expect(page.locator("#live")).to_contain_text("by admin")


def test_a_person_signs_in_with_password_and_enrols_the_second_factor_their_tenant_requires(
    page: Page, console_server: LiveServer
) -> None:
    import time

    import pyotp

    admin = console_server.client()
    admin.create_tenant("lab", require_2fa=True)
    admin.create_user("ana", role="member", tenant="lab", password="correct horse battery")
    page.goto("/")
    page.fill("#signin input[name=name]", "ana")
    page.fill("#signin input[name=password]", "wrong password!")
    page.click("#signin button")
    expect(page.locator("#flash")).to_contain_text("wrong user name, password or code")
    page.fill("#signin input[name=password]", "correct horse battery")
    page.click("#signin button")
    page.click("#enrol-start")  # the tenant requires a second factor: this session may only enrol
    expect(page.locator("#tabs")).to_be_hidden()
    secret = page.locator("#enrol-secret").text_content()
    assert secret
    page.fill("#enrol-confirm input[name=code]", pyotp.TOTP(secret).now())
    page.click("#enrol-confirm button")
    expect(page.locator("#flash")).to_contain_text("sign in again with a code")
    page.fill("#signin input[name=name]", "ana")
    page.fill("#signin input[name=password]", "correct horse battery")
    page.click("#signin button")
    expect(page.locator("#flash")).to_contain_text("wrong user name, password or code")  # no code: refused
    page.fill("#signin input[name=password]", "correct horse battery")
    totp = pyotp.TOTP(secret)
    page.fill("#signin input[name=code]", totp.at(time.time() + totp.interval))  # the confirming code is spent
    page.click("#signin button")
    expect(page.locator("#who")).to_contain_text("ana (member)")
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#signin")).to_be_visible()


def test_the_jobs_table_shows_a_pipelines_graph_state(page: Page, console_server: LiveServer, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    jobs = console_server.client().launch_pipeline(
        [
            {"name": "prep", "run": f"while [ ! -e {gate} ]; do sleep 0.1; done; exit 4"},
            {"name": "train", "depends_on": ["prep"], "run": "true"},
        ],
        "nightly",
    )
    prep = jobs[0]["id"]
    assert jobs[1]["depends_on"] == [prep], jobs
    sign_in(page, console_server.token)
    page.click("a[href='#jobs']")
    waiting = row(page, "train")
    expect(waiting.locator(".state")).to_have_text("queued")
    expect(waiting).to_contain_text(f"waiting for job {prep} (prep) to succeed")
    expect(waiting).to_contain_text(f"nightly#{prep}")
    dep = waiting.locator(f".dep[data-job='{prep}']")
    expect(dep).to_have_text(f"{prep} prep")
    expect(dep).to_have_class(re.compile(r"state-running"))
    gate.touch()
    expect(waiting.locator(".state")).to_have_text("cancelled")
    expect(waiting).to_contain_text(f"dependency job {prep} (prep) failed")
    expect(dep).to_have_class(re.compile(r"state-failed"))
    assert [j["state"] for j in console_server.client().jobs()] == ["failed", "cancelled"]
