"""Issue 15: the dashboard, the console's first page. A renter sees what they spent per
day, what runs now with its cost, rate and uptime, and one workload's use over time; an
operator also sees allocation per GPU model, revenue, the queue and node health. Charts
are drawn by Chart.js from this server (the browser reaches nothing else)."""

from __future__ import annotations

import re
import time
from urllib.parse import urlparse

from playwright.sync_api import Page, expect
from sqlalchemy import select

from suanli.billing.tables import Usage
from suanli.control.dashboard import DAY_MS
from suanli.db.models import Tenant
from tests.console.console_helpers import row, sign_in
from tests.control.control_helpers import LiveServer, wait_until


def _spent(srv: LiveServer, tenant: str | int, micros: int) -> None:
    """A rated usage record of ``micros`` for ``tenant`` (name or id), an hour ago or at
    midnight UTC if that is later: the one-day window starts there (a record an hour ago
    fell out of it in the first hour of a day)."""
    assert srv.ctx is not None
    now_ms = int(time.time() * 1000)
    ms = max(now_ms - 3_600_000, now_ms - now_ms % DAY_MS)
    with srv.ctx.db.transaction() as s:
        tid = tenant if isinstance(tenant, int) else s.scalar(select(Tenant.id).where(Tenant.name == tenant))
        s.add(
            Usage(
                kind="transfer", source_id=987654, period_ms=ms, tenant_id=tid, workload_kind="instance", workload_id=0,
                gpu_model="", plan="on-demand", start_ms=ms, end_ms=ms + 6000, quantity=1, billed_seconds=0,
                unit_price=micros, amount=micros, currency="CNY", price_version=1, run_id="test",
            )
        )  # fmt: skip


def test_the_dashboard_shows_spend_running_work_its_use_and_the_platform(page: Page, console_server: LiveServer) -> None:
    own = urlparse(console_server.url).netloc
    page.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).netloc == own else route.abort())
    c = console_server.client()
    box = c.create_instance(name="dash-box", gpu_model="h100", gpu_count=2)
    failed = c.launch({"name": "doomed", "resources": {"accelerators": "H100:1"}, "run": "exit 3"})
    wait_until(lambda: c.instance(box["id"])["state"] == "running" and c.job(failed["id"])["state"] == "failed", 20)
    _spent(console_server, c.request("GET", "/v1/me")["tenant_id"], 3_000_000)
    page.add_init_script("localStorage.setItem('suanli.dashboard_days', '1')")  # hourly buckets: a minute of use shows
    sign_in(page, console_server.token)
    expect(page.locator("a[href='#dashboard']")).to_have_class("active")  # the first page
    expect(page.locator("#running-count")).to_have_text("1")
    expect(page.locator("#spend-total")).to_have_text(re.compile(r"^¥3\.\d\d$"))  # and the failed job's few seconds
    work = row(page, "dash-box")
    expect(work).to_contain_text("H100 × 2")
    expect(work).to_contain_text(" min")  # its uptime
    assert page.evaluate(
        "() => typeof Chart === 'function' && ['spend-chart', 'allocation-chart', 'revenue-chart'].every((id) => Chart.getChart(id))"
    )
    allocated = page.evaluate(
        "() => Chart.getChart('allocation-chart').data.datasets.find((d) => d.label === 'H100').data.at(-1)"
    )
    assert allocated > 0, allocated  # the instance's two H100s, as a share of the model's
    # a refresh (every second here) draws its charts before the last ones go: looked at every
    # 20 ms for three refreshes, a chart is always there (the last ones were destroyed while
    # the API was asked again, and a look in between found none)
    missing_at = page.evaluate(
        """async () => {
             for (let i = 0; i < 150; i++) {
               if (!Chart.getChart('allocation-chart')) return i;
               await new Promise((r) => setTimeout(r, 20));
             }
             return -1;
           }"""
    )
    assert missing_at == -1, f"no allocation chart at look {missing_at}"
    expect(page.locator("#queue-length")).to_have_text("0")
    expect(page.locator("#held-now")).to_contain_text("H100 2/")
    expect(page.locator("#node-states")).to_contain_text("ready")
    alert = page.locator("#alerts tbody tr", has_text="job_failed")
    expect(alert).to_contain_text(f"job-{failed['id']}")  # made from the job's failure within seconds
    work.get_by_role("button", name="Use").click()
    usage = page.locator("#usage")
    expect(usage.locator("h2")).to_contain_text(f"Use of instance {box['id']} (dash-box)")
    expect(usage).to_contain_text("not measured")  # the demo's GPUs are virtual: no GPU figure is invented


def test_a_member_sees_their_own_spending_and_not_the_platform(page: Page, console_server: LiveServer) -> None:
    c = console_server.client()
    c.request("POST", "/v1/tenants", json={"name": "acme"})
    token = c.request("POST", "/v1/users", json={"name": "renter", "tenant": "acme"})["token"]
    _spent(console_server, "acme", 1_250_000)
    sign_in(page, token)
    expect(page.locator("#spend-total")).to_have_text("¥1.25")
    expect(page.locator("#running-count")).to_have_text("0")
    expect(page.locator("#revenue-total")).to_have_count(0)
    page.select_option("#dashboard-days", "7")
    page.wait_for_function("() => Chart.getChart('spend-chart') && Chart.getChart('spend-chart').data.labels.length === 7")
