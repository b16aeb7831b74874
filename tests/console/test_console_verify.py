"""The console's 'verified' mark (``suanli verify`` results) on the nodes and GPUs pages."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.console.console_helpers import row, sign_in
from tests.control.control_helpers import LiveServer
from tests.verify.verify_helpers import cuda_report

pytestmark = pytest.mark.browser


def test_nodes_and_gpus_show_the_verified_mark_and_a_failure_with_its_reason(page: Page, console_server: LiveServer) -> None:
    admin = console_server.client()
    passed = admin.add_verification("h100-0", cuda_report("h100_sxm5_x8.json", 8))
    failed = admin.add_verification("a100-0", cuda_report("h100_sxm5_x8.json", 8))  # an H100 node registered as A100
    assert (passed["status"], failed["status"], failed["node_state"]) == ("passed", "failed", "cordoned"), failed
    sign_in(page, console_server.token)
    page.click("a[href='#nodes']")
    day = passed["at"][:10]
    expect(row(page, "h100-0").locator("td.verified")).to_have_text(f"✓ verified {day} (TFLOPS 80 %, mem 107 %)")
    bad = row(page, "a100-0")
    expect(bad.locator("td.verified")).to_contain_text(
        f"✗ failed {day}: verify failed: GPU 0: wrong model: sold as A100 80GB SXM4"
    )
    expect(bad.locator(".state")).to_have_text("cordoned")
    expect(row(page, "h100-1").locator("td.verified")).to_have_text("not verified")
    page.click("a[href='#gpus']")
    expect(page.locator("#live thead")).to_contain_text("ON DEMAND")  # the GPUs view, not the nodes' rows still shown
    expect(row(page, "H100").locator("td.verified")).to_have_text(f"1/1 nodes verified {day}, TFLOPS ≥ 80 %")


def test_the_verify_button_starts_a_verification_job_that_uncordons_a_cordoned_node_on_a_pass(
    page: Page, console_server: LiveServer
) -> None:
    admin = console_server.client()
    admin.add_verification("a100-0", cuda_report("h100_sxm5_x8.json", 8))  # fails: cordoned
    sign_in(page, console_server.token)
    page.click("a[href='#nodes']")
    row(page, "a100-0").locator("button.verify").click()
    expect(page.locator("#flash")).to_contain_text("Verification of a100-0 queued.")
    run = admin.verify_run("a100-0", 1)
    assert (run["node"], run["uncordon"], run["actor"]) == ("a100-0", True, "admin"), run
    assert admin.request("GET", f"/v1/jobs/{run['job_id']}")["name"] == "verify-a100-0"
