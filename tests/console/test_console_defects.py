"""Issue 15: the console defects a new renter met, each with a test that fails without
its fix (headless Chromium, the console's own pages, a real server)."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.console.console_helpers import row, sign_in
from tests.control.control_helpers import LiveServer, wait_until


def test_a_good_token_clears_the_refusal_of_a_bad_one(page: Page, console_server: LiveServer) -> None:
    sign_in(page, "not-a-token")
    expect(page.locator("#flash")).to_contain_text("not accepted")
    page.fill("#login input[name=token]", console_server.token)  # the same page, no reload
    page.click("#login button")
    expect(page.locator("#who")).to_contain_text("admin (admin)")
    expect(page.locator("#flash")).to_be_hidden()


def test_a_rent_the_browser_blocks_does_not_keep_the_last_answer(page: Page, console_server: LiveServer) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    form = page.locator("#create-instance")
    form.locator("select[name=gpu_model]").select_option("RTX4090")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_have_text("Instance requested.")
    form.locator("input[name=disk_gib]").fill("0")  # below the field's minimum: the browser refuses to submit
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_be_hidden()
    assert len(console_server.client().instances()) == 1


def test_the_advisor_drops_an_old_answer_under_a_new_error_and_names_training_terms(
    page: Page, console_server: LiveServer
) -> None:
    sign_in(page, console_server.token)
    page.click("a[href='#advisor']")
    form = page.locator("#advise")
    form.locator("input[name=model]").fill("qwen2.5-7b")
    form.locator("select[name=task]").select_option("full-finetune")
    form.locator("button[type=submit]").click()
    memory = page.locator("#advice p").first
    expect(memory).to_contain_text("full fine-tune, sequence 4096, micro-batch 1")
    expect(memory).not_to_contain_text("undefined")
    form.locator("input[name=model]").fill("no-such-model")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("no-such-model")
    expect(page.locator("#memory-total")).to_have_count(0)


def test_a_fraction_rented_without_a_model_names_the_gpu_it_landed_on(page: Page, console_server: LiveServer) -> None:
    c = console_server.client()
    box = c.create_instance(name="any-half", gpu_milli=500)
    placed = wait_until(lambda: (i := c.instance(box["id"]))["allocations"] and i, 20)
    model = placed["allocations"][0]["gpu_model"]
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    expect(row(page, "any-half")).to_contain_text(f"{model} × 0.5")


def test_the_log_pane_is_named_for_its_job_and_follows_the_log(page: Page, console_server: LiveServer) -> None:
    job = console_server.client().launch(
        {
            "name": "counter",
            "resources": {"accelerators": "H100:1"},
            "run": "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.5; done",
        }
    )
    sign_in(page, console_server.token)
    page.click("a[href='#jobs']")
    counter = row(page, "counter")
    expect(counter.locator(".state")).to_have_text(re.compile("running|succeeded"))
    counter.get_by_role("button", name="Logs").click()
    expect(page.locator("#logs h2")).to_contain_text(f"Logs of job {job['id']} (counter)")
    expect(page.locator("pre.logs")).to_contain_text("line 8", timeout=30_000)  # no second click: it follows
    page.click("#logs-close")
    expect(page.locator("#logs")).to_be_hidden()


def test_a_phone_wide_page_does_not_scroll_sideways(page: Page, console_server: LiveServer) -> None:
    c = console_server.client()
    c.create_instance(name="a-box-with-a-long-name", gpu_model="h100", gpu_count=1, ports=[8888])
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, console_server.token)
    page.click("a[href='#instances']")
    expect(row(page, "a-box-with-a-long-name").locator(".state")).to_have_text("running")
    wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert wide[0] <= wide[1], f"the page is {wide[0]} px wide in a {wide[1]} px window"


def test_the_chinese_in_the_title_is_drawn_as_characters(page: Page, console_server: LiveServer) -> None:
    """Without a CJK font every character is the same empty box: 算 and 力, drawn alone
    in the page's font at one place, must differ from each other and from a character no
    font has (a private-use code point)."""
    page.goto("/")
    title = page.locator("h1 .zh")
    expect(title).to_have_text("算力")
    family = title.evaluate("e => getComputedStyle(e).fontFamily")
    drawn = page.evaluate(
        """(family) => ["A", "算", "力", "\\uE000"].map((ch) => {
             const c = document.createElement("canvas"); c.width = 64; c.height = 64;
             const g = c.getContext("2d"); g.font = "48px " + family; g.fillText(ch, 4, 52);
             return Array.from(g.getImageData(0, 0, 64, 64).data).join(","); })""",
        family,
    )
    assert drawn[0] != drawn[3], "the test draws nothing"
    assert len(set(drawn[1:])) == 3, "算 and 力 are drawn as the same box: no CJK font (fonts-noto-cjk)"
